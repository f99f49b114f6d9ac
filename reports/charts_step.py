"""Per-run charts: where step time goes (% of span and ms of the step), bandwidth by size, per rank.

A run whose device span is a sliver of its step (``sliver_note``, reports/device_share.py) is not
drawn as a stack of parts: its row carries the words instead (chartkit.with_slivers).
"""

from __future__ import annotations

import altair as alt
import polars as pl

from scaletrace.reports.chartkit import (LABEL_FONT, MS, PART_COLOURS, PARTS, WIDTH, data, drawn, si_time,
                                         with_slivers)
from scaletrace.reports.order import run_order
from scaletrace.reports.words import present

MIN_LABELLED_PCT = 7.0  # stacked segments narrower than this share of the bar carry no text label


def _basis_ns(df: pl.DataFrame) -> pl.Expr:
    """The step length a run's bar is drawn on and labelled with (run_breakdown.step_basis_ns: the
    device's steady-state step period, or the step time for traces without ProfilerSteps;
    docs/metrics.md "The step model"); the step time where the column is absent."""
    return pl.col("step_basis_ns") if "step_basis_ns" in df.columns else pl.col("step_time_ns")


def _long_parts(breakdown: pl.DataFrame, axis_ms: float | None = None) -> pl.DataFrame:
    """One row per run × part (slivers left out): its exact share of the span (run_summary's figure)
    and ms of the step; axis_pct = ms as a share of the axis (``axis_ms``, default the longest step):
    whether a label fits."""
    rows = []
    bars = drawn(breakdown)
    longest_ms = axis_ms or (bars.select(_basis_ns(bars).max()).item() or 0) / 1e6
    for i, (key, name) in enumerate(PARTS.items()):
        rows.append(bars.select(
            "run_id", pct=pl.col(f"{key}_pct"), ms=pl.col(f"{key}_of_step_ns") / 1e6,
            step_ms=_basis_ns(bars) / 1e6, part=pl.lit(name), order=pl.lit(i)))
    long = pl.concat(rows)
    return long.with_columns(axis_pct=100 * pl.col("ms") / longest_ms if longest_ms else pl.lit(None))


def _stacked(long: pl.DataFrame, field: str, title: str, fmt: str, x_scale: alt.Scale | None,
             width_field: str, order: list[str] | None = None) -> alt.LayerChart:
    """Stacked bars of ``field`` per run and part, labelled where the segment is wide enough (``order``:
    the runs on the y axis, top first; default those of ``long``)."""
    order = order or breakdown_order(long)
    x = alt.X(f"{field}:Q", title=title, stack="zero", **({"scale": x_scale} if x_scale else {}))
    bars = alt.Chart(data(long)).mark_bar().encode(
        y=alt.Y("run_id:N", title=None, sort=order), x=x,
        color=alt.Color("part:N", title="part", sort=list(PARTS.values()),
                        scale=alt.Scale(domain=list(PARTS.values()), range=PART_COLOURS)),
        order="order:Q",
        tooltip=["run_id:N", "part:N", alt.Tooltip("pct:Q", title="% of span", format=".2f"),
                 alt.Tooltip("ms:Q", title="ms of the step", format=".2f")])
    dark = alt.FieldOneOfPredicate(field="part", oneOf=list(PARTS.values())[:3])
    labels = alt.Chart(data(long)).mark_text(align="right", dx=-3, fontSize=LABEL_FONT).encode(
        y=alt.Y("run_id:N", sort=order), x=x, order="order:Q",
        color=alt.condition(dark, alt.value("white"), alt.value("#333")),
        text=alt.condition(f"datum.{width_field} >= {MIN_LABELLED_PCT}", alt.Text(f"{field}:Q", format=fmt),
                           alt.value("")))
    return bars + labels


def breakdown_order(df: pl.DataFrame) -> list[str]:
    return df["run_id"].unique(maintain_order=True).to_list()


