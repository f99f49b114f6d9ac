"""Why the GPUs sit idle and how efficient their compute is, for the fastest run of each sweep at
each GPU count: the tables of the report's idle and compute-efficiency charts and their sentences
(registered in ``reports.explain.EXTRA_SENTENCES``, so ``scaletrace explain`` and the report say the
same thing).

Numbers come from the queries ``idle_breakdown``, ``compute_efficiency`` and ``op_efficiency``
(their headers define every column); the two aggregates made here are defined here only:

- idle per step: each of idle_breakdown's parts (ns) averaged over the run's rows, one per
  rank × profiled step (a rank without ProfilerStep annotations: one row, its whole trace), i.e.
  "ms per step, mean over ranks and steps"; the three parts sum to the idle time.  A step's row
  counts the gap between the previous step's device work and its own, so this is the idle of
  run_summary's idle_pct (the profiled steps' device window, gaps between steps included) in ms per
  step, wherever one step's device work ends before the next one's begins.
- per op family: op_efficiency's rows of one family (pass × dtype) combined as compute_efficiency
  combines families: % of peak weighted by FLOPs, TFLOP/s = Σ FLOPs ÷ Σ GPU time.
"""

from __future__ import annotations

import polars as pl

from scaletrace.pipeline.db import Database
from scaletrace.reports.chartkit import gpus
from scaletrace.reports.words import duration, figure, listing, number, present

# idle_breakdown part -> words, in stacking order
IDLE_PARTS = {"host_wait": "waiting for the host to launch", "dependency_wait": "waiting on a dependency",
              "other_idle": "other idle"}
HOST_BOUND_PCT = 25.0  # a run's idle is called host-bound where host wait is at least this % of it
FAMILIES = {"gemm": "GEMM", "attention": "attention", "conv": "convolution"}  # op_efficiency families
ALL_OPS = "all counted ops (FLOPs-weighted)"  # compute_efficiency's row, beside the families


def best_runs(db: Database, workload: str | None = None) -> pl.DataFrame:
    """run_id, sweep, world_size of the fastest run of each sweep (or of ``workload``) at each GPU count."""
    best = db.query("run_gpu_time").filter("is_best").select("run_id", "sweep", "world_size")
    return best.filter(pl.col("sweep") == workload) if workload else best


def idle_per_step(idle: pl.DataFrame, best: pl.DataFrame) -> pl.DataFrame:
    """idle_breakdown rows -> one row per run of ``best``: idle_ns and each part's ns per step (mean
    over ranks and steps), rank_steps (rows averaged), host_wait_pct_of_idle."""
    parts = ["idle_ns", *(f"{p}_ns" for p in IDLE_PARTS)]
    per_run = idle.group_by("run_id").agg(pl.len().alias("rank_steps"), pl.col("rank").n_unique().alias("ranks"),
                                          *(pl.col(c).mean() for c in parts))
    return (best.join(per_run, on="run_id", how="inner")
            .with_columns(host_wait_pct_of_idle=pl.when(pl.col("idle_ns") > 0)
                          .then(100 * pl.col("host_wait_ns") / pl.col("idle_ns")))
            .sort(["sweep", "world_size"]))


def efficiency_per_run(runs: pl.DataFrame, ops: pl.DataFrame, best: pl.DataFrame) -> pl.DataFrame:
    """compute_efficiency (series ALL_OPS) and op_efficiency per family, one row per run of ``best`` ×
    series: pct_of_peak, achieved_tflops, flops, gpu_ns, num_ops, gflop_per_op (families only)."""
    counted = ops.filter(pl.col("achieved_pct_of_peak").is_not_null())  # FLOPs, GPU time and a peak
    fams = counted.group_by("run_id", "family").agg(
        pl.col("flops").sum(), pl.col("gpu_ns").sum(), pl.col("num_ops").sum(),
        pct_of_peak=(pl.col("flops") * pl.col("achieved_pct_of_peak")).sum() / pl.col("flops").sum())
    fams = fams.with_columns(
        series=pl.col("family").replace_strict(FAMILIES, default=pl.col("family")),
        achieved_tflops=pl.col("flops") / pl.col("gpu_ns") / 1e3,
        gflop_per_op=pl.col("flops") / pl.col("num_ops") / 1e9).drop("family")
    total = runs.select("run_id", "flops", "gpu_ns", num_ops=pl.lit(None, pl.Int64),
                        pct_of_peak="compute_efficiency_pct_of_peak", series=pl.lit(ALL_OPS),
                        achieved_tflops="achieved_tflops", gflop_per_op=pl.lit(None, pl.Float64))
    order = {s: i for i, s in enumerate([ALL_OPS, *FAMILIES.values()])}
    both = pl.concat([total, fams.select(total.columns)], how="vertical_relaxed")
    return (best.join(both, on="run_id", how="inner")
            .with_columns(series_order=pl.col("series").replace_strict(order, default=len(order)))
            .sort(["sweep", "world_size", "series_order"]))


def _pct(x) -> str:
    return f"{x:.0f} %"


