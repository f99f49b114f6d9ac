"""The report's charts in order: builder, caption and the note shown when data is absent.

Builders are ``build_<chart>(df) -> alt.Chart`` with no side effects
(reports/charts_scaling.py, charts_step.py, charts_layouts.py); each takes
one aggregated polars table of ``reports.data.ReportData`` (``source``) after
``select`` keeps the rows it can draw.  Every caption says how its numbers
aggregate over ranks, steps and runs; "exposed comm % of step" is always
run_summary's exposed_comm_pct (part ÷ the rank's span, mean over ranks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import altair as alt
import polars as pl

from scaletrace.reports.charts_layouts import HEATMAP_MIN_LAYOUTS, build_layout_heatmap, build_layouts
from scaletrace.reports.charts_scaling import (build_collectives, build_comm_vs_compute, build_efficiency, build_energy,
                                               build_exposed_comm, build_mfu, build_throughput, build_throughput_per_gpu)
from scaletrace.reports.charts_explain import (WHY, build_compute_efficiency, build_efficiency_lost,
                                               build_gpu_time_per_token, build_idle_breakdown, build_kernel_growth)
from scaletrace.reports.charts_card import build_marginal_returns
from scaletrace.reports.charts_critical_path import chart_spec
from scaletrace.reports.charts_headroom import build_overlap_headroom
from scaletrace.reports.charts_projection import build_projection
from scaletrace.queries.analysis.projection import UNRELIABLE_PCT
from scaletrace.reports.device_share import SLIVER_PCT
from scaletrace.reports.efficiency import no_idle_note
from scaletrace.reports.charts_step import build_bandwidth, build_rank_wait, build_step_breakdown, build_step_time


@dataclass(frozen=True)
class ChartSpec:
    key: str
    title: str
    caption: str
    # shown instead of the chart when its data is absent: a text, or one chosen from the report's data
    # (ReportData -> str) where it states what the runs table shows
    missing: str | Callable[[object], str]
    source: str  # ReportData attribute
    select: Callable[[pl.DataFrame], pl.DataFrame]
    build: Callable[[pl.DataFrame], alt.TopLevelMixin]
    section: str = ""  # a report section this chart opens or belongs to (a heading before its first chart)


def _has(col: str) -> Callable[[pl.DataFrame], pl.DataFrame]:
    return lambda df: df.filter(pl.col(col).is_not_null()) if col in df.columns else df.clear()


NO_SWEEP = ("No throughput: give runs a workload and tokens_per_step (or global_batch_size and seq_len) "
            "in run.json.")
NO_BEST = ("No run is in a sweep with throughput, and this chart draws the fastest run of each sweep at each GPU "
           "count: give runs a workload and tokens_per_step (or global_batch_size and seq_len) in run.json.")


def of_best(note: str) -> Callable[[object], str]:
    """The "not shown" note of a chart of the fastest runs: ``note`` (what those runs lack) where there
    are such runs, NO_BEST where there are none: a note never says what runs that do not exist lack."""
    return lambda data: note if data.best_runs() else NO_BEST


def idle_missing(data) -> str:
    """The idle chart's note: NO_BEST, or what the runs table says of the fastest runs' idle."""
    best = data.best_runs()
    return no_idle_note(data.runs, best, data.breakdown) if best else NO_BEST


def missing_note(spec: "ChartSpec", data) -> str:
    """``spec``'s "not shown" note for the report's ``data``."""
    return spec.missing(data) if callable(spec.missing) else spec.missing

SLIVERS = (f" A run whose device activity spans under {SLIVER_PCT:g} % of its step (query run_device_share) "
           "has no bars: its row says how long the device was busy, since the shares would describe that "
           "sliver, not the step.")

CHARTS = [
    ChartSpec("marginal_returns", "Time vs cost per billion tokens",
              "One point per run (labelled with its GPU count), a line per layout across GPU counts (colours: "
              "one per layout, the same in every chart): hours per "
              "1e9 tokens (1e9 ÷ tokens/s ÷ 3600) against GPU-hours per 1e9 tokens (that × GPUs), both log "
              "scales. Perfect scaling moves down a vertical line (less time, same GPU-hours); where a line "
              "turns right, the added GPUs buy little time for many more GPU-hours: the decision card's "
              "stops-paying count.",
              NO_SWEEP, "card_points", _has("hours_per_billion_tokens"), build_marginal_returns),
    ChartSpec("throughput", "Throughput vs GPUs",
              "Points are runs, a line per layout (the strategy label and the tp, pp, cp degrees; one colour per "
              "layout in every chart) joins its runs across GPU counts; labels: the fastest run of each sweep at "
              "each GPU count. The further a line falls below the dashed ideal line (linear from the sweep's "
              "baseline, its run with the fewest GPUs), the less the added GPUs buy.",
              NO_SWEEP, "scaling", _has("tokens_per_s"), build_throughput),
    ChartSpec("throughput_per_gpu", "Throughput per GPU",
              "tokens/s divided by the GPU count, per run; a line per layout across GPU counts, labels on the "
              "fastest run at each GPU count; the dashed line is the baseline's per-GPU throughput, which ideal "
              "scaling keeps.",
              NO_SWEEP, "scaling", _has("tokens_per_s_per_gpu"), build_throughput_per_gpu),
    ChartSpec("efficiency", "Diminishing returns",
              "Left: scaling efficiency vs the sweep's baseline (speedup ÷ GPU ratio, or per-GPU throughput ratio "
              "for weak scaling; 100 % = perfect), a point per run and a line per layout, labelled at the fastest "
              "run of each GPU count; dashed grey: the fastest run's efficiency vs the previous GPU count. Right: "
              "tokens/s each added GPU bought over the best run at the previous GPU count, coloured by the layout "
              "of the best run; where a bar falls below half the baseline's tokens/s per GPU, adding GPUs "
              "stops paying (the decision card's rule).",
              "No scaling data: needs at least one sweep (runs sharing a workload) with throughput.",
              "scaling", _has("scaling_efficiency_vs_sweep_baseline_pct"), build_efficiency),
    ChartSpec("mfu", "MFU vs GPUs",
              "Share of the devices' peak FLOP/s spent on model FLOPs, one point per run, a line per layout "
              "across GPU counts, labelled at the highest MFU of each GPU count; a falling line means more time "
              "goes to communication, waiting or overhead as GPUs are added.",
              "No MFU: needs tokens per step, model.num_params (or flops_per_token) and a known device "
              "peak (device.peak_flops in run.json).", "runs", _has("mfu_pct"), build_mfu),
    ChartSpec("step_time", "Step time and where it goes",
              "Each run's step time (median over steps of the slowest rank, labelled at the bar's end): "
              "compute, exposed communication, exposed memory and other in ms per profiled step (inside the "
              "step's device slot, mean over ranks and steps: the figures of the communication vs compute chart), "
              "and idle, the rest of the step time, when the device did nothing (query run_breakdown; where the step "
              "log's step is longer or shorter than the profiled steps' device window, this rest differs from the "
              "idle chart's idle, which is of that window). Where the device runs behind the host (its step period "
              "over 1.1 × the same steps' CPU time: run_summary's warning), the bar is the device's step, the mean "
              "device slot, labelled 'device' beside the host's step. The whisker "
              "runs from the median step (the bar) to the 95th percentile over steps (query step_time_spread; "
              "of the collector's step log: the steps outside the profiled window, the first and the one right "
              "after the window left out, since the profiler exports its trace there), labelled 'p50 · p95'."
              + SLIVERS,
              "No step time: the traces have no ProfilerStep annotations and the run no step log.",
              "breakdown", _has("step_time_ns"), build_step_time),
    ChartSpec("breakdown", "Where step time goes (% of the steps' window)",
              "Each part as a share of the rank's window of its profiled steps (first device event the steps "
              "launched to the last one's end, gaps between steps included; the whole trace without "
              "ProfilerSteps), averaged over the run's ranks (the runs table's figures, unrounded); the five "
              "parts sum to 100 %. The right panel shows communication that ran under compute, as a share of "
              "the same window, averaged over ranks." + SLIVERS,
              "No device activity in the traces.", "breakdown", _has("compute_pct"), build_step_breakdown),
    ChartSpec("comm_vs_compute", "Communication vs compute per step",
              "For the fastest run of each sweep at each GPU count: compute, communication and exposed "
              "communication time inside one profiled step (union of the kernels' intervals), averaged over "
              "ranks and steps.",
              of_best("No ProfilerStep windows in the runs of a sweep with throughput."), "best_breakdown",
              _has("compute_per_step_ns"), build_comm_vs_compute),
    ChartSpec("exposed_comm", "Exposed communication by process group",
              "For the fastest run of each sweep at each GPU count: per process group and collective, the "
              "exposed time of its kernels on a rank ÷ that rank's span, averaged over ranks. Concurrent "
              "collectives each count, so a run's groups can sum to more than its exposed comm % of step. "
              "The line that climbs with GPUs is the parallel dimension that stops scaling.",
              of_best("No communication kernels in the runs of a sweep with throughput."), "exposed_by_group",
              _has("group_exposed_comm_pct"), build_exposed_comm),
    ChartSpec("collectives", "Collectives vs GPUs",
              "For the fastest run of each sweep at each GPU count, per collective type: kernel time per "
              "step on one rank (summed over its instances in the profiled steps, averaged over ranks and "
              "steps) and, when the traces record message sizes, the median bus bandwidth over instances.",
              of_best("No communication kernels inside profiled steps in the runs of a sweep with throughput."),
              "collectives", _has("time_per_step_ns"), build_collectives),
    ChartSpec("overlap_headroom", "Overlap headroom by process group",
              "For the fastest run of each sweep at each GPU count, per process group: the compute left to run "
              "when the group's first collective of the step starts (up to the end of the step's compute) ÷ the "
              "group's communication time (its kernels' durations, waiting included), both per profiled step, "
              "mean over ranks and steps (query overlap_headroom). Below 1 (red rule) the communication is "
              "longer than the compute that can hide it and the excess is exposed; strong scaling shrinks the "
              "compute per GPU, so the headroom falls towards 1 one GPU count before exposed communication "
              "grows (the axis ends at 3: a larger headroom is drawn at the top edge, its value in the tooltip). Dashed: projected to 2× and 4× the largest measured count by the projection's model "
              "(compute a + b/N, α–β ring transfer per collective, waiting carried as measured), for the sweep's "
              "fastest layout where the projection fits it. Subtitle: the first GPU count where a group's "
              "headroom is below 1.",
              of_best("No collectives inside profiled steps in the fastest runs of a sweep (with a workload)."),
              "headroom", _has("headroom_ratio"), build_overlap_headroom),
    ChartSpec("layouts", "Parallel layouts",
              "Runs of one workload at the same GPU count (rows: dp-tp-pp-cp and the strategy label), coloured "
              "by layout as in every chart, fastest on top: higher tokens/s and MFU and lower exposed comm % of step "
              "mark the better layout.",
              "No two layouts of one workload at the same GPU count (set workload and parallel.* in "
              "run.json).", "layouts", lambda df: df.filter(pl.col("layouts_at_size") > 1), build_layouts),
    ChartSpec("layout_heatmap", "Layouts over two parallel degrees",
              f"Where at least {HEATMAP_MIN_LAYOUTS} layouts share a GPU count: tokens/s, MFU and exposed "
              "comm % of step of each run, placed by the two parallel degrees that vary most; the strategy "
              "label tells apart runs with the same degrees.",
              f"Fewer than {HEATMAP_MIN_LAYOUTS} layouts of one workload at any GPU count.", "layouts",
              lambda df: df.filter(pl.col("layouts_at_size") >= HEATMAP_MIN_LAYOUTS), build_layout_heatmap),
    ChartSpec("bandwidth", "Collective bandwidth vs message size",
              "Median bus bandwidth (nccl-tests convention) per run, collective and message-size bucket, "
              "over instances on all ranks; small messages sit low because latency dominates them.",
              "No message sizes in the traces (recent PyTorch records them in NCCL kernel args or "
              "record_param_comms).", "bandwidth", _has("median_busbw_gbps"), build_bandwidth),
    ChartSpec("rank_wait", "Per rank: transfer vs waiting",
              "Exposed communication of each rank in ms per profiled step (summed over its collectives, "
              "÷ its profiled steps), split into transfer and waiting for the slowest peer; a tall waiting bar "
              "on every rank but one points at that one "
              "rank (outlined) as the straggler.",
              "No run with more than one rank and matched collectives.", "rank_wait", _has("rank"),
              build_rank_wait),
    ChartSpec("energy", "Tokens per joule",
              "Tokens per joule (1 ÷ energy per token, from NVML power samples: whole-job power × step time), "
              "one point per run, a line per layout across GPU counts, labelled at the most frugal run of each "
              "GPU count; a falling line is the cost of the added communication and idle time.",
              "No power samples: collect on CUDA with nvidia-ml-py installed.", "runs",
              _has("energy_per_token_j"), build_energy),
    # "Why efficiency drops" (reports/charts_explain.py; numbers from scaling_attribution, run_diff,
    # idle_breakdown, compute_efficiency and op_efficiency).
    ChartSpec("gpu_time_per_token", "GPU-time per token by part",
              "For the fastest run of each sweep at each GPU count: step time × GPUs ÷ tokens per step, split in "
              "run_summary's proportions (each part ÷ the rank's traced span, mean over ranks), exposed "
              "communication drawn as transfer and waiting for a slower peer. Perfect scaling keeps the bar's "
              "length; what grows is where the added GPUs' time went." + SLIVERS,
              NO_SWEEP, "gpu_time_parts", _has("total_gpu_ns_per_token"), build_gpu_time_per_token, WHY),
    ChartSpec("efficiency_lost", "Efficiency points lost, by part",
              "Between the fastest runs of consecutive GPU counts: the drop of scaling efficiency vs the sweep's "
              "baseline (tick), split exactly into the change of each part's GPU-time per token "
              "(points = 100 · GPU-time_baseline · Δpart ÷ (GPU-time_before · GPU-time_after)); bars left of "
              "zero are parts that got cheaper. Query scaling_attribution.",
              "No sweep with two GPU counts (give runs a workload and tokens_per_step in run.json).",
              "attribution", _has("efficiency_lost_pts"), build_efficiency_lost, WHY),
    ChartSpec("kernel_growth", "What grew: kernel families",
              f"Between the fastest runs of consecutive GPU counts, the kernel families whose time per profiled "
              "step per GPU (Σ durations ÷ (ranks traced × steps); CPU ops by self time) grew most; "
              "`scaletrace diff RUN_A RUN_B` lists every family. Query run_diff.",
              "No sweep with two GPU counts whose runs have kernel time that grew.", "growth",
              _has("delta_time_per_step_ns"), build_kernel_growth, WHY),
    ChartSpec("idle_breakdown", "Why the GPUs sit idle",
              "For the fastest run of each sweep at each GPU count: the idle of the runs table's idle % (the "
              "profiled steps' device window, from the first device event they launched to the last one's end, "
              "gaps between steps included, with no activity on any stream), in ms per step, mean over ranks and "
              "steps, split by what each idle gap ended on (query idle_breakdown): waiting for the host to launch "
              "(the next kernel was launched only after the gap began: CPU-bound, e.g. many small kernels), "
              "waiting on a dependency (it was queued before the gap: a stream or event wait, a peer, a "
              "synchronize), and other (no launching call in the trace). On CPU-only traces every gap is host "
              "time: the threads were outside any recorded op.",
              idle_missing, "idle_parts",
              lambda df: df.filter(pl.col("idle_ns") > 0) if "idle_ns" in df.columns else df.clear(),
              build_idle_breakdown, WHY),
    ChartSpec("compute_efficiency", "Compute efficiency vs GPUs",
              "For the fastest run of each sweep at each GPU count: achieved FLOP/s of its GEMM, attention and "
              "convolution ops (FLOPs from the recorded shapes ÷ the GPU time of the kernels they launched, "
              "summed over ranks and steps) as % of the device's peak for the op's dtype (dashed: 100 %), per "
              "family (query op_efficiency) and over all of them, FLOPs-weighted (compute_efficiency); labels "
              "give TFLOP/s. Falling bars as GPUs are added: the same kernels do less per FLOP on smaller "
              "per-GPU work. Covers these ops' kernels only, not the step (that is MFU).",
              of_best("No FLOP-counted ops: needs GPU traces taken with record_shapes (scaletrace's collector "
                      "turns it on; torch.profiler's record_shapes=True otherwise) of GEMM, attention or convolution "
                      "ops, on a device whose peak for their dtype is known."), "compute_parts", _has("pct_of_peak"),
              build_compute_efficiency, WHY),
    # "Projection" (reports/charts_projection.py, model queries/analysis/projection.py, `scaletrace project`)
    ChartSpec("projection", "Projection",
              "Per sweep and layout family with at least three measured GPU counts (all its runs in the "
              "database): measured tokens/s (points), the model's prediction to 4× the largest measured count "
              "(line; compute a + b/N or constant, α–β ring communication inside and across nodes, overlap "
              "capacity and waiting from the traces), shaded by the largest leave-one-out error, and ideal "
              "linear scaling from the baseline (dashed); the dotted rule marks the largest measured count. The table "
              "below gives each sweep's measured GPU counts and leave-one-out errors; a sweep whose largest "
              f"leave-one-out error exceeds {UNRELIABLE_PCT} % keeps its measured points only: the model does not "
              "explain its runs, so no line or band is drawn and its row says why. `scaletrace project` prints the "
              "numbers.",
              "No sweep with three measured GPU counts (with a workload, tokens_per_step and ProfilerSteps): "
              "the projection is not identifiable.", "projection", _has("predicted_tps"), build_projection),
]

CHARTS.append(chart_spec())  # the critical path by GPU count (reports/charts_critical_path.py)

# Charts whose x axis is the GPU count (or whose lines join GPU counts): with data at one GPU count
# only they are left out; the decision card and the runs table give those numbers.
VS_GPUS = frozenset({"marginal_returns", "throughput", "throughput_per_gpu", "efficiency", "mfu", "energy",
                     "comm_vs_compute", "collectives", "exposed_comm", "projection", "overlap_headroom"})

__all__ = ["CHARTS", "NO_BEST", "ChartSpec", "VS_GPUS", "missing_note", "of_best"]
