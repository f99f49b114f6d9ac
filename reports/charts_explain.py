"""Charts of the report's "Why efficiency drops" section: GPU-time per token by part, efficiency
points lost per GPU-count step by part, and the kernel families that grew.

Numbers are scaling_attribution's (and sweep_run_parts', run_diff's): see their
query headers.  Exposed communication is drawn as its transfer and its waiting
for a slower peer, so the stacks still sum to the total.

The idle breakdown and compute efficiency charts draw reports/efficiency.py's
tables (idle_breakdown's parts per step; compute_efficiency and op_efficiency
per family) of the same runs, one bar per run.
"""

from __future__ import annotations

import altair as alt
import polars as pl

from scaletrace.reports.chartkit import LABEL_FONT, MS, WIDTH, data, drawn, with_label, with_slivers
from scaletrace.reports.words import gpus
from scaletrace.reports.efficiency import ALL_OPS, FAMILIES, IDLE_PARTS

WHY = "Why efficiency drops"  # the report section these charts open (reports/charts.py ChartSpec.section)
# (column stem in the data, label, colour) in stacking order; run_summary's part colours, waiting lighter
PARTS = [("compute", "compute", "#4c78a8"), ("exposed_comm_transfer", "exposed comm: transfer", "#e45756"),
         ("exposed_comm_wait", "exposed comm: waiting", "#ff9d98"), ("exposed_memory", "exposed memory", "#f58518"),
         ("other", "other", "#bab0ac"), ("idle", "idle", "#dddddd")]
COLOUR = alt.Scale(domain=[p[1] for p in PARTS], range=[p[2] for p in PARTS])


def _step_label(df: pl.DataFrame) -> pl.Expr:
    sweeps = df["sweep"].n_unique() > 1
    label = pl.format("{} → {} GPUs", "from_gpus", "to_gpus")
    return pl.format("{}: {}", "sweep", label) if sweeps else label


def _run_labels(df: pl.DataFrame) -> pl.DataFrame:
    """Sorted by sweep and GPUs, with a bar label '4 GPUs · run' ('sweep · 4 GPUs · run' for several sweeps)."""
    n = pl.col("world_size").map_elements(gpus, return_dtype=pl.String)
    label = (pl.format("{} · {}", n, "run_id") if df["sweep"].n_unique() == 1
             else pl.format("{} · {} · {}", "sweep", n, "run_id"))
    return df.sort(["sweep", "world_size"]).with_columns(label=label)


def build_gpu_time_per_token(parts: pl.DataFrame) -> alt.LayerChart:
    """parts: run_gpu_time of the best runs (one per sweep × GPU count)."""
    df = parts.with_columns(
        exposed_comm_transfer_gpu_ns_per_token=pl.col("exposed_comm_gpu_ns_per_token")
        - pl.col("exposed_comm_wait_gpu_ns_per_token"))
    df = _run_labels(df)
    order = df["label"].to_list()
    long = pl.concat([drawn(df).select("label", "run_id", part=pl.lit(name), order=pl.lit(i),
                                       us=pl.col(f"{key}_gpu_ns_per_token") / 1e3)
                      for i, (key, name, _) in enumerate(PARTS)])
    totals = with_label(drawn(df).select("label", total_us=pl.col("total_gpu_ns_per_token") / 1e3),
                        "total_us", ns_per=1e3, name="text")  # '1.2 ms', '613 µs' (chartkit.si_time)
    room = alt.Scale(domain=[0, 1.15 * (totals["total_us"].max() or 1)])
    bars = alt.Chart(data(long)).mark_bar(stroke="#999", strokeWidth=0.3).encode(
        y=alt.Y("label:N", title=None, sort=order),
        x=alt.X("us:Q", title="GPU-time per token (µs: step time × GPUs ÷ tokens per step)", stack="zero",
                scale=room),
        color=alt.Color("part:N", title="part", scale=COLOUR, sort=[p[1] for p in PARTS]), order="order:Q",
        tooltip=["run_id:N", "part:N", alt.Tooltip("us:Q", title="GPU-µs per token", format=".3~g")])
    total = alt.Chart(data(totals)).mark_text(align="left", dx=4, fontSize=LABEL_FONT, fontWeight="bold").encode(
        y=alt.Y("label:N", sort=order), x=alt.X("total_us:Q", scale=room), text="text:N")
    return with_slivers(bars + total, df, "label", order, room).properties(
        title="GPU-time per token of the fastest run at each GPU count (flat = perfect scaling)",
        width=WIDTH + 80, height=alt.Step(24))


