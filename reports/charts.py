"""Chart builders: ``build_<chart>(df) -> alt.Chart``, no side effects.

Each builder takes the aggregated polars table from ``reports.data`` and
returns a chart with a title and axis units; ``CHARTS`` lists them in report
order with a one-sentence caption (how to read it) and the note shown when
its data is absent (what would enable it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import altair as alt
import polars as pl

WIDTH, HEIGHT = 420, 260
PARTS = {  # step-breakdown parts in stacking order; they sum to the span
    "compute_ns": "compute", "exposed_comm_ns": "exposed comm",
    "exposed_memory_ns": "exposed memory", "other_ns": "other", "idle_ns": "idle",
}


def _data(df: pl.DataFrame) -> alt.Data:
    """Inline values (the tables are aggregated, so small); decimals as floats for JSON."""
    return alt.Data(values=df.with_columns(pl.col(pl.Decimal).cast(pl.Float64)).to_dicts())


def _gpus_axis() -> alt.X:
    return alt.X("world_size:Q", title="GPUs (ranks)", scale=alt.Scale(type="log", base=2),
                 axis=alt.Axis(tickMinStep=1, format="d"))


def best_per_size(scaling: pl.DataFrame) -> pl.DataFrame:
    """The fastest run of each sweep at each GPU count."""
    return (scaling.sort("tokens_per_s", descending=True)
            .group_by(["sweep", "world_size"], maintain_order=True).first().sort(["sweep", "world_size"]))


def build_throughput(scaling: pl.DataFrame) -> alt.Chart:
    base = scaling.filter(pl.col("run_id") == pl.col("baseline_run")).select(
        "sweep", base_gpus="world_size", base_tps="tokens_per_s")
    ideal = (scaling.select("sweep", "world_size").unique().join(base, on="sweep")
             .with_columns(ideal_tps=pl.col("base_tps") * pl.col("world_size") / pl.col("base_gpus")))
    points = alt.Chart(_data(scaling)).mark_point(filled=True, size=60).encode(
        x=_gpus_axis(), y=alt.Y("tokens_per_s:Q", title="tokens/s (whole job)"),
        color=alt.Color("sweep:N", title="sweep"),
        tooltip=["run_id:N", "world_size:Q", alt.Tooltip("tokens_per_s:Q", format=",.0f")])
    best = alt.Chart(_data(best_per_size(scaling))).mark_line().encode(
        x=_gpus_axis(), y="tokens_per_s:Q", color="sweep:N")
    line = alt.Chart(_data(ideal)).mark_line(strokeDash=[6, 4], color="gray").encode(
        x=_gpus_axis(), y="ideal_tps:Q", detail="sweep:N")
    return (line + best + points).properties(
        title="Throughput vs GPUs (dashed: ideal linear scaling from the baseline)",
        width=WIDTH, height=HEIGHT)


def build_efficiency(scaling: pl.DataFrame) -> alt.HConcatChart:
    best_df = best_per_size(scaling)
    best = _data(best_df)
    eff = alt.Chart(best).mark_line(point=True).encode(
        x=_gpus_axis(), y=alt.Y("scaling_efficiency_pct:Q", title="scaling efficiency (%)"),
        color="sweep:N", tooltip=["run_id:N", alt.Tooltip("scaling_efficiency_pct:Q", format=".1f")],
    ).properties(title="Scaling efficiency (best run per GPU count)", width=WIDTH // 1.4, height=HEIGHT)
    rule = alt.Chart(alt.Data(values=[{"y": 0}])).mark_rule(color="gray").encode(y="y:Q")
    gains = best_df.filter(pl.col("marginal_tokens_per_s_per_gpu").is_not_null())
    if gains.is_empty():  # one GPU count per sweep: nothing to compare with
        return alt.hconcat(eff)
    marginal = alt.Chart(_data(gains)).mark_bar().encode(
        x=alt.X("world_size:O", title="GPUs (ranks)"),
        y=alt.Y("marginal_tokens_per_s_per_gpu:Q", title="tokens/s gained per added GPU"),
        color="sweep:N", xOffset="sweep:N",
        tooltip=["run_id:N", alt.Tooltip("marginal_tokens_per_s_per_gpu:Q", format=",.0f")],
    ).properties(title="Marginal throughput per added GPU", width=WIDTH // 1.4, height=HEIGHT)
    return alt.hconcat(eff, marginal + rule)


def _per_gpu_count(runs: pl.DataFrame, field: str, title: str, agg: str, fmt: str) -> alt.LayerChart:
    """Points for every run, a line through the best run (``agg``) at each GPU count."""
    points = alt.Chart(_data(runs)).mark_point(filled=True, size=50).encode(
        x=_gpus_axis(), y=alt.Y(f"{field}:Q", title=title), color=alt.Color("workload:N", title="workload"),
        tooltip=["run_id:N", alt.Tooltip(f"{field}:Q", format=fmt)])
    line = alt.Chart(_data(runs)).mark_line().encode(
        x=_gpus_axis(), y=alt.Y(f"{agg}({field}):Q", title=title), color="workload:N")
    return line + points


def build_mfu(runs: pl.DataFrame) -> alt.LayerChart:
    return _per_gpu_count(runs, "mfu_pct", "MFU (% of peak FLOP/s)", "max", ".2f").properties(
        title="Model FLOPs utilisation vs GPUs (line: best run per GPU count)", width=WIDTH, height=HEIGHT)


def build_step_breakdown(breakdown: pl.DataFrame) -> alt.HConcatChart:
    long = (breakdown.unpivot(index=["run_id", "span_ns"], on=list(PARTS), variable_name="part", value_name="ns")
            .with_columns(pct=100 * pl.col("ns") / pl.col("span_ns"),
                          part=pl.col("part").replace_strict(PARTS),
                          order=pl.col("part").replace_strict({k: i for i, k in enumerate(PARTS)})))
    stacked = alt.Chart(_data(long)).mark_bar().encode(
        y=alt.Y("run_id:N", title=None, sort=None),
        x=alt.X("sum(pct):Q", title="% of span (summed over ranks)"),
        color=alt.Color("part:N", title="part", sort=list(PARTS.values())),
        order="order:Q", tooltip=["run_id:N", "part:N", alt.Tooltip("pct:Q", format=".1f")],
    ).properties(title="Where step time goes", width=WIDTH, height=alt.Step(18))
    overlap = breakdown.with_columns(pct=100 * pl.col("overlap_ns") / pl.col("span_ns"))
    hidden = alt.Chart(_data(overlap)).mark_bar(color="#9ecae1").encode(
        y=alt.Y("run_id:N", title=None, sort=None, axis=None),
        x=alt.X("pct:Q", title="overlapped comm (% of span)"),
        tooltip=["run_id:N", alt.Tooltip("pct:Q", format=".1f")],
    ).properties(title="Comm hidden under compute", width=WIDTH // 3, height=alt.Step(18))
    return alt.hconcat(stacked, hidden)


def build_exposed_comm(exposed: pl.DataFrame) -> alt.Chart:
    df = exposed.with_columns(series=pl.col("process_group") + " / " + pl.col("collective"))
    return alt.Chart(_data(df)).mark_line(point=True).encode(
        x=_gpus_axis(), y=alt.Y("mean(exposed_pct):Q", title="exposed comm (% of span)"),
        color=alt.Color("series:N", title="process group / collective"),
        tooltip=["series:N", "world_size:Q", alt.Tooltip("mean(exposed_pct):Q", format=".2f")],
    ).properties(title="Exposed communication vs GPUs, by process group and collective",
                 width=WIDTH, height=HEIGHT)


def build_layouts(layouts: pl.DataFrame) -> alt.FacetChart:
    df = (layouts.filter(pl.col("layouts_at_size") > 1)
          .with_columns(label=pl.col("layout") + pl.when(pl.col("strategy").is_not_null())
                        .then(" (" + pl.col("strategy") + ")").otherwise(pl.lit("")))
          .unpivot(index=["world_size", "label", "run_id"], on=["tokens_per_s", "mfu_pct", "exposed_comm_pct"],
                   variable_name="metric", value_name="value"))
    return alt.Chart(_data(df)).mark_bar().encode(
        x=alt.X("label:N", title="layout (dp-tp-pp-cp)"), y=alt.Y("value:Q", title=None),
        color=alt.Color("label:N", legend=None), tooltip=["run_id:N", "metric:N", "value:Q"],
    ).properties(width=WIDTH // 3, height=160).facet(
        row=alt.Row("world_size:O", title="GPUs"),
        column=alt.Column("metric:N", title=None,
                          header=alt.Header(labelExpr="datum.value == 'tokens_per_s' ? 'tokens/s' : "
                                                      "datum.value == 'mfu_pct' ? 'MFU (%)' : 'exposed comm (%)'")),
    ).resolve_scale(x="independent", y="independent").properties(title="Parallel layouts at a fixed GPU count")


def build_bandwidth(bandwidth: pl.DataFrame) -> alt.Chart:
    return alt.Chart(_data(bandwidth)).mark_point(filled=True).encode(
        x=alt.X("size_bucket_bytes:Q", title="message size (bytes, power-of-two bucket)",
                scale=alt.Scale(type="log", base=2)),
        y=alt.Y("median_busbw_gbps:Q", title="median bus bandwidth (GB/s)"),
        color=alt.Color("collective:N", title="collective"), shape="collective:N",
        tooltip=["run_id:N", "collective:N", "pg_name:N", "count:Q",
                 alt.Tooltip("median_busbw_gbps:Q", format=".2f")],
    ).properties(title="Collective bus bandwidth vs message size", width=WIDTH, height=HEIGHT)


def build_rank_wait(rank_wait: pl.DataFrame) -> alt.FacetChart:
    top = rank_wait.group_by("run_id").agg(pl.col("straggler_count").max().alias("top"))
    df = (rank_wait.join(top, on="run_id")
          .with_columns(straggler=(pl.col("straggler_count") == pl.col("top")) & (pl.col("top") > 0))
          .unpivot(index=["run_id", "rank", "straggler", "straggler_count"],
                   on=["exposed_transfer_ns", "exposed_wait_ns"], variable_name="part", value_name="ns")
          .with_columns(ms=pl.col("ns") / 1e6,
                        part=pl.col("part").replace_strict({"exposed_transfer_ns": "transfer",
                                                            "exposed_wait_ns": "waiting for a slow peer"})))
    return alt.Chart(_data(df)).mark_bar().encode(
        x=alt.X("rank:O", title="rank"), y=alt.Y("sum(ms):Q", title="exposed comm (ms)"),
        color=alt.Color("part:N", title="exposed comm"), detail="straggler:N",
        stroke=alt.condition("datum.straggler", alt.value("black"), alt.value(None)),
        strokeWidth=alt.condition("datum.straggler", alt.value(2), alt.value(0)),
        tooltip=["run_id:N", "rank:O", "part:N", alt.Tooltip("ms:Q", format=".2f"), "straggler_count:Q"],
    ).properties(width=WIDTH, height=140).facet(row=alt.Row("run_id:N", title=None)).properties(
        title="Per rank: exposed comm split into transfer and waiting (outlined: the usual straggler)")


def build_energy(runs: pl.DataFrame) -> alt.LayerChart:
    return _per_gpu_count(runs, "energy_per_token_j", "energy per token (J)", "min", ".3g").properties(
        title="Energy per token vs GPUs (line: most frugal run per GPU count)", width=WIDTH, height=HEIGHT)


@dataclass(frozen=True)
class ChartSpec:
    key: str
    title: str
    caption: str
    missing: str  # shown instead of the chart when its data is absent
    source: str  # ReportData attribute
    select: Callable[[pl.DataFrame], pl.DataFrame]
    build: Callable[[pl.DataFrame], alt.TopLevelMixin]


def _has(col: str) -> Callable[[pl.DataFrame], pl.DataFrame]:
    return lambda df: df.filter(pl.col(col).is_not_null()) if col in df.columns else df.clear()


CHARTS = [
    ChartSpec("throughput", "Throughput vs GPUs",
              "Points are runs, the line joins the fastest run at each GPU count; the further it falls "
              "below the dashed ideal line, the less the added GPUs buy.",
              "No throughput: give runs a workload and tokens_per_step (or global_batch_size and "
              "seq_len) in run.json.", "scaling", _has("tokens_per_s"), build_throughput),
    ChartSpec("efficiency", "Diminishing returns",
              "Left: speedup divided by the GPU ratio (100 % = perfect scaling); right: tokens/s each "
              "added GPU bought over the next smaller GPU count; bars near or below zero mark where "
              "adding GPUs stops paying off.",
              "No scaling data: needs at least one sweep (runs sharing a workload) with throughput.",
              "scaling", _has("scaling_efficiency_pct"), build_efficiency),
    ChartSpec("mfu", "MFU vs GPUs",
              "Share of the devices' peak FLOP/s spent on model FLOPs; a falling line means more time "
              "goes to communication, waiting or overhead as GPUs are added.",
              "No MFU: needs tokens per step, model.num_params (or flops_per_token) and a known device "
              "peak (device.peak_flops in run.json).", "runs", _has("mfu_pct"), build_mfu),
    ChartSpec("breakdown", "Where step time goes",
              "Each bar splits the traced span of all ranks of a run into compute, communication not "
              "hidden by compute, exposed memory copies, other device work and idle (they sum to 100 %); "
              "the right panel shows communication that ran under compute.",
              "No device activity in the traces.", "breakdown", _has("span_ns"), build_step_breakdown),
    ChartSpec("exposed_comm", "Exposed communication by process group",
              "Exposed communication as a share of the span, one line per process group and collective: "
              "the line that climbs with GPUs is the parallel dimension that stops scaling.",
              "No communication kernels in the traces.", "exposed_by_group", _has("exposed_pct"),
              build_exposed_comm),
    ChartSpec("layouts", "Parallel layouts",
              "Runs of one workload at the same GPU count side by side: higher tokens/s and MFU and "
              "lower exposed communication mark the better (dp, tp, pp, cp) layout.",
              "No two layouts of one workload at the same GPU count (set workload and parallel.* in "
              "run.json).", "layouts", lambda df: df.filter(pl.col("layouts_at_size") > 1), build_layouts),
    ChartSpec("bandwidth", "Collective bandwidth",
              "Median bus bandwidth (nccl-tests convention) per message-size bucket; small messages sit "
              "low because latency dominates them.",
              "No message sizes in the traces (recent PyTorch records them in NCCL kernel args or "
              "record_param_comms).", "bandwidth", _has("median_busbw_gbps"), build_bandwidth),
    ChartSpec("rank_wait", "Per rank: transfer vs waiting",
              "Exposed communication of each rank split into transfer and waiting for the slowest peer; "
              "a tall waiting bar on every rank but one points at that one rank (outlined) as the "
              "straggler.",
              "No run with more than one rank and matched collectives.", "rank_wait", _has("rank"),
              build_rank_wait),
    ChartSpec("energy", "Energy per token",
              "Joules per token from NVML power samples; rising energy per token with GPUs is the cost "
              "of the added communication and idle time.",
              "No power samples: collect on CUDA with nvidia-ml-py installed.", "runs",
              _has("energy_per_token_j"), build_energy),
]
