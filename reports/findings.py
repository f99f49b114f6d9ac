"""Plain-sentence findings computed from the report's numbers (text only; escaping is html.py's job).

Every efficiency says what it is against ("vs the previous GPU count" or
"vs the N-GPU baseline"); "exposed communication" is always run_summary's
exposed_comm_pct (docs/metrics.md, "exposed comm % of step"); any other aggregate
says how it aggregates.
"""

from __future__ import annotations

import polars as pl

from scaletrace.reports.basis import judged, rests_on, too_few_ranks, too_small
from scaletrace.reports.chartkit import baseline
from scaletrace.reports.confidence import left_out, split
from scaletrace.reports.data import ReportData
from scaletrace.reports.words import OVERLAPPING_COLLECTIVES, above_100, change, gpus as _gpus, number, present, ratio, unit


def _pct(x) -> str | None:
    """A percentage as the report's table writes it: '38 %', '5.9 %'; None where missing."""
    x = number(x)
    return None if x is None else f"{x:.0f} %" if abs(x) >= 10 else f"{x:.1f} %"


def _tokens_change(prev: dict, cur: dict) -> str | None:
    """'tokens/s rose to 1.8× for 2× the GPUs', 'tokens/s stayed at 4,000 for 2× the GPUs'."""
    a, b = number(prev["tokens_per_s"]), number(cur["tokens_per_s"])
    if a is None or b is None or a <= 0:
        return None
    more = f"for {cur['world_size'] / prev['world_size']:g}× the {unit(cur.get('cpu_only'), plural=True)}"
    if ratio(b / a) == ratio(1.0):
        return f"tokens/s stayed at {b:,.0f} {more}"
    return f"tokens/s {'rose' if b > a else 'fell'} to {ratio(b / a)} {more}"


def _step_finding(sweep: str, prev: dict, cur: dict, exposed: dict) -> str | None:
    """One GPU-count step of a sweep: tokens/s, efficiency (each against what it is against), exposed
    communication; each clause only where its values are there (no clause for none exposed at both)."""
    effs = [f"{_pct(cur['step_efficiency_pct'])} efficiency vs the previous {unit(cur.get('cpu_only'))} count"
            if _pct(cur["step_efficiency_pct"]) else None,
            f"{_pct(cur['scaling_efficiency_vs_sweep_baseline_pct'])} vs {baseline(cur['base_gpus'], cur.get('cpu_only'))}"
            if _pct(cur["scaling_efficiency_vs_sweep_baseline_pct"]) else None]
    a, b = exposed.get(prev["run_id"]), exposed.get(cur["run_id"])
    comm = change("exposed communication", a, b, _pct, rose="went", fell="went")
    if comm is not None and _pct(a) == _pct(b) and number(a) < 0.05:  # none exposed at either count
        comm = None
    rest = [c for c in (", ".join(e for e in effs if e), comm and f"{comm} of the step") if c]
    tokens = _tokens_change(prev, cur)
    if not tokens and not rest:
        return None
    text = (f"{sweep}: from {_gpus(prev['world_size'], prev.get('cpu_only'))} to "
            f"{_gpus(cur['world_size'], cur.get('cpu_only'))}")
    text += f", {tokens}" if tokens else ""
    text += f"{': ' if tokens else ', '}{'; '.join(rest)}" if rest else ""
    return text + "."


def scaling_findings(data: ReportData) -> list[str]:
    out = []
    best = data.scaling.filter("is_best")
    unsure = set(split(data.runs)[1])  # tokens/s on guessed tokens is compared with nothing (reports/confidence.py)
    exposed = dict(zip(data.runs["run_id"].to_list(), data.runs["exposed_comm_pct"].to_list()))
    for (sweep,), group in best.group_by(["sweep"], maintain_order=True):
        rows = group.sort("world_size").to_dicts()
        out += [s for prev, cur in zip(rows, rows[1:])
                if not {prev["run_id"], cur["run_id"]} & unsure and (s := _step_finding(sweep, prev, cur, exposed))]
        # where adding GPUs stops paying is the decision card's verdict (reports/card.py STOP_RULE),
        # first among the findings: one rule, said once
    return out


