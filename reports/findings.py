"""Plain-sentence findings computed from the report's numbers (text only; escaping is html.py's job).

Every efficiency says what it is against ("vs the previous GPU count" or
"vs the N-GPU baseline"); "exposed communication" is always run_summary's
exposed_comm_pct (DESIGN.md "exposed comm % of step"); any other aggregate
says how it aggregates.
"""

from __future__ import annotations

import polars as pl

from scaletrace.reports.chartkit import baseline, gpus as _gpus
from scaletrace.reports.data import ReportData


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.0f} %" if abs(x) >= 10 else f"{x:.1f} %"


def scaling_findings(data: ReportData) -> list[str]:
    out = []
    best = data.scaling.filter("is_best")
    exposed = dict(zip(data.runs["run_id"].to_list(), data.runs["exposed_comm_pct"].to_list()))
    for (sweep,), group in best.group_by(["sweep"], maintain_order=True):
        rows = group.sort("world_size").to_dicts()
        for prev, cur in zip(rows, rows[1:]):
            gpu_ratio = cur["world_size"] / prev["world_size"]
            tps_ratio = cur["tokens_per_s"] / prev["tokens_per_s"]
            out.append(
                f"{sweep}: from {_gpus(prev['world_size'])} to {_gpus(cur['world_size'])} tokens/s "
                f"{'rose' if tps_ratio >= 1 else 'fell'} to {tps_ratio:.2f}× for {gpu_ratio:g}× the GPUs: "
                f"{_pct(cur['step_efficiency_pct'])} efficiency vs the previous GPU count, "
                f"{_pct(cur['scaling_efficiency_vs_sweep_baseline_pct'])} vs {baseline(cur['base_gpus'])}; "
                f"exposed communication went from {_pct(exposed.get(prev['run_id']))} to "
                f"{_pct(exposed.get(cur['run_id']))} of the step.")
        losing = [r for r in rows[1:] if (r["marginal_tokens_per_s_per_gpu"] or 0) <= 0]
        if losing:
            out.append(f"{sweep}: adding GPUs stops paying off at {_gpus(losing[0]['world_size'])}: the best run "
                       f"there is slower than the best run at the next smaller GPU count.")
    return out


def layout_findings(data: ReportData) -> list[str]:
    out = []
    df = data.layouts.filter((pl.col("layouts_at_size") > 1) & pl.col("tokens_per_s").is_not_null())
    for (workload, gpus), group in df.group_by(["workload", "world_size"], maintain_order=True):
        rows = group.sort("tokens_per_s", descending=True).to_dicts()
        if len(rows) < 2:
            continue
        best, worst = rows[0], rows[-1]
        out.append(f"{workload} at {_gpus(gpus)}: the fastest layout is {best['label']} with "
                   f"{best['tokens_per_s']:,.0f} tokens/s, {best['tokens_per_s'] / worst['tokens_per_s']:.1f}× "
                   f"the slowest of {len(rows)} ({worst['label']}).")
    return out


def comm_findings(data: ReportData) -> list[str]:
    out = []
    runs = data.runs.filter(pl.col("exposed_comm_pct").is_not_null() & (pl.col("ranks_traced") > 1))
    if not runs.is_empty():
        top = runs.sort("exposed_comm_pct", descending=True).row(0, named=True)
        out.append(f"The most exposed communication is in run {top['run_id']} ({_gpus(top['world_size'])}): "
                   f"{_pct(top['exposed_comm_pct'])} of the step.")
    groups = data.exposed_by_group.filter(pl.col("run_id") == top["run_id"]) if not runs.is_empty() else None
    if groups is not None and not groups.is_empty():
        g = groups.sort("group_exposed_comm_pct", descending=True).row(0, named=True)
        out.append(f"In run {g['run_id']}, {g['collective']} in process group {g['process_group']} is the most "
                   f"exposed collective: {_pct(g['group_exposed_comm_pct'])} of the span (its kernels' exposed "
                   "time per rank ÷ the rank's span, averaged over ranks; concurrent collectives each count).")
    waits = data.rank_wait.filter(pl.col("num_collectives") > 0)
    if not waits.is_empty():
        per_run = waits.group_by("run_id").agg(
            pl.col("wait_ns").sum(), pl.col("comm_ns").sum(),
            pl.col("rank").sort_by("straggler_count").last().alias("straggler"),
            pl.col("straggler_count").max(), pl.col("num_collectives").max())
        worst = per_run.with_columns(share=100 * pl.col("wait_ns") / pl.col("comm_ns")) \
            .sort("share", descending=True).row(0, named=True)
        if worst["share"] and worst["share"] > 0:
            out.append(f"In run {worst['run_id']}, {_pct(worst['share'])} of communication time is waiting "
                       f"for a slower peer; rank {worst['straggler']} arrived last in "
                       f"{worst['straggler_count']} of {worst['num_collectives']} collectives.")
    return out


def run_findings(data: ReportData) -> list[str]:
    mfu = data.runs.filter(pl.col("mfu_pct").is_not_null())
    if mfu.height < 2:
        return []
    lo, hi = mfu.sort("mfu_pct").row(0, named=True), mfu.sort("mfu_pct").row(-1, named=True)
    return [f"MFU ranges from {lo['mfu_pct']:.1f} % ({lo['run_id']}) to {hi['mfu_pct']:.1f} % ({hi['run_id']})."]


def why_findings(data: ReportData) -> list[str]:
    """The biggest causes of the efficiency lost at each GPU-count step (scaling_attribution), then the
    EXTRA_SENTENCES (host-bound idle, compute efficiency: reports/efficiency.py)."""
    from scaletrace.reports.explain import cause_sentence

    rows = data.attribution.iter_rows(named=True) if not data.attribution.is_empty() else []
    return [s for row in rows if (s := cause_sentence(row, data.attribution_by_group))] + data.why_more


def projection_findings(data: ReportData) -> list[str]:
    """The knee of each projected sweep, or that none is predicted (reports/charts_projection.py)."""
    return list(getattr(data, "projection_notes", []))


def findings(data: ReportData) -> list[str]:
    return (scaling_findings(data) + why_findings(data) + layout_findings(data) + comm_findings(data)
            + run_findings(data) + projection_findings(data))
