"""Why the GPUs sit idle and how efficient their compute is, for the fastest run of each sweep at
each GPU count: the tables of the report's idle and compute-efficiency charts and their sentences
(registered in ``reports.explain.EXTRA_SENTENCES``, so ``scaletrace explain`` and the report say the
same thing).

The tables are made in ``scaletrace.queries.analysis.efficiency`` (which defines their two
aggregates); this module words them.
"""

from __future__ import annotations

import polars as pl

from scaletrace.pipeline.store.db import Database
from scaletrace.queries.analysis.efficiency import (ALL_OPS, FAMILIES, HOST_BOUND_PCT, IDLE_PARTS, best_runs,
                                                    efficiency_per_run, idle_per_step)
from scaletrace.reports.device_share import cpu_only_runs
from scaletrace.reports.words import duration, figure, gpus, listing, number, present, share


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
                f"{gpus(r['world_size'], r.get('cpu_only'))} ({duration(r['host_wait_ns'])} of {duration(r['idle_ns'])} idle per step)"
                for i, r in enumerate(group.sort("world_size").iter_rows(named=True))]
        out.append(f"{sweep}: waiting for the host to launch work (CPU-bound) is {', '.join(said)}; "
                   "means over ranks and profiled steps.")
    return out


MAX_NAMED = 6  # runs named in the idle chart's "not shown" note (then "and N more")
STEP_IDLE_MIN_PCT = 1.0  # the step-time chart's idle (the step outside the device window) said from this share


def _named(words: list[str]) -> str:
    return listing(words[:MAX_NAMED] + ([f"{len(words) - MAX_NAMED} more"] if len(words) > MAX_NAMED else []))


def _outside_window(rows: pl.DataFrame, breakdown: pl.DataFrame) -> list[str]:
    """Of ``rows``' runs, the step-time chart's idle (run_breakdown.idle_of_step_ns: the step outside
    the profiled steps' device window) where it is at least STEP_IDLE_MIN_PCT % of the step."""
    if breakdown is None or breakdown.is_empty():
        return []
    steps = breakdown.filter(pl.col("run_id").is_in(rows["run_id"].to_list())
                             & (pl.col("idle_of_step_ns") >= STEP_IDLE_MIN_PCT / 100 * pl.col("step_time_ns")))
    return [f"{duration(r['idle_of_step_ns'])} of {r['run_id']}'s {duration(r['step_time_ns'])} step"
            for r in steps.iter_rows(named=True) if r["step_time_ns"]]


def no_idle_note(runs: pl.DataFrame, best: list[str], breakdown: pl.DataFrame | None = None) -> str:
    """The idle chart's "not shown" note where the fastest runs ``best`` have no idle to draw, in the
    runs table's numbers (``runs``: its rows, idle_pct of the profiled steps' device window): "No idle
    time" in that window only where each of them shows 0 there, naming them, and the step outside
    that window where the step-time chart shows it as idle (``breakdown``: its rows, run_breakdown);
    otherwise the table's idle of those that have some."""
    rows = runs.filter(pl.col("run_id").is_in(best))
    idle = rows.filter(pl.col("idle_pct").is_not_null() & ~pl.col("idle_pct").is_nan() & (pl.col("idle_pct") > 0))
    if idle.is_empty():
        outside = _outside_window(rows, breakdown)
        return (f"No idle time in the device window of the fastest runs' profiled steps (from the first device "
                f"event they launched to the last one's end, gaps between steps included): the runs table's idle % "
                f"of step is 0 for {_named(rows['run_id'].to_list())}"
                + (f"; the step-time chart's idle, the rest of the step outside that window, is {_named(outside)}"
                   if outside else "") + ".")
    said = [f"{share(r['idle_pct'])} of the step in {r['run_id']}" for r in idle.iter_rows(named=True)]
    return ("No idle breakdown (query idle_breakdown) for the fastest runs, whose idle in the runs table is "
            f"{_named(said)}.")


def peak_warning(rows: dict) -> str:
    """' Warning: GEMM any (tf32) at 128 % of its peak: above what the device can do: ...' where the
    run's counted ops (``rows``: efficiency_per_run rows by series) are above 100 % of their peak
    (compute_efficiency's warning names every family × pass × dtype above it), else ''."""
    warning = rows.get(ALL_OPS, {}).get("warning")
    return f" Warning: {warning}." if warning else ""


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
            f"device's peak for their dtype" + (f" ({detail})" if detail else "") + "." + peak_warning(a))


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
        warned = [f"at {gpus(n)}:{peak_warning(r)}" for n, r in ((sizes[0], a), (sizes[-1], b)) if peak_warning(r)]
        out.append(text + "." + (f" Above 100 % of peak {'; '.join(warned)}" if warned else ""))
    return out


def _moves(what: str, x: float, y: float) -> str:
    """'GEMM efficiency falls from 60 % to 40 % of peak'; 'stays near 60 % of peak' within half a point."""
    if abs(y - x) <= 0.5 or _pct(x) == _pct(y):
        return f"{what} stays near {_pct(x)} of peak"
    return f"{what} {'falls' if y < x else 'rises'} from {_pct(x)} to {_pct(y)} of peak"


def idle_hook(db: Database, workload: str | None = None, best: pl.DataFrame | None = None) -> list[str]:
    """EXTRA_SENTENCES hook: the host-bound idle of the fastest runs (``best``; None: best_runs)."""
    best = best_runs(db, workload) if best is None else best
    if "cpu_only" not in best.columns:  # runs without a device: CPU ranks (words.gpus)
        best = best.with_columns(cpu_only=pl.col("run_id").is_in(cpu_only_runs(db)))
    return idle_sentences(idle_per_step(db.query("idle_breakdown"), best))


def compute_hook(db: Database, workload: str | None = None, best: pl.DataFrame | None = None) -> list[str]:
    """EXTRA_SENTENCES hook: compute efficiency of the fastest runs (``best``; None: best_runs)."""
    best = best_runs(db, workload) if best is None else best
    return compute_sentences(efficiency_per_run(db.query("compute_efficiency"), db.query("op_efficiency"), best))


__all__ = ["ALL_OPS", "FAMILIES", "HOST_BOUND_PCT", "IDLE_PARTS", "best_runs", "compute_hook", "compute_sentences",
           "no_idle_note", "peak_warning",
           "efficiency_per_run", "idle_hook", "idle_per_step", "idle_sentences"]
