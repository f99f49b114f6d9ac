"""Why efficiency drops: the scaling attribution, per process group, and what grew, in numbers and words.

The library behind ``scaletrace explain``, ``scaletrace diff``, the report's
"Why efficiency drops" section and its findings, so all of them say the same
thing.  Numbers come from the queries ``scaling_attribution``,
``scaling_attribution_by_group`` and ``run_diff`` (their headers define every
column); this module only picks rows and words.  Every run, sweep or not, is
also described on its own (``Explanation.runs``: reports/run_explain.py).

More sentences: ``EXTRA_SENTENCES`` is a list of functions
``(db: Database, workload: str | None, best: pl.DataFrame | None) -> list[str]``
whose sentences are appended to ``Explanation.sentences`` (and so to
``scaletrace explain``, the report section and its findings); ``best`` holds the
runs to speak of (run_id, sweep, world_size: the report's selection), None for
the fastest run of each sweep at each GPU count.  The idle breakdown and compute
efficiency register theirs (reports/efficiency.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import polars as pl

from scaletrace.pipeline.store.db import Database
from scaletrace.queries import QueryError
from scaletrace.reports.chartkit import baseline
from scaletrace.reports.confidence import left_out, split
from scaletrace.reports.device_share import cpu_only_runs
from scaletrace.reports.efficiency import compute_hook, idle_hook
from scaletrace.reports.run_explain import describe_runs
from scaletrace.reports.words import STEP_PARTS, change, duration, figure, gpus, number, points, unit

# The five parts of scaling_attribution, in stacking order, with their words (run_summary's too).
PARTS = STEP_PARTS
TOP_FAMILIES = 3  # kernel families named per GPU-count step
# More sentences for `explain`, the report section and its findings: host-bound idle, compute efficiency.
# (reports/data.py `_why` builds the same sentences from the tables it has already read: a new hook
# goes there too.)
EXTRA_SENTENCES: list[Callable[[Database, str | None, pl.DataFrame | None], list[str]]] = [idle_hook, compute_hook]


@dataclass
class Explanation:
    attribution: pl.DataFrame  # scaling_attribution, vs = 'previous' rows (best runs of consecutive GPU counts)
    by_group: pl.DataFrame  # scaling_attribution_by_group, the same pairs
    growth: pl.DataFrame  # run_diff of each pair, top families by growth, with sweep, from_run, to_run
    sentences: list[str] = field(default_factory=list)  # the sweeps' sentences (GPU-count steps, hooks)
    # every run on its own: run_id, about, sentence (reports/run_explain.py run_sentences)
    runs: pl.DataFrame = field(default_factory=pl.DataFrame)


def gpu_time(ns: float | None) -> str:
    """GPU-time per token in a readable unit: '412 ns', '85.4 µs', '3.28 ms'."""
    if ns is None:
        return "n/a"
    a = abs(ns)
    value, unit = (ns / 1e6, "ms") if a >= 1e6 else (ns / 1e3, "µs") if a >= 1e3 else (ns, "ns")
    return f"{figure(value)} {unit}"


class StepBasisError(QueryError):
    """Two runs whose run_diff figures are on different bases: one per ProfilerStep, one per trace."""


def run_diff(db: Database, run_a: str, run_b: str) -> pl.DataFrame:
    """run_diff of two runs (QueryError naming an unknown run; StepBasisError when one run has
    ProfilerSteps and the other none: its figures would be per step, the other's per traced window)."""
    result = db.query("run_diff", run_a=run_a, run_b=run_b)
    summary = db.query("run_summary").filter(pl.col("run_id").is_in([run_a, run_b]))
    steps = dict(summary.select("run_id", "profiled_steps").iter_rows())  # reports read query files only
    without = [r for r in (run_a, run_b) if not steps.get(r)]
    if len(without) == 1:
        other = run_b if without[0] == run_a else run_a
        raise StepBasisError(
            f"run '{without[0]}' has no ProfilerStep (its figures would be per traced window) and run '{other}' "
            f"has {steps[other]} (per step): they do not compare; diff two runs profiled with a torch.profiler "
            "schedule (ProfilerStep#N), or two without")
    return result


def explain(db: Database, workload: str | None = None, extras: bool = True, run: str | None = None,
            runs_too: bool = True) -> Explanation:
    """The attribution of every GPU-count step of every sweep (or of ``workload``) and its sentences
    (with the EXTRA_SENTENCES hooks' unless ``extras`` is false: the report asks them for its runs),
    and every run's own sentences (``runs``; not when ``runs_too`` is false).  ``run``: only that run,
    and the GPU-count steps that start or end at it (QueryError naming an unknown run)."""
    if run is not None:
        db._check_known("run_id", run)
    params = {"workload": workload} if workload else {}
    attribution = db.query("scaling_attribution", **params).filter(pl.col("vs") == "previous")
    by_group = db.query("scaling_attribution_by_group", **params).filter(pl.col("vs") == "previous")
    if run is not None:
        attribution, by_group = (df.filter((pl.col("from_run") == run) | (pl.col("to_run") == run))
                                 for df in (attribution, by_group))
    # cpu_only: the step's runs hold no device events (run_summary's rule), so its counts are CPU ranks
    attribution = attribution.with_columns(cpu_only=pl.col("to_run").is_in(cpu_only_runs(db)))
    # a step between runs whose tokens per step are a guess compares guesses: left out, said (reports/confidence.py)
    unsure = split(db.query("run_summary"))[1]
    guessed = [r for r in unsure if r in set(attribution["from_run"].to_list() + attribution["to_run"].to_list())]
    attribution, by_group = (df.filter(~pl.col("from_run").is_in(unsure) & ~pl.col("to_run").is_in(unsure))
                             for df in (attribution, by_group))
    growth = _growth(db, attribution)
    out = Explanation(attribution, by_group, growth)
    out.sentences = sentences(attribution, by_group, growth)
    if guessed:
        out.sentences.append(f"GPU-time per token and scaling efficiency are not compared across GPU counts for "
                             f"tokens that are a guess{left_out(guessed)}.")
    if extras and run is None:
        out.sentences += extra_sentences(db, workload)
    if runs_too:
        out.runs = describe_runs(db, _runs_of(db, workload, run))
    return out


def _runs_of(db: Database, workload: str | None, run: str | None) -> list[str] | None:
    """The runs to describe: ``run``, the runs of ``workload``, or every run (None)."""
    if run is not None:
        return [run]
    if workload is None:
        return None
    return db.query("run_summary").filter(pl.col("workload") == workload)["run_id"].to_list()


def extra_sentences(db: Database, workload: str | None = None, best: pl.DataFrame | None = None) -> list[str]:
    """The sentences of the EXTRA_SENTENCES hooks (idle breakdown, compute efficiency, ...) about the
    runs of ``best`` (None: the fastest run of each sweep, or of ``workload``, at each GPU count)."""
    return [line for extra in EXTRA_SENTENCES for line in extra(db, workload, best)]


def _growth(db: Database, attribution: pl.DataFrame) -> pl.DataFrame:
    """The kernel families that grew most (time per step per GPU) at each step of each sweep."""
    frames = []
    for row in attribution.iter_rows(named=True):
        try:
            diff = run_diff(db, row["from_run"], row["to_run"])
        except StepBasisError:  # per step against per trace: no family grew by a figure that means anything
            continue
        top = diff.filter(pl.col("delta_time_per_step_ns") > 0).head(TOP_FAMILIES)
        frames.append(top.with_columns(sweep=pl.lit(row["sweep"]), from_gpus=pl.lit(row["from_gpus"]),
                                       to_gpus=pl.lit(row["to_gpus"])))
    return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()


def sentences(attribution: pl.DataFrame, by_group: pl.DataFrame, growth: pl.DataFrame) -> list[str]:
    """One sentence per GPU-count step: the efficiency lost, split by part, the biggest cause named."""
    return [step_sentence(row, by_group, growth) for row in attribution.iter_rows(named=True)]


def _pct0(x) -> str | None:
    """A scaling efficiency, as the sentences have always written it: '87 %'."""
    x = number(x)
    return None if x is None else f"{x:.0f} %"


def _parts_lost(row: dict) -> list[tuple[str, float]]:
    """The parts whose points lost read as a number (points() not None), largest change first."""
    said = [(p, number(row.get(f"{p}_lost_pts"))) for p in PARTS]
    return sorted([(p, x) for p, x in said if points(x)], key=lambda px: -abs(px[1]))


def step_sentence(row: dict, by_group: pl.DataFrame, growth: pl.DataFrame) -> str:
    """'demo: from 2 GPUs to 4 GPUs, GPU-time per token rose from 85 µs to 120 µs; scaling efficiency vs
    the 1-GPU baseline fell from 90 % to 70 % (20 points lost: exposed communication +15, idle +5). The
    biggest cause is ...'; each clause decided from its values (equal ends: 'stayed at'; no points
    clause for a change too small to state)."""
    lost = number(row.get("efficiency_lost_pts"))
    cpu = row.get("cpu_only")  # runs without a device: CPU ranks (words.gpus)
    step = f"{row['sweep']}: from {gpus(row['from_gpus'], cpu)} to {gpus(row['to_gpus'], cpu)}"
    cost = change("GPU-time per token", row.get("from_gpu_ns_per_token"), row.get("to_gpu_ns_per_token"), gpu_time,
                  rose="went", fell="went")
    eff = change(f"scaling efficiency vs {baseline(row['baseline_gpus'], cpu)}", row.get("from_scaling_efficiency_pct"),
                 row.get("to_scaling_efficiency_pct"), _pct0)
    parts = _parts_lost(row)
    if eff and points(lost):
        listed = ", ".join(f"{PARTS[p]} {_signed(x, lost)}" for p, x in parts)
        eff += f" ({points(abs(lost))} points {'lost' if lost > 0 else 'gained'}{': ' + listed if listed else ''})"
    text = step + "".join(f"{sep}{c}" for sep, c in ((", ", cost), ("; " if cost else ", ", eff)) if c) + "."
    if not cost and not eff:
        text = f"{step}: no GPU-time per token or scaling efficiency to compare."
    if lost is not None and points(lost) and lost > 0 and parts and parts[0][1] > 0:
        top = parts[0][0]
        text += f" The biggest cause is {PARTS[top]}"
        if top == "exposed_comm":
            text += _comm_detail(row, by_group)
        text += "."
    grew = growth.filter((pl.col("sweep") == row["sweep"]) & (pl.col("run_b") == row["to_run"])
                         & (pl.col("run_a") == row["from_run"])) if not growth.is_empty() else growth
    fams = [f"{r['family']} +{duration(r['delta_time_per_step_ns'])}" for r in grew.iter_rows(named=True)
            if duration(r["delta_time_per_step_ns"])] if not grew.is_empty() else []
    if fams:
        text += f" Grew most per step per {unit(cpu)}: {', '.join(fams)}."
    return text


def cause_sentence(row: dict, by_group: pl.DataFrame) -> str | None:
    """The issue's short form, for the report's findings: 'of the 38 points lost from 2 GPUs to 4 GPUs,
    15 are exposed communication (7.8 waiting; all_reduce in ...: 15), 15 idle, 6.9 compute'; None
    where no points were lost, or none that read as a number, or no part lost any."""
    lost = number(row.get("efficiency_lost_pts"))
    cpu = row.get("cpu_only")
    parts = [(p, x) for p, x in _parts_lost(row) if x > 0]
    if lost is None or lost <= 0 or not points(lost) or not parts:
        return None
    said = []
    for p, x in parts:
        text = f"{points(x)} {'are ' if not said else ''}{PARTS[p]}"
        if p == "exposed_comm":
            text += _comm_detail(row, by_group)
        said.append(text)
    return (f"{row['sweep']}: of the {points(lost)} points of scaling efficiency (vs "
            f"{baseline(row['baseline_gpus'], cpu)}) lost from {gpus(row['from_gpus'], cpu)} to "
            f"{gpus(row['to_gpus'], cpu)}, "
            f"{', '.join(said)}.")


def _signed(pts: float, total: float) -> str:
    """A part's points with the sign of its effect on efficiency: '+' costs points where points were lost."""
    costs = pts > 0 if total > 0 else pts < 0
    return f"{'+' if costs else '−'}{points(abs(pts))}"


def _comm_detail(row: dict, by_group: pl.DataFrame) -> str:
    """' (of which waiting for a slower peer 3.1 points), mostly all_reduce in process group default_pg
    (14 points)'; each part only where its points read as a number."""
    out = ""
    wait = number(row.get("exposed_comm_wait_lost_pts"))
    if points(wait):
        out += f" (of which waiting for a slower peer {points(wait)} points)"
    groups = by_group.filter((pl.col("sweep") == row["sweep"]) & (pl.col("from_run") == row["from_run"])
                             & (pl.col("to_run") == row["to_run"])
                             & pl.col("exposed_comm_lost_pts").is_not_nan()).sort(
        "exposed_comm_lost_pts", descending=True, nulls_last=True) if not by_group.is_empty() else by_group
    if groups.height:
        g = groups.row(0, named=True)
        if points(g["exposed_comm_lost_pts"]) and g["exposed_comm_lost_pts"] > 0:
            where = ("an unnamed process group" if g["process_group"] in (None, "unnamed group")
                     else f"process group {g['process_group']}")
            what = g["collective"] if g["collective"] not in (None, "?") else "collectives of unknown type"
            out += f", mostly {what} in {where} ({points(g['exposed_comm_lost_pts'])} points)"
    return out


def run_parts(db: Database) -> pl.DataFrame:
    """run_gpu_time (GPU-ns per token by part) of the fastest run of each sweep at each GPU count."""
    return db.query("run_gpu_time").filter("is_best")


def for_runs(expl: Explanation, runs: list[str]) -> Explanation:
    """Only the steps whose two runs are both in ``runs`` (the report's --runs), sentences rebuilt."""
    def keep(df: pl.DataFrame, a: str, b: str) -> pl.DataFrame:
        return df.filter(pl.col(a).is_in(runs) & pl.col(b).is_in(runs)) if not df.is_empty() else df

    out = Explanation(keep(expl.attribution, "from_run", "to_run"), keep(expl.by_group, "from_run", "to_run"),
                      keep(expl.growth, "run_a", "run_b"))
    out.sentences = sentences(out.attribution, out.by_group, out.growth)
    return out


def table(attribution: pl.DataFrame) -> pl.DataFrame:
    """The attribution for a terminal: one row per step, GPU-µs per token and points lost per part."""
    return attribution.select(
        "sweep", step=pl.format("{} → {}", "from_gpus", "to_gpus"),
        runs=pl.format("{} → {}", "from_run", "to_run"),
        gpu_us_per_token=pl.format("{} → {}", pl.col("from_gpu_ns_per_token").truediv(1e3).round(2),
                                   pl.col("to_gpu_ns_per_token").truediv(1e3).round(2)),
        efficiency_pct=pl.format("{} → {}", pl.col("from_scaling_efficiency_pct").round(1),
                                 pl.col("to_scaling_efficiency_pct").round(1)),
        lost_pts=pl.col("efficiency_lost_pts").round(1),
        **{f"{p}_pts": pl.col(f"{p}_lost_pts").round(1) for p in PARTS},
        waiting_pts=pl.col("exposed_comm_wait_lost_pts").round(1))


__all__ = ["EXTRA_SENTENCES", "Explanation", "PARTS", "QueryError", "explain", "gpu_time", "run_diff",
           "run_parts", "for_runs", "extra_sentences", "sentences", "table"]
