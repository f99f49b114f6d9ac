"""Charts against the GPU count: throughput, efficiency, MFU, energy, comm vs compute, collectives.

Lines join the fastest run of each sweep at each GPU count (``is_best`` in
the scaling table, or the tables of the best runs that ``reports.data``
prepares); a chart never averages runs of different layouts.
"""

from __future__ import annotations

import altair as alt
import polars as pl

from scaletrace.reports.chartkit import (HEIGHT, LABEL_FONT, LAYOUT, MS, SWEEP, WIDTH, baseline_words, dash,
                                         dashed_points, data, gpus_axis, layout_colour, layout_name, point_labels,
                                         with_label)
from scaletrace.reports.data import NO_SWEEP


def _ideal(scaling: pl.DataFrame) -> pl.DataFrame:
    """Linear scaling from each sweep's baseline: total tokens/s and tokens/s per GPU."""
    return (scaling.select("sweep", "world_size", "base_gpus", "base_tps", "base_tps_per_gpu").unique()
            .with_columns(ideal_tps=pl.col("base_tps") * pl.col("world_size") / pl.col("base_gpus"))
            .sort(["sweep", "world_size"]))


def with_layouts(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with its runs' layout names (chartkit.LAYOUT; data.load adds them, a bare table gets them
    from its tp, pp, cp columns) and ``line``, the key of a layout's line in its sweep."""
    if LAYOUT not in df.columns:
        names = [layout_name(r.get("tp"), r.get("pp"), r.get("cp"), r.get("strategy")) for r in df.iter_rows(named=True)]
        df = df.with_columns(pl.Series(LAYOUT, names, dtype=pl.String))
    return df.with_columns(line=pl.col("sweep") + " · " + pl.col(LAYOUT).fill_null("layout unknown"))


def _per_layout(df: pl.DataFrame, field: str) -> pl.DataFrame:
    """The line of each layout of each sweep: its run with the highest ``field`` at each GPU count (runs
    without a workload are points only: nothing joins them)."""
    return (df.filter(pl.col(field).is_not_null() & (pl.col("sweep") != NO_SWEEP))
            .sort([field, "run_id"], descending=[True, False])
            .group_by(["line", "world_size"], maintain_order=True).first().sort(["line", "world_size"]))


def _sweep_shape(df: pl.DataFrame) -> dict:
    """Point shape by sweep, where there are several (colour is the layout's)."""
    return {"shape": alt.Shape("sweep:N", title=SWEEP)} if df["sweep"].n_unique() > 1 else {}


def _runs_by_layout(df: pl.DataFrame, field: str, title: str, fmt: str, labelled: pl.DataFrame,
                    log_y: bool = False, unit: str | None = None, label_fmt: str | None = None) -> alt.LayerChart:
    """Every run a point, a line per layout of each sweep across GPU counts (chartkit.layout_colour: one
    colour per layout in every chart), data labels on ``labelled`` (one run per sweep and GPU count: no
    two labels share a point).  ``log_y``: throughput spans orders of magnitude across sweeps (and ideal
    scaling is then a straight line on the log-log axes)."""
    df = with_layouts(df)
    y = alt.Y(f"{field}:Q", title=title, scale=alt.Scale(type="log") if log_y else alt.Undefined,
              axis=alt.Axis(format="~s") if unit == "tokens/s" else alt.Undefined)  # 5M, not 5,000,000
    colour = layout_colour(df)
    tooltip = ["run_id:N", "sweep:N", alt.Tooltip(f"{LAYOUT}:N", title="layout"), "world_size:Q",
               alt.Tooltip(f"{field}:Q", format=fmt)]
    points = alt.Chart(data(df.filter(pl.col(field).is_not_null()))).mark_point(
        filled=True, size=55, opacity=0.85).encode(x=gpus_axis(df), y=y, color=colour, tooltip=tooltip,
                                                   **_sweep_shape(df))
    lines = alt.Chart(data(_per_layout(df, field))).mark_line(strokeWidth=1.8).encode(
        x=gpus_axis(df), y=y, color=colour, detail="line:N", tooltip=tooltip)
    # ``unit``: the data labels in SI with it ('44 k tokens/J', chartkit.si), else ``fmt``
    labelled = with_label(labelled, field, unit) if unit else labelled
    text = alt.Text("si_label:N") if unit else alt.Text(f"{field}:Q", format=label_fmt or fmt)
    labels = alt.Chart(data(labelled)).mark_text(dy=-10, fontSize=LABEL_FONT, color="#333").encode(
        x=gpus_axis(df), y=y, text=text)
    return lines + points + labels