def layout_findings(data: ReportData) -> list[str]:
    out = []
    unsure = split(data.runs)[1]
    df = data.layouts.filter(~pl.col("run_id").is_in(unsure) & (pl.col("layouts_at_size") > 1)
                             & pl.col("tokens_per_s").is_not_null()
                             & pl.col("tokens_per_s").is_not_nan() & (pl.col("tokens_per_s") > 0))
    for (workload, gpus), group in df.group_by(["workload", "world_size"], maintain_order=True):
        rows = group.sort(["tokens_per_s", "label"], descending=[True, False]).to_dicts()
        if len(rows) < 2:
            continue
        best, worst = rows[0], rows[-1]
        head = f"{workload} at {_gpus(gpus, rows[0].get('cpu_only'))}: "
        if ratio(best["tokens_per_s"] / worst["tokens_per_s"]) == ratio(1.0):
            out.append(head + f"the {len(rows)} layouts run at the same speed ({best['tokens_per_s']:,.0f} tokens/s).")
            continue
        out.append(head + f"the fastest layout is {best['label']} with {best['tokens_per_s']:,.0f} tokens/s, "
                   f"{ratio(best['tokens_per_s'] / worst['tokens_per_s'])} the slowest of {len(rows)} "
                   f"({worst['label']}).")
    return out


def _group(name) -> str:
    return "an unnamed process group" if name in (None, "unnamed group") else f"process group {name}"


def comm_findings(data: ReportData) -> list[str]:
    """The run with the most exposed communication (run_summary's exposed_comm_pct, the runs table's
    column, over every run that has it: a run with one of several ranks traced included, said so),
    its most exposed collective, and the run that waits most for a slower peer; the findings about a
    run too small to judge (reports/basis.py) last."""
    judged, small = _comm_findings(data)
    return judged + small


def _exposed(run: dict, lead: str = "The most exposed communication is in run") -> str:
    """'The most exposed communication is in run r (8 GPUs; 2 of its 8 ranks traced): 38 % of the step
    (mean over ranks).', with 'too small to judge: ...' where it is."""
    basis = [b for b in (rests_on(run),) if b and b not in too_small(run)] + ([judged(run)] if too_small(run) else [])
    return (f"{lead} {run['run_id']} ({_gpus(run.get('world_size'), run.get('cpu_only'))}"
            f"{''.join(f'; {b}' for b in basis)}): "
            f"{_pct(run['exposed_comm_pct'])} of the step (mean over ranks).")


def _comm_findings(data: ReportData) -> tuple[list[str], list[str]]:
    """(findings, findings about runs too small to judge)."""
    out, small = [], []
    runs = data.runs.filter(pl.col("exposed_comm_pct").is_not_null() & pl.col("exposed_comm_pct").is_not_nan()
                            & (pl.col("exposed_comm_pct") > 0))
    ranked = runs.sort(["exposed_comm_pct", "run_id"], descending=[True, False]).to_dicts()
    top = ranked[0] if ranked else None
    if top is not None and too_small(top):
        small.append(_exposed(top))  # the table's largest figure, said with what it rests on, never first
        top = next((r for r in ranked if not too_small(r)), None)
        if top is not None:
            out.append(_exposed(top, "Of the runs large enough to judge, the most exposed communication is in run"))
    elif top is not None:
        out.append(_exposed(top))
    if top is not None:
        groups = data.exposed_by_group.filter((pl.col("run_id") == top["run_id"])
                                              & pl.col("group_exposed_comm_pct").is_not_nan()
                                              & (pl.col("group_exposed_comm_pct") > 0))
        if not groups.is_empty():
            g = groups.sort("group_exposed_comm_pct", descending=True).row(0, named=True)
            what = g["collective"] if g["collective"] not in (None, "?") else "collectives of unknown type"
            out.append(f"In run {g['run_id']}, {what} in {_group(g['process_group'])} is the most exposed "
                       f"collective: {_pct(g['group_exposed_comm_pct'])} of the span"
                       f"{above_100(g['group_exposed_comm_pct'], OVERLAPPING_COLLECTIVES)} (its kernels' exposed time per "
                       "rank ÷ the rank's span, averaged over ranks; concurrent collectives each count).")
    said, where = _wait_finding(data)
    (small if where == "small" else out).extend(said)
    return out, small


