"""The report's critical-path chart: what the path of each step runs through, by GPU count per sweep.

``path_parts(db, best)`` reads critical_path_summary for the fastest run of each sweep at each GPU
count (``best``: run_id, sweep, world_size) and gives one row per run × kind: the kind's share of
the path (Σ over the run's steps of the kind's time ÷ Σ path length) and its ms per step.
``build_critical_path`` draws it: one stacked bar per sweep and GPU count, the kinds in a fixed
order from compute to communication to host.  Where the bars turn from compute to communication
and waiting as GPUs are added is the knee of the sweep.  ``CHART`` is its entry in the report's
chart list (reports/charts.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import altair as alt
import polars as pl

from scaletrace.reports.chartkit import LABEL_FONT, MS, WIDTH, data
from scaletrace.reports.words import gpus

if TYPE_CHECKING:
    from scaletrace.pipeline.store.db import Database

KINDS = {"compute_kernel": "compute kernels", "memory": "memory copies", "comm_transfer": "transfer",
         "comm_wait": "waiting in a collective", "launch_delay": "launch delay", "cpu_op": "host ops",
         "host_gap": "host gap"}
COLOURS = ["#4c78a8", "#72b7b2", "#e45756", "#ff9da6", "#f58518", "#b279a2", "#bab0ac"]
MIN_LABELLED_PCT = 8.0


def path_parts(db: "Database", best: pl.DataFrame) -> pl.DataFrame:
    """run_id, sweep, world_size, label, kind, pct (of the path), ms_per_step, order; empty without paths."""
    empty = pl.DataFrame(schema={"run_id": pl.String, "sweep": pl.String, "world_size": pl.Int64,
                                 "label": pl.String, "kind": pl.String, "pct": pl.Float64,
                                 "ms_per_step": pl.Float64, "order": pl.Int64})
    if best.is_empty():
        return empty
    summary = db.query("critical_path_summary").join(best.select("run_id", "sweep", "world_size"), on="run_id")
    if summary.is_empty():
        return empty
    totals = summary.group_by("run_id", "sweep", "world_size").agg(
        pl.col("path_ns").sum(), pl.len().alias("steps"), *(pl.col(f"{k}_ns").sum() for k in KINDS))
    rows = [totals.select("run_id", "sweep", pl.col("world_size").cast(pl.Int64),
                          kind=pl.lit(words), pct=100 * pl.col(f"{k}_ns") / pl.col("path_ns"),
                          ms_per_step=pl.col(f"{k}_ns") / pl.col("steps") / 1e6, order=pl.lit(i, pl.Int64))
            for i, (k, words) in enumerate(KINDS.items())]
    long = pl.concat(rows).filter(pl.col("pct") > 0)
    long = long.with_columns(label=pl.col("sweep") + " · " + pl.col("world_size").map_elements(gpus, pl.String))
    return long.sort("sweep", "world_size", "order").select(empty.columns)


def build_critical_path(parts: pl.DataFrame) -> alt.LayerChart:
    """A stacked bar per sweep × GPU count: the path's time by kind, % of the path."""
    order = parts.sort("sweep", "world_size")["label"].unique(maintain_order=True).to_list()
    x = alt.X("pct:Q", title="% of the critical path (Σ over profiled steps)", stack="zero",
              scale=alt.Scale(domain=[0, 100]))
    y = alt.Y("label:N", title=None, sort=order)
    bars = alt.Chart(data(parts)).mark_bar().encode(
        y=y, x=x, order="order:Q",
        color=alt.Color("kind:N", title="on the path", sort=list(KINDS.values()),
                        scale=alt.Scale(domain=list(KINDS.values()), range=COLOURS)),
        tooltip=["label:N", "kind:N", alt.Tooltip("pct:Q", title="% of the path", format=".1f"),
                 alt.Tooltip("ms_per_step:Q", title="ms per step", format=MS)])
    labels = alt.Chart(data(parts)).mark_text(align="right", dx=-3, fontSize=LABEL_FONT, color="white").encode(
        y=y, x=x, order="order:Q",
        text=alt.condition(f"datum.pct >= {MIN_LABELLED_PCT}", alt.Text("pct:Q", format=".0f"), alt.value("")))
    return (bars + labels).properties(width=WIDTH, height=alt.Step(22))


def chart_spec():
    """The chart's entry in reports/charts.py's list (built on call: that module imports this one)."""
    from scaletrace.reports.charts import ChartSpec, of_best

    return ChartSpec(
        "critical_path", "What the critical path runs through",
        "For the fastest run of each sweep at each GPU count: the critical path of its profiled steps (query "
        "critical_path_summary: from the end of the slowest rank's step back to its start, what each piece of "
        "work waited for, across threads, streams and ranks; its length is the slowest rank's step window, which "
        "starts where the previous step's ends) by kind, "
        "as % of the path summed over steps. Compute kernels at small scale giving way to transfer, waiting in "
        "a collective and a late rank's host as GPUs are added is where the sweep's returns diminish.",
        of_best("No critical path: needs GPU traces with ProfilerStep annotations."), "critical_path",
        lambda df: df, build_critical_path)