def _throughput_vs_ideal(scaling: pl.DataFrame, field: str, ideal_field: str, title: str,
                         chart_title: str) -> alt.LayerChart:
    """Runs and the fastest run per GPU count (log axis) over the dashed ideal from the baseline."""
    ideal = alt.Chart(data(_ideal(scaling))).mark_line(strokeDash=[6, 4], color="gray").encode(
        x=gpus_axis(scaling), y=f"{ideal_field}:Q", detail="sweep:N")
    runs = _runs_by_layout(scaling, field, title, ",.0f", scaling.filter("is_best"), log_y=True, unit="tokens/s")
    return (ideal + runs).properties(title=chart_title, width=WIDTH, height=HEIGHT)


def build_throughput(scaling: pl.DataFrame) -> alt.LayerChart:
    return _throughput_vs_ideal(scaling, "tokens_per_s", "ideal_tps", "tokens/s (whole job, log scale)",
                                "Throughput vs GPUs (dashed: ideal linear scaling from the baseline)")


def build_throughput_per_gpu(scaling: pl.DataFrame) -> alt.LayerChart:
    return _throughput_vs_ideal(scaling, "tokens_per_s_per_gpu", "base_tps_per_gpu", "tokens/s per GPU (log scale)",
                                "Throughput per GPU vs GPUs (dashed: the baseline's, i.e. ideal scaling)")