def build_step_breakdown(breakdown: pl.DataFrame) -> alt.HConcatChart:
    long = _long_parts(breakdown)
    order = breakdown_order(breakdown)
    pct_scale = alt.Scale(domain=[0, 100], nice=False)
    stacked = with_slivers(_stacked(long, "pct", "% of the traced span (mean over ranks)", ".0f", pct_scale, "pct",
                                     order), breakdown, "run_id", order, pct_scale).properties(
        title="Where step time goes (% of span)", width=WIDTH, height=alt.Step(22))
    hidden_bars = alt.Chart(data(breakdown)).mark_bar(color="#9ecae1").encode(
        y=alt.Y("run_id:N", title=None, sort=order, axis=None),
        x=alt.X("overlapped_comm_pct:Q", title="comm under compute (% of span)"),
        tooltip=["run_id:N", alt.Tooltip("overlapped_comm_pct:Q", format=".2f")])
    hidden = (hidden_bars + hidden_bars.mark_text(align="left", dx=3, fontSize=LABEL_FONT).encode(
        text=alt.Text("overlapped_comm_pct:Q", format=".1f"))).properties(
        title="Comm hidden under compute", width=WIDTH // 3, height=alt.Step(22))
    return alt.hconcat(stacked, hidden)


def build_step_time(breakdown: pl.DataFrame) -> alt.LayerChart:
    order = breakdown_order(breakdown)
    totals = _spread(drawn(breakdown))
    axis_ms = 1.3 * (totals["label_ms"].max() or 1)  # the longest whisker and its label fit
    room = alt.Scale(domain=[0, axis_ms])
    long = _long_parts(breakdown, axis_ms)
    stacked = _stacked(long, "ms", "step time (ms)", MS, room, "axis_pct", order)
    y = alt.Y("run_id:N", sort=order)
    spread = totals.filter(pl.col("p95_ms") > pl.col("step_ms"))
    whisker = alt.Chart(data(spread)).mark_rule(color="#222").encode(
        y=y, x=alt.X("step_ms:Q", scale=room), x2="p95_ms:Q",
        tooltip=["run_id:N", alt.Tooltip("step_ms:Q", title="p50 step (ms)", format=MS),
                 alt.Tooltip("p95_ms:Q", title="p95 step (ms)", format=MS), "spread_steps:Q"])
    tick = alt.Chart(data(spread)).mark_tick(color="#222", thickness=1.5, size=12).encode(
        y=y, x=alt.X("p95_ms:Q", scale=room))
    total = alt.Chart(data(totals)).mark_text(align="left", dx=4, fontSize=LABEL_FONT, fontWeight="bold").encode(
        y=y, x=alt.X("label_ms:Q", scale=room), text="si_label:N")
    return with_slivers(stacked + whisker + tick + total, breakdown, "run_id", order, room).properties(
        title=alt.TitleParams("Step time and where it goes (ms)",
                              subtitle="bar: the median step (p50); whisker to the 95th percentile over steps (p95; in the "
                                       "step log, the first step and the one after the profiled window, where "
                                       "the trace was exported, left out)"),
        width=WIDTH + 80, height=alt.Step(22))


def _spread(bars: pl.DataFrame) -> pl.DataFrame:
    """Per run: the median step (run_summary's step time, step_ms: the whisker's start), its p95 over
    steps (query step_time_spread; none: the bar alone), the bar's length (bar_ms: run_breakdown's
    step_basis_ns) and the label 'p50 · p95' at the end of the bar or whisker.  Where the bar is the
    device's steady-state step period (run_breakdown.step_basis 'device_period') and the run's step
    time (the host's step) differs from it by over 10 % (as the device-behind check), the label says
    both ('2.10 ms device · host step 1.47 ms')."""
    device = ((pl.col("step_basis") == "device_period")
              & ((_basis_ns(bars) > 1.1 * pl.col("step_time_ns")) | (1.1 * _basis_ns(bars) < pl.col("step_time_ns")))
              if "step_basis" in bars.columns else pl.lit(False))
    df = bars.select("run_id", "step_time_ns", basis_ns=_basis_ns(bars), device=device.fill_null(False),
                     step_ms=pl.col("step_time_ns") / 1e6, bar_ms=_basis_ns(bars) / 1e6,
                     p95_ms=(pl.col("p95_ns") / 1e6) if "p95_ns" in bars.columns else pl.lit(None, pl.Float64),
                     spread_steps=pl.col("spread_steps") if "spread_steps" in bars.columns else pl.lit(None, pl.Int64))
    text = [(f"{si_time(r['basis_ns'])} device · host step {si_time(r['step_time_ns'])}" if r["device"]
             else f"{si_time(r['basis_ns'])}") + (f" · p95 {si_time(r['p95_ms'] * 1e6)}"
                                                   if present(r["p95_ms"]) and r["p95_ms"] > r["step_ms"] else "")
            for r in df.iter_rows(named=True)]
    return df.with_columns(pl.Series("si_label", text, dtype=pl.String),
                           label_ms=pl.max_horizontal("bar_ms", "p95_ms"))


def build_bandwidth(bandwidth: pl.DataFrame) -> alt.Chart:
    return alt.Chart(data(bandwidth)).mark_point(filled=True).encode(
        x=alt.X("size_bucket_bytes:Q", title="message size (bytes, power-of-two bucket)",
                scale=alt.Scale(type="log", base=2)),
        y=alt.Y("median_busbw_gbps:Q", title="median bus bandwidth (GB/s)"),
        color=alt.Color("collective:N", title="collective"), shape="collective:N",
        tooltip=["run_id:N", "collective:N", "pg_name:N", "count:Q",
                 alt.Tooltip("median_busbw_gbps:Q", format=".2f")],
    ).properties(title="Collective bus bandwidth vs message size", width=WIDTH, height=260)


def build_rank_wait(rank_wait: pl.DataFrame, order_keys: pl.DataFrame | None = None) -> alt.VConcatChart:
    """A panel per run in run order (reports/order.py: the workload and world_size columns, or
    ``order_keys``'; without either, runs sort by their rank count)."""
    if order_keys is None and "world_size" not in rank_wait.columns:
        order_keys = rank_wait.group_by("run_id").agg(world_size=pl.col("rank").n_unique())
    keyed = rank_wait.join(order_keys, on="run_id", how="left") if order_keys is not None else rank_wait
    position = {r: i for i, r in enumerate(run_order(keyed))}
    rank_wait = rank_wait.with_columns(run_order=pl.col("run_id").replace_strict(position, return_dtype=pl.Int64))
    top = rank_wait.group_by("run_id").agg(pl.col("straggler_count").max().alias("top"))
    df = (rank_wait.join(top, on="run_id")
          .with_columns(straggler=(pl.col("straggler_count") == pl.col("top")) & (pl.col("top") > 0))
          .unpivot(index=["run_id", "run_order", "rank", "straggler", "straggler_count", "num_steps"],
                   on=["exposed_transfer_ns", "exposed_wait_ns"], variable_name="part", value_name="ns")
          # per profiled step, the basis of every other chart (the whole trace where no ProfilerStep)
          .with_columns(ms=pl.col("ns") / 1e6 / pl.col("num_steps").fill_null(1).clip(lower_bound=1),
                        part=pl.col("part").replace_strict({"exposed_transfer_ns": "transfer",
                                                            "exposed_wait_ns": "waiting for a slow peer"})))
    def panel(run: str) -> alt.Chart:
        return alt.Chart().mark_bar().transform_filter(alt.FieldEqualPredicate(field="run_id", equal=run)).encode(
            x=alt.X("rank:O", title="rank", axis=alt.Axis(labelAngle=0, labelOverlap="greedy")),
            y=alt.Y("sum(ms):Q", title="exposed comm (ms per step)"),
            color=alt.Color("part:N", title="exposed comm"), detail="straggler:N",
            stroke=alt.condition("datum.straggler", alt.value("black"), alt.value(None)),
            strokeWidth=alt.condition("datum.straggler", alt.value(2), alt.value(0)),
            tooltip=["run_id:N", "rank:O", "part:N", alt.Tooltip("ms:Q", format=".2f"), "straggler_count:Q"],
        ).properties(width=WIDTH, height=140, title=alt.TitleParams(run, anchor="start", fontSize=12))

    # a panel per run in run order, each on its own axes (a short run is not flattened by a long one)
    panels = [panel(run) for run in sorted(position, key=position.get)]
    return alt.vconcat(*panels, data=data(df)).resolve_scale(x="independent", y="independent", color="shared").properties(
        title="Per rank: exposed comm split into transfer and waiting (outlined: the usual straggler)")