def idle_sentences(idle: pl.DataFrame) -> list[str]:
    """Per sweep, where host-bound idle appears: the GPU counts whose idle is at least HOST_BOUND_PCT %
    waiting for the host (``idle``: idle_per_step rows)."""
    out = []
    bound = idle.filter(pl.col("host_wait_pct_of_idle").is_not_nan() & (pl.col("host_wait_pct_of_idle") >= HOST_BOUND_PCT)
                        & (pl.col("idle_ns") > 0))
    for (sweep,), group in bound.group_by(["sweep"], maintain_order=True):
        said = [f"{_pct(r['host_wait_pct_of_idle'])}{' of the idle time' if i == 0 else ''} at "
                f"{gpus(r['world_size'])} ({duration(r['host_wait_ns'])} of {duration(r['idle_ns'])} idle per step)"
                for i, r in enumerate(group.sort("world_size").iter_rows(named=True))]
        out.append(f"{sweep}: waiting for the host to launch work (CPU-bound) is {', '.join(said)}; "
                   "means over ranks and profiled steps.")
    return out


def _stated(rows: dict, series: str) -> bool:
    """The series has a % of peak a sentence can state."""
    return series in rows and present(rows[series]["pct_of_peak"])


def _one_count(sweep: str, n: int, a: dict, fams: list[str]) -> str | None:
    """'S at 8 GPUs: its GEMM and attention kernels reach 60 % of the device's peak for their dtype
    (FLOPs-weighted; GEMM 62 %, 613 TFLOP/s; attention 50 %, 12 TFLOP/s)'."""
    if not _stated(a, ALL_OPS) or not fams:
        return None
    def tflops(s: str) -> str:
        return f", {figure(a[s]['achieved_tflops'])} TFLOP/s" if figure(a[s]["achieved_tflops"]) else ""
    each = "; ".join(f"{s} {_pct(a[s]['pct_of_peak'])}{tflops(s)}" for s in fams)
    detail = f"FLOPs-weighted; {each}" if len(fams) > 1 else tflops(fams[0]).removeprefix(", ")
    return (f"{sweep} at {gpus(n)}: its {listing(fams)} kernels reach {_pct(a[ALL_OPS]['pct_of_peak'])} of the "
            f"device's peak for their dtype" + (f" ({detail})" if detail else "") + ".")


def compute_sentences(eff: pl.DataFrame) -> list[str]:
    """Per sweep, compute efficiency (FLOPs-weighted % of peak) and per family, from its fewest to its
    most GPUs, or at its one GPU count (``eff``: efficiency_per_run rows)."""
    out = []
    for (sweep,), group in eff.group_by(["sweep"], maintain_order=True):
        sizes = sorted(group["world_size"].unique().to_list())
        first, last = (group.filter(pl.col("world_size") == n) for n in (sizes[0], sizes[-1]))
        a, b = ({r["series"]: r for r in df.iter_rows(named=True)} for df in (first, last))
        fams = [s for s in a if s != ALL_OPS and _stated(a, s)]
        if len(sizes) == 1:
            if (line := _one_count(sweep, sizes[0], a, fams)):
                out.append(line)
            continue
        shown = [s for s in ([ALL_OPS] if len(fams) > 1 else []) + fams if _stated(a, s) and _stated(b, s)]
        said = [_moves('compute efficiency (FLOPs-weighted)' if s == ALL_OPS else s + ' efficiency',
                       a[s]['pct_of_peak'], b[s]['pct_of_peak']) for s in shown]
        if not said:
            continue
        text = f"{sweep}: {', '.join(said)} from {gpus(sizes[0])} to {gpus(sizes[-1])}"
        gemm = FAMILIES["gemm"]
        per_op = [number(r[gemm]["gflop_per_op"]) if gemm in r else None for r in (a, b)]
        if None not in per_op and per_op[1] < per_op[0] and figure(per_op[0]) != figure(per_op[1]):
            text += (f": the per-GPU matmuls shrink from {figure(per_op[0])} to {figure(per_op[1])} GFLOP per "
                     "GEMM op (mean)")
        out.append(text + ".")
    return out


def _moves(what: str, x: float, y: float) -> str:
    """'GEMM efficiency falls from 60 % to 40 % of peak'; 'stays near 60 % of peak' within half a point."""
    if abs(y - x) <= 0.5 or _pct(x) == _pct(y):
        return f"{what} stays near {_pct(x)} of peak"
    return f"{what} {'falls' if y < x else 'rises'} from {_pct(x)} to {_pct(y)} of peak"


def idle_hook(db: Database, workload: str | None = None, best: pl.DataFrame | None = None) -> list[str]:
    """EXTRA_SENTENCES hook: the host-bound idle of the fastest runs (``best``; None: best_runs)."""
    best = best_runs(db, workload) if best is None else best
    return idle_sentences(idle_per_step(db.query("idle_breakdown"), best))


def compute_hook(db: Database, workload: str | None = None, best: pl.DataFrame | None = None) -> list[str]:
    """EXTRA_SENTENCES hook: compute efficiency of the fastest runs (``best``; None: best_runs)."""
    best = best_runs(db, workload) if best is None else best
    return compute_sentences(efficiency_per_run(db.query("compute_efficiency"), db.query("op_efficiency"), best))


__all__ = ["ALL_OPS", "FAMILIES", "HOST_BOUND_PCT", "IDLE_PARTS", "best_runs", "compute_hook", "compute_sentences",
           "efficiency_per_run", "idle_hook", "idle_per_step", "idle_sentences"]