def build_efficiency(scaling: pl.DataFrame) -> alt.HConcatChart:
    scaling = with_layouts(scaling)
    best = scaling.filter("is_best")
    vs_base, vs_prev = f"vs {baseline_words(scaling)}", "best run vs the previous GPU count"
    field = "scaling_efficiency_vs_sweep_baseline_pct"
    by_layout = _runs_by_layout(scaling, field, f"scaling efficiency {vs_base} (%)", ".1f",
                                best.filter(pl.col(field).is_not_null()), label_fmt=".0f")
    prev = best.filter(pl.col("step_efficiency_pct").is_not_null()).with_columns(basis=pl.lit(vs_prev))
    step = alt.Chart(data(prev)).mark_line(color="#555", strokeDash=[4, 3], point=alt.OverlayMarkDef(
        color="#555", size=20)).encode(
        x=gpus_axis(scaling), y="step_efficiency_pct:Q", detail="sweep:N",
        strokeDash=alt.StrokeDash("basis:N", scale=alt.Scale(domain=[vs_prev], range=[[4, 3]]), legend=None),
        tooltip=["run_id:N", "basis:N", alt.Tooltip("step_efficiency_pct:Q", title="%", format=".1f")])
    ideal = alt.Chart(alt.Data(values=[{"y": 100}])).mark_rule(color="gray", strokeDash=[6, 4]).encode(y="y:Q")
    eff = (ideal + step + by_layout).properties(
        title=alt.TitleParams("Scaling efficiency (a line per layout)",
                              subtitle="dashed grey: the best run vs the previous GPU count"),
        width=int(WIDTH / 1.4), height=HEIGHT)
    gains = best.filter(pl.col("marginal_tokens_per_s_per_gpu").is_not_null())
    if gains.is_empty():  # one GPU count per sweep: nothing to compare with
        return alt.hconcat(eff)
    bars = alt.Chart(data(gains)).mark_bar().encode(
        x=alt.X("world_size:O", title="GPUs (ranks)", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("marginal_tokens_per_s_per_gpu:Q", title="tokens/s gained per added GPU"),
        color=layout_colour(scaling), xOffset="sweep:N",  # the left panel's legend
        tooltip=["run_id:N", "sweep:N", alt.Tooltip(f"{LAYOUT}:N", title="layout"),
                 alt.Tooltip("marginal_tokens_per_s_per_gpu:Q", format=",.0f")])
    text = alt.Text("marginal_tokens_per_s_per_gpu:Q", format=",.0f")
    labels = [bars.properties(data=data(part)).mark_text(dy=dy, fontSize=LABEL_FONT, color="#333").encode(text=text)
              for part, dy in ((gains.filter(pl.col("marginal_tokens_per_s_per_gpu") >= 0), -6),
                               (gains.filter(pl.col("marginal_tokens_per_s_per_gpu") < 0), 8))
              if not part.is_empty()]  # above a gain, below a loss
    rule = alt.Chart(alt.Data(values=[{"y": 0}])).mark_rule(color="gray").encode(y="y:Q")
    marginal = alt.layer(bars, *labels, rule).properties(
        title="Marginal throughput per added GPU (vs the previous GPU count)", width=int(WIDTH / 1.4), height=HEIGHT)
    return alt.hconcat(eff, marginal).resolve_scale(color="shared")


def _with_sweep(runs: pl.DataFrame) -> pl.DataFrame:
    return runs.with_columns(sweep=pl.col("workload").fill_null(NO_SWEEP))


def _best_of(runs: pl.DataFrame, field: str, descending: bool) -> pl.DataFrame:
    return (runs.filter(pl.col(field).is_not_null()).sort(field, descending=descending)
            .group_by(["sweep", "world_size"], maintain_order=True).first().sort(["sweep", "world_size"]))


def build_mfu(runs: pl.DataFrame) -> alt.LayerChart:
    df = _with_sweep(runs)
    return _runs_by_layout(df, "mfu_pct", "MFU (% of peak FLOP/s)", ".2f", _best_of(df, "mfu_pct", True)).properties(
        title="Model FLOPs utilisation vs GPUs (a line per layout; labels: highest MFU per GPU count)",
        width=WIDTH, height=HEIGHT)


def build_energy(runs: pl.DataFrame) -> alt.LayerChart:
    df = _with_sweep(runs).with_columns(tokens_per_j=1 / pl.col("energy_per_token_j"))
    return _runs_by_layout(df, "tokens_per_j", "tokens per joule", ",.4~r", _best_of(df, "tokens_per_j", True),
                           unit="tokens/J") \
        .properties(title="Tokens per joule vs GPUs (a line per layout; labels: most frugal run per GPU count)",
                    width=WIDTH, height=HEIGHT)


COMM_COMPUTE = {"compute_per_step_ns": "compute", "comm_per_step_ns": "communication",
                "exposed_comm_per_step_ns": "exposed communication"}


def build_comm_vs_compute(best_breakdown: pl.DataFrame) -> alt.FacetChart:
    long = (best_breakdown.unpivot(index=["run_id", "sweep", "world_size"], on=list(COMM_COMPUTE),
                                   variable_name="time", value_name="ns")
            .with_columns(ms=pl.col("ns") / 1e6, time=pl.col("time").replace_strict(COMM_COMPUTE)))
    long = with_label(long, "ns", ns_per=1)  # '2.34 ms', '1.2 s'  (chartkit.si_time)
    order = list(COMM_COMPUTE.values())
    line = alt.Chart().mark_line(point=True).encode(
        x=gpus_axis(long), y=alt.Y("ms:Q", title="ms per step (mean over ranks and steps)", scale=alt.Scale(padding=16)),
        color=alt.Color("time:N", title="time", sort=order, legend=alt.Legend(symbolType="stroke")),
        strokeDash=alt.StrokeDash("time:N", legend=None,
                                  scale=alt.Scale(domain=order, range=[[1, 0], [1, 0], [5, 3]])),
        tooltip=["run_id:N", "time:N", alt.Tooltip("ms:Q", format=".2f")])
    # labels: compute above its points, communication below (exposed: in the tooltip, often equal to it),
    # so no two labels share a place
    above = point_labels(line, "si_label", None).transform_filter(alt.datum.time == "compute")
    below = point_labels(line, "si_label", None, dy=12).transform_filter(alt.datum.time == "communication")
    return alt.layer(line, above, below, data=data(long)).properties(
        width=WIDTH, height=HEIGHT).facet(column=alt.Column("sweep:N", title=SWEEP)).resolve_scale(
        x="independent", y="independent").properties(
        title="Communication vs compute time per step (best run per GPU count; dashed: exposed communication)")


def build_collectives(collectives: pl.DataFrame) -> alt.HConcatChart:
    df = collectives.with_columns(ms=pl.col("time_per_step_ns") / 1e6)
    enc = {"x": gpus_axis(df), "color": alt.Color("collective:N", title="collective"),
           "strokeDash": dash("sweep", SWEEP)}
    time = alt.Chart(data(df)).mark_line().encode(
        y=alt.Y("ms:Q", title="kernel time per step and rank (ms)"),
        tooltip=["run_id:N", "collective:N", "count:Q", alt.Tooltip("ms:Q", format=".2f")], **enc)
    panels = [(time + dashed_points(time) + point_labels(time, "ms", MS)).properties(
        title="Collective time per step", width=int(WIDTH / 1.4), height=HEIGHT)]
    bw = df.filter(pl.col("median_busbw_gbps").is_not_null())
    if not bw.is_empty():
        line = alt.Chart(data(bw)).mark_line().encode(
            y=alt.Y("median_busbw_gbps:Q", title="median bus bandwidth (GB/s)"),
            tooltip=["run_id:N", "collective:N", alt.Tooltip("median_busbw_gbps:Q", format=".2f")], **enc)
        chart = line + dashed_points(line) + point_labels(line, "median_busbw_gbps", ".1f")
        boundary = node_boundary(bw)
        if not boundary.is_empty():
            rule = alt.Chart(data(boundary)).mark_rule(color="#888", strokeDash=[2, 3]).encode(x=gpus_axis(df))
            words = alt.Chart(data(boundary)).mark_text(align="left", baseline="top", dx=3, y=2, fontSize=LABEL_FONT,
                                                        color="#666").encode(x=gpus_axis(df), text="label:N")
            chart = alt.layer(rule, words, chart)
        panels.append(chart.properties(title="Collective bus bandwidth (dotted: one node's GPUs)",
                                       width=int(WIDTH / 1.4), height=HEIGHT))
    return alt.hconcat(*panels)


def node_boundary(df: pl.DataFrame) -> pl.DataFrame:
    """The GPUs per node (run_topology: run.json gpus_per_node, else world size ÷ nodes) of the runs that
    span more than one node: where a rule marks, on a GPU-count axis, the step from one node to several."""
    if "gpus_per_node" not in df.columns:
        return pl.DataFrame()
    sizes = (df.filter(pl.col("gpus_per_node").is_not_null() & (pl.col("world_size") > pl.col("gpus_per_node")))
             .select(world_size=pl.col("gpus_per_node")).unique().sort("world_size"))
    return sizes.with_columns(label=pl.format("{} GPUs per node", "world_size"))


def build_exposed_comm(exposed: pl.DataFrame) -> alt.LayerChart:
    df = exposed.with_columns(series=pl.col("process_group") + " / " + pl.col("collective"))
    line = alt.Chart(data(df)).mark_line().encode(
        x=gpus_axis(df), y=alt.Y("group_exposed_comm_pct:Q", title="exposed comm of the group (% of span)"),
        color=alt.Color("series:N", title="process group / collective"),
        strokeDash=dash("sweep", SWEEP),
        tooltip=["run_id:N", "series:N", "world_size:Q", alt.Tooltip("group_exposed_comm_pct:Q", format=".2f")]
        + (["warning:N"] if "warning" in df.columns else []))  # the query's: why a share is above 100 %
    return (line + dashed_points(line) + point_labels(line, "group_exposed_comm_pct", ".1f")).properties(
        title="Exposed communication by process group and collective (best run per GPU count)",
        width=WIDTH, height=HEIGHT)
