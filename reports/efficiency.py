"""Why the GPUs sit idle and how efficient their compute is, for the fastest run of each sweep at
each GPU count: the tables of the report's idle and compute-efficiency charts and their sentences
(registered in ``reports.explain.EXTRA_SENTENCES``, so ``scaletrace explain`` and the report say the
same thing).

Numbers come from the queries ``idle_breakdown``, ``compute_efficiency`` and ``op_efficiency``
(their headers define every column); the two aggregates made here are defined here only:

- idle per step: each of idle_breakdown's parts (ns) averaged over the run's rows, one per
  rank × profiled step (a rank without ProfilerStep annotations: one row, its whole trace), i.e.
  "ms per step, mean over ranks and steps"; the three parts sum to the idle time.
- per op family: op_efficiency's rows of one family (pass × dtype) combined as compute_efficiency
  combines families: % of peak weighted by FLOPs, TFLOP/s = Σ FLOPs ÷ Σ GPU time.
"""

from __future__ import annotations

import polars as pl

from scaletrace.pipeline.db import Database
from scaletrace.reports.chartkit import gpus

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


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3g}"


def idle_sentences(idle: pl.DataFrame) -> list[str]:
    """Per sweep, where host-bound idle appears: the GPU counts whose idle is at least HOST_BOUND_PCT %
    waiting for the host (``idle``: idle_per_step rows)."""
    out = []
    bound = idle.filter(pl.col("host_wait_pct_of_idle") >= HOST_BOUND_PCT)
    for (sweep,), group in bound.group_by(["sweep"], maintain_order=True):
        said = [f"{r['host_wait_pct_of_idle']:.0f} %{' of the idle time' if i == 0 else ''} at "
                f"{gpus(r['world_size'])} ({_ms(r['host_wait_ns'])} of {_ms(r['idle_ns'])} ms idle per step)"
                for i, r in enumerate(group.sort("world_size").iter_rows(named=True))]
        out.append(f"{sweep}: waiting for the host to launch work (CPU-bound) is {', '.join(said)}; "
                   "means over ranks and profiled steps.")
    return out


def compute_sentences(eff: pl.DataFrame) -> list[str]:
    """Per sweep, compute efficiency (FLOPs-weighted % of peak) and per family, from its fewest to its
    most GPUs, or at its one GPU count (``eff``: efficiency_per_run rows)."""
    out = []
    for (sweep,), group in eff.group_by(["sweep"], maintain_order=True):
        sizes = sorted(group["world_size"].unique().to_list())
        first, last = (group.filter(pl.col("world_size") == n) for n in (sizes[0], sizes[-1]))
        a, b = ({r["series"]: r for r in df.iter_rows(named=True)} for df in (first, last))
        fams = [s for s in a if s != ALL_OPS]
        if len(sizes) == 1:
            if ALL_OPS not in a or not fams:
                continue
            each = "; ".join(f"{s} {a[s]['pct_of_peak']:.0f} %, {a[s]['achieved_tflops']:.0f} TFLOP/s" for s in fams)
            out.append(f"{sweep} at {gpus(sizes[0])}: its {' and '.join(fams)} kernels reach "
                       f"{a[ALL_OPS]['pct_of_peak']:.0f} % of the device's peak for their dtype"
                       + (f" (FLOPs-weighted; {each})." if len(fams) > 1 else
                          f" ({a[fams[0]]['achieved_tflops']:.0f} TFLOP/s)."))
            continue
        shown = [s for s in ([ALL_OPS] if len(fams) > 1 else []) + fams if s in a and s in b]
        said = [f"{'compute efficiency (FLOPs-weighted)' if s == ALL_OPS else s + ' efficiency'} "
                f"{_moves(a[s]['pct_of_peak'], b[s]['pct_of_peak'])} % of peak" for s in shown]
        if not said:
            continue
        text = f"{sweep}: {', '.join(said)} from {gpus(sizes[0])} to {gpus(sizes[-1])}"
        gemm = FAMILIES["gemm"]
        if gemm in a and gemm in b and b[gemm]["gflop_per_op"] < a[gemm]["gflop_per_op"]:
            text += (f": the per-GPU matmuls shrink from {a[gemm]['gflop_per_op']:.3g} to "
                     f"{b[gemm]['gflop_per_op']:.3g} GFLOP per GEMM op (mean)")
        out.append(text + ".")
    return out


def _moves(x: float, y: float) -> str:
    verb = "falls" if y < x - 0.5 else "rises" if y > x + 0.5 else "stays"
    return f"stays near {x:.0f}" if verb == "stays" else f"{verb} from {x:.0f} % to {y:.0f}"


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