def build_efficiency_lost(attribution: pl.DataFrame) -> alt.LayerChart:
    """attribution: scaling_attribution rows vs = 'previous'."""
    df = attribution.with_columns(
        step=_step_label(attribution),
        exposed_comm_transfer_lost_pts=pl.col("exposed_comm_lost_pts") - pl.col("exposed_comm_wait_lost_pts"))
    order = df["step"].to_list()
    long = pl.concat([df.select("step", "from_run", "to_run", part=pl.lit(name), order=pl.lit(i),
                                pts=pl.col(f"{key}_lost_pts"))
                      for i, (key, name, _) in enumerate(PARTS)])
    bars = alt.Chart(data(long)).mark_bar(stroke="#999", strokeWidth=0.3).encode(
        y=alt.Y("step:N", title=None, sort=order),
        x=alt.X("pts:Q", title="points of scaling efficiency lost (negative: gained)", stack="zero"),
        color=alt.Color("part:N", title="part", scale=COLOUR, sort=[p[1] for p in PARTS]), order="order:Q",
        tooltip=["step:N", "from_run:N", "to_run:N", "part:N", alt.Tooltip("pts:Q", title="points", format=".2f")])
    total = df.select("step", "efficiency_lost_pts", "from_scaling_efficiency_pct", "to_scaling_efficiency_pct")
    ticks = alt.Chart(data(total)).mark_tick(color="black", thickness=2, size=20).encode(
        y=alt.Y("step:N", sort=order), x="efficiency_lost_pts:Q",
        tooltip=["step:N", alt.Tooltip("efficiency_lost_pts:Q", title="points lost", format=".1f"),
                 alt.Tooltip("from_scaling_efficiency_pct:Q", title="efficiency before (%)", format=".1f"),
                 alt.Tooltip("to_scaling_efficiency_pct:Q", title="efficiency after (%)", format=".1f")])
    labels = ticks.mark_text(align="left", dx=6, dy=-12, fontSize=LABEL_FONT, fontWeight="bold").encode(
        text=alt.Text("efficiency_lost_pts:Q", format=".1f"))
    return (bars + ticks + labels).properties(
        title="Efficiency points lost at each GPU-count step, by part (tick: total)", width=WIDTH + 80,
        height=alt.Step(30))


def build_kernel_growth(growth: pl.DataFrame) -> alt.LayerChart:
    """growth: run_diff rows (the families that grew most) per GPU-count step; one bar per step ×
    family, grouped by step and largest first (no facet: its independent scales warn in Vega-Lite)."""
    df = growth.with_columns(step=_step_label(growth), ms=pl.col("delta_time_per_step_ns") / 1e6)
    steps = df["step"].unique(maintain_order=True).to_list()
    df = (df.with_columns(step_order=pl.col("step").replace_strict({s: i for i, s in enumerate(steps)}))
          .sort(["step_order", "ms"], descending=[False, True])
          .with_columns(label=pl.format("{}: {}", "step", "family")))
    y = alt.Y("label:N", title=None, sort=df["label"].to_list(), axis=alt.Axis(labelLimit=360))
    bars = alt.Chart(data(df)).mark_bar().encode(
        y=y, x=alt.X("ms:Q", title="added kernel time per step per GPU (ms)"),
        color=alt.Color("kind:N", title="kind", scale=alt.Scale(  # the part colours of the other charts
            domain=["compute", "comm", "memory", "sync"], range=["#4c78a8", "#e45756", "#f58518", "#bab0ac"])),
        tooltip=["step:N", "family:N", "top_kernel:N", alt.Tooltip("ms:Q", format=".3~g"),
                 alt.Tooltip("count_per_step_a:Q", title="launches per step before", format=".1f"),
                 alt.Tooltip("count_per_step_b:Q", title="launches per step after", format=".1f")])
    text = alt.Chart(data(with_label(df, "ms", ns_per=1e6, name="text"))).mark_text(
        align="left", dx=3, fontSize=LABEL_FONT, color="#333").encode(y=y, x="ms:Q", text="text:N")
    return (bars + text).properties(
        title="Kernel families that grew most between the fastest runs of consecutive GPU counts",
        width=WIDTH, height=alt.Step(18))


IDLE_COLOURS = {"host_wait": "#b279a2", "dependency_wait": "#9ecae9", "other_idle": "#dddddd"}