def _wait_finding(data: ReportData) -> tuple[list[str], str]:
    """The run that waits most for a slower peer, from the runs large enough to judge where one waits;
    its straggler named only where enough of its ranks are traced (reports/basis.py)."""
    waits = data.rank_wait.filter(pl.col("num_collectives") > 0)
    if waits.is_empty():
        return [], ""
    per_run = (waits.group_by("run_id").agg(
        pl.col("wait_ns").sum(), pl.col("comm_ns").sum(), pl.col("rank").n_unique().alias("ranks"),
        pl.col("rank").sort_by(["straggler_count", "rank"], descending=[True, False]).first().alias("straggler"),
        pl.col("straggler_count").max(), pl.col("num_collectives").max())
        .filter(pl.col("comm_ns") > 0)
        .with_columns(share=100 * pl.col("wait_ns") / pl.col("comm_ns"))
        .filter(pl.col("share").is_not_nan() & (pl.col("share") > 0)))
    if per_run.is_empty():
        return [], ""
    about = {r["run_id"]: r for r in data.runs.to_dicts()} if "run_id" in data.runs.columns else {}
    rows = per_run.sort(["share", "run_id"], descending=[True, False]).to_dicts()
    fine = [r for r in rows if not too_small(about.get(r["run_id"], {}))]
    worst = (fine or rows)[0]
    run = about.get(worst["run_id"], {})
    text = (f"In run {worst['run_id']}, {_pct(worst['share'])} of communication time is waiting for a "
            "slower peer")
    basis = rests_on(run)
    if basis:
        text += f" ({basis})"
    if worst["straggler_count"] and too_few_ranks(run):
        text += "; too few of its ranks are traced to name a straggler"
    elif worst["straggler_count"]:
        text += (f"; rank {worst['straggler']} arrived last in {worst['straggler_count']} of "
                 f"{worst['num_collectives']} collectives" + (f" (of the {worst['ranks']} ranks traced)"
                                                              if basis else ""))
    return [text + "."], ("" if fine else "small")


MFU_LOWER_BOUND = (" (≥: a lower bound, its FLOPs counted from recorded shapes that cover under half the GEMM, "
                   "attention and convolution kernel time: run_summary.flops_coverage_pct)")


def _mfu(r: dict) -> str:
    """'1.7 %', or '≥ 1.7 %' where run_summary marks the MFU a lower bound."""
    return ("≥ " if r.get("mfu_is_lower_bound") else "") + f"{r['mfu_pct']:.1f} %"


def run_findings(data: ReportData) -> list[str]:
    """The range of MFU over the runs whose tokens per step are not a guess (reports/confidence.py:
    those are left out, named)."""
    mfu, unsure = split(data.runs.filter(pl.col("mfu_pct").is_not_null() & pl.col("mfu_pct").is_not_nan()))
    gone = left_out(unsure)
    if mfu.height < 2:
        return [f"MFU is {_mfu(mfu.row(0, named=True))} in run {mfu['run_id'][0]}{gone}."] if gone and mfu.height else []
    ordered = mfu.sort(["mfu_pct", "run_id"])
    lo, hi = ordered.row(0, named=True), ordered.row(-1, named=True)
    if f"{lo['mfu_pct']:.1f}" == f"{hi['mfu_pct']:.1f}" and _mfu(lo) == _mfu(hi):
        return [f"MFU is {_mfu(hi)} in {'both' if mfu.height == 2 else f'all {mfu.height}'} runs "
                "that have one" + (MFU_LOWER_BOUND if hi.get("mfu_is_lower_bound") else "") + gone + "."]
    bound = MFU_LOWER_BOUND if lo.get("mfu_is_lower_bound") or hi.get("mfu_is_lower_bound") else ""
    return [f"MFU ranges from {_mfu(lo)} ({lo['run_id']}) to {_mfu(hi)} ({hi['run_id']}){bound}{gone}."]


def why_findings(data: ReportData) -> list[str]:
    """The biggest causes of the efficiency lost at each GPU-count step (scaling_attribution), then the
    EXTRA_SENTENCES (host-bound idle, compute efficiency: reports/efficiency.py)."""
    from scaletrace.reports.explain import cause_sentence

    rows = (data.attribution.sort("efficiency_lost_pts", descending=True, nulls_last=True).iter_rows(named=True)
            if not data.attribution.is_empty() else [])  # ranked by the efficiency points they explain
    return [s for row in rows if (s := cause_sentence(row, data.attribution_by_group))] + data.why_more


def projection_findings(data: ReportData) -> list[str]:
    """The knee of each projected sweep, or that none is predicted (reports/charts_projection.py)."""
    return list(getattr(data, "projection_notes", []))


def card_findings(data: ReportData) -> list[str]:
    """The decision card's verdicts (reports/card.py): where adding GPUs stops paying, per sweep."""
    return [v.sentence for v in data.card.verdicts] if data.card is not None else []


def findings(data: ReportData) -> list[str]:
    """The verdicts first, then the causes ranked by the efficiency points they explain, then the rest;
    findings about a run too small to judge (reports/basis.py) last, never leading."""
    comm, small = _comm_findings(data)
    return (card_findings(data) + why_findings(data) + scaling_findings(data) + layout_findings(data)
            + comm + run_findings(data) + projection_findings(data) + small)
