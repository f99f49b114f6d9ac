"""Idle and compute efficiency per run, for the fastest run of each sweep at each GPU count: the
tables the report's idle and compute-efficiency charts and explain's sentences are made from.

Numbers come from the queries ``idle_breakdown``, ``compute_efficiency`` and ``op_efficiency``
(their headers define every column); the two aggregates made here are defined here only:

- idle per step: each of idle_breakdown's parts (ns) averaged over the run's rows, one per
  rank × profiled step (a rank without ProfilerStep annotations: one row, its whole trace), i.e.
  "ms per step, mean over ranks and steps"; the three parts sum to the idle time.  A step's row
  counts the gap between the previous step's device work and its own, so this is the idle of
  run_summary's idle_pct (the profiled steps' device window, gaps between steps included) in ms per
  step, wherever one step's device work ends before the next one's begins.
- per op family: op_efficiency's rows of one family (pass × dtype) combined as compute_efficiency
  combines families: % of peak weighted by FLOPs, TFLOP/s = Σ FLOPs ÷ Σ GPU time; its warning
  the warnings of those rows (a row above 100 % of its peak), joined.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:  # a Database is passed in: the analysis never opens one
    from scaletrace.pipeline.store.db import Database

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
    series: pct_of_peak, achieved_tflops, flops, gpu_ns, num_ops, gflop_per_op (families only),
    warning (NULL, or why a % of peak above 100 cannot be: the queries' warning column)."""
    counted = ops.filter(pl.col("achieved_pct_of_peak").is_not_null())  # FLOPs, GPU time and a peak
    if "warning" not in counted.columns:  # a hand-built frame without the queries' warning column
        counted = counted.with_columns(warning=pl.lit(None, pl.String))
    if "warning" not in runs.columns:
        runs = runs.with_columns(warning=pl.lit(None, pl.String))
    fams = counted.group_by("run_id", "family").agg(
        pl.col("flops").sum(), pl.col("gpu_ns").sum(), pl.col("num_ops").sum(),
        pct_of_peak=(pl.col("flops") * pl.col("achieved_pct_of_peak")).sum() / pl.col("flops").sum(),
        warning=pl.col("warning").drop_nulls().sort().str.join("; "))
    fams = fams.with_columns(warning=pl.when(pl.col("warning") != "").then(pl.col("warning")))
    fams = fams.with_columns(
        series=pl.col("family").replace_strict(FAMILIES, default=pl.col("family")),
        achieved_tflops=pl.col("flops") / pl.col("gpu_ns") / 1e3,
        gflop_per_op=pl.col("flops") / pl.col("num_ops") / 1e9).drop("family")
    total = runs.select("run_id", "flops", "gpu_ns", num_ops=pl.lit(None, pl.Int64),
                        pct_of_peak="compute_efficiency_pct_of_peak", series=pl.lit(ALL_OPS),
                        achieved_tflops="achieved_tflops", gflop_per_op=pl.lit(None, pl.Float64),
                        warning="warning")
    order = {s: i for i, s in enumerate([ALL_OPS, *FAMILIES.values()])}
    both = pl.concat([total, fams.select(total.columns)], how="vertical_relaxed")
    return (best.join(both, on="run_id", how="inner")
            .with_columns(series_order=pl.col("series").replace_strict(order, default=len(order)))
            .sort(["sweep", "world_size", "series_order"]))