def build_idle_breakdown(idle: pl.DataFrame) -> alt.LayerChart:
    """idle: reports.efficiency.idle_per_step of the best runs (ms per step, mean over ranks and steps)."""
    df = _run_labels(idle)
    order = df["label"].to_list()
    names = list(IDLE_PARTS.values())
    long = pl.concat([df.select("label", "run_id", part=pl.lit(name), order=pl.lit(i),
                                ms=pl.col(f"{key}_ns") / 1e6, pct=100 * pl.col(f"{key}_ns") / pl.col("idle_ns"))
                      for i, (key, name) in enumerate(IDLE_PARTS.items())])
    totals = df.select("label", idle_ms=pl.col("idle_ns") / 1e6)
    room = alt.Scale(domain=[0, 1.15 * (totals["idle_ms"].max() or 1)])
    bars = alt.Chart(data(long)).mark_bar(stroke="#999", strokeWidth=0.3).encode(
        y=alt.Y("label:N", title=None, sort=order, axis=alt.Axis(labelLimit=360)),
        x=alt.X("ms:Q", title="idle time per step (ms, mean over ranks and steps)", stack="zero", scale=room),
        color=alt.Color("part:N", title="idle: cause", sort=names,
                        scale=alt.Scale(domain=names, range=[IDLE_COLOURS[k] for k in IDLE_PARTS])),
        order="order:Q",
        tooltip=["run_id:N", "part:N", alt.Tooltip("ms:Q", title="ms per step", format=MS),
                 alt.Tooltip("pct:Q", title="% of the idle time", format=".1f")])
    total = alt.Chart(data(totals)).mark_text(align="left", dx=4, fontSize=LABEL_FONT, fontWeight="bold").encode(
        y=alt.Y("label:N", sort=order), x=alt.X("idle_ms:Q", scale=room), text=alt.Text("idle_ms:Q", format=MS))
    return (bars + total).properties(
        title="Idle time per step of the fastest run at each GPU count, by cause",
        width=WIDTH + 80, height=alt.Step(24))


SERIES_COLOURS = {ALL_OPS: "#333333", "GEMM": "#4c78a8", "attention": "#72b7b2", "convolution": "#54a24b"}


def build_compute_efficiency(eff: pl.DataFrame) -> alt.LayerChart:
    """eff: reports.efficiency.efficiency_per_run of the best runs, one row per run × series (all counted
    ops, FLOPs-weighted as compute_efficiency, and each op family)."""
    # a run with one family: its FLOPs-weighted total is that family's bar again, so it is left out
    df = (_run_labels(eff).filter((pl.col("series") != ALL_OPS) | (pl.len().over("run_id") > 2))
          .sort(["sweep", "world_size", "series_order"]))
    order = df["label"].unique(maintain_order=True).to_list()
    series = [s for s in [ALL_OPS, *FAMILIES.values()] if s in set(df["series"].to_list())]
    y = alt.Y("label:N", title=None, sort=order, axis=alt.Axis(labelLimit=360))
    offset = alt.YOffset("series:N", sort=series)
    bars = alt.Chart(data(df)).mark_bar().encode(
        y=y, yOffset=offset,
        x=alt.X("pct_of_peak:Q", title="% of the device's peak FLOP/s for the op's dtype",
                scale=alt.Scale(domain=[0, 125]), axis=alt.Axis(values=list(range(0, 101, 20)))),
        color=alt.Color("series:N", title="ops", sort=series,
                        scale=alt.Scale(domain=series, range=[SERIES_COLOURS.get(s, "#bab0ac") for s in series])),
        tooltip=["run_id:N", "series:N", alt.Tooltip("pct_of_peak:Q", title="% of peak", format=".1f"),
                 alt.Tooltip("achieved_tflops:Q", title="TFLOP/s", format=".3~g"),
                 alt.Tooltip("gflop_per_op:Q", title="GFLOP per op (mean)", format=".3~g"),
                 alt.Tooltip("warning:N", title="warning")])
    text = alt.Chart(data(df)).mark_text(align="left", dx=3, fontSize=LABEL_FONT, color="#333").encode(
        y=y, yOffset=offset, x="pct_of_peak:Q",
        text=alt.Text("label_text:N"))
    text = text.transform_calculate(
        label_text="format(datum.pct_of_peak, '.0f') + ' % · ' + format(datum.achieved_tflops, '.3~g') + ' TFLOP/s'"
                   " + (datum.pct_of_peak > 100 ? ' ⚠ above the peak: impossible (see the warning)' : '')")
    peak = alt.Chart(data(pl.DataFrame({"pct": [100]}))).mark_rule(strokeDash=[4, 3], color="#888").encode(
        x="pct:Q")
    return (peak + bars + text).properties(
        title="Compute efficiency of the fastest run at each GPU count (GEMM, attention, convolution kernels)",
        width=WIDTH + 80, height=alt.Step(15))  # per bar: the step of the yOffset band
