"""Every run on its own, in sentences: what ``scaletrace explain`` and the report's "Run by run"
section say about one run, sweep or no sweep (a single trace from someone else's job included).

Per run, in this order, each sentence built from values and left out when its values are missing:

- ``step``: ranks traced, profiled steps, step time, and the five shares of the profiled steps'
  device window (run_summary: each part ÷ the rank's window, gaps between steps included, mean
  over ranks; the whole traced span of a trace without steps);
- ``warnings``: run_summary's warnings (an impossible or inconsistent figure), right after the
  step sentence whose numbers they concern;
- ``sliver``: the device was busy a sliver of the step (run_device_share, reports/device_share.py);
- ``idle``: idle time per profiled step and what it waited for (idle_breakdown: the parts summed
  over the run's rank × step rows, gaps between steps included, as shares of their idle time: the
  idle of run_summary's idle_pct);
- ``communication``: exposed communication % of step (run_summary) and the process groups and
  collectives behind it (run_exposed_comm_by_group);
- ``straggler``: the rank that arrived last most often and the share of communication spent
  waiting for a slower peer (rank_wait, summed over ranks);
- ``compute``: compute efficiency (compute_efficiency, op_efficiency: reports/efficiency.py);
- ``kernels``: kernel time by family (kernel_summary, summed per family; skipped while that
  query is absent).

``run_sentences(tables)`` is the one function that builds them; ``scaletrace explain`` prints
them under each run's name and the report shows them the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from scaletrace.pipeline.store.db import Database
from scaletrace.queries import QueryError
from scaletrace.reports.basis import too_few_ranks
from scaletrace.reports.device_share import sliver_words
from scaletrace.reports.order import sort_runs
from scaletrace.reports.efficiency import ALL_OPS, FAMILIES, efficiency_per_run, peak_warning
from scaletrace.reports.words import (OVERLAPPING_COLLECTIVES, STEP_PARTS, above_100, count, duration, figure,
                                     listing, number, present, share)
from scaletrace.reports.words import COLLECTIVE_WAIT

TOP_GROUPS = 3  # process group × collective pairs named per run
TOP_KERNEL_FAMILIES = 3  # kernel families named per run
KERNEL_COLUMNS = ("run_id", "family", "total_ns", "time_pct_of_kernel_time")  # what the family sentence reads
# idle_breakdown part -> words (GPU traces; on CPU-only traces every gap is host time)
IDLE_WORDS = {"host_wait_ns": "waiting for the host to launch work (CPU-bound)",
              "dependency_wait_ns": "waiting on a dependency (a stream or event wait, a peer, a synchronize)",
              "other_idle_ns": "with no launching call in the trace"}
CPU_HOST_WORDS = "outside any recorded op (Python, data loading, framework overhead)"


@dataclass
class RunTables:
    """The query results the run sentences are built from, for the selected runs."""

    summary: pl.DataFrame  # run_summary
    share: pl.DataFrame  # run_device_share
    idle: pl.DataFrame  # idle_breakdown
    compute: pl.DataFrame  # compute_efficiency
    ops: pl.DataFrame  # op_efficiency
    by_group: pl.DataFrame  # run_exposed_comm_by_group
    rank_wait: pl.DataFrame  # rank_wait
    kernels: pl.DataFrame | None  # kernel_summary; None while that query is absent


def load_tables(db: Database, runs: list[str] | None = None, summary: pl.DataFrame | None = None) -> RunTables:
    """Every table the sentences read (only ``runs`` when given; ``summary``: run_summary, already read)."""
    def rows(name: str) -> pl.DataFrame:
        df = summary if name == "run_summary" and summary is not None else db.query(name)
        return df.filter(pl.col("run_id").is_in(runs)) if runs is not None else df

    try:
        kernels = rows("kernel_summary")
    except QueryError:
        kernels = None
    if kernels is not None and not set(KERNEL_COLUMNS) <= set(kernels.columns):
        kernels = None
    return RunTables(sort_runs(rows("run_summary")), rows("run_device_share"), rows("idle_breakdown"),
                     rows("compute_efficiency"), rows("op_efficiency"), rows("run_exposed_comm_by_group"),
                     rows("rank_wait"), kernels)


def describe_runs(db: Database, runs: list[str] | None = None) -> pl.DataFrame:
    """run_sentences of the runs in ``db`` (all, or ``runs``), each run's critical path after them."""
    from scaletrace.reports.critical_path_words import with_path

    return with_path(db, run_sentences(load_tables(db, runs)))


def run_sentences(t: RunTables) -> pl.DataFrame:
    """One row per sentence: run_id, about (step, warnings, sliver, idle, communication, straggler, compute,
    kernels), sentence; runs in run order (reports.order: workload, GPU count numerically, layout)."""
    def by_run(df: pl.DataFrame | None) -> dict[str, pl.DataFrame]:
        if df is None or df.is_empty():
            return {}
        return {key[0]: part for key, part in df.partition_by("run_id", as_dict=True).items()}

    best = t.summary.select("run_id", sweep=pl.col("workload").fill_null(""), world_size="world_size")
    efficiency = efficiency_per_run(t.compute, t.ops, best)
    parts = {name: by_run(df) for name, df in (("share", t.share), ("idle", t.idle), ("eff", efficiency),
                                               ("ops", t.ops), ("groups", t.by_group), ("wait", t.rank_wait),
                                               ("kernels", t.kernels))}
    empty = pl.DataFrame()
    rows = []
    for s in t.summary.iter_rows(named=True):
        run = s["run_id"]
        got = {name: table.get(run, empty) for name, table in parts.items()}
        device = got["share"].row(0, named=True) if not got["share"].is_empty() else {}
        said = [("step", step_sentence(s)),
                ("warnings", warnings_sentence(s)),  # beside the step time and shares they concern
                ("sliver", _sentence(sliver_words(device, s["ranks_traced"]), ", not the step")),
                ("idle", idle_sentence(got["idle"], device.get("cpu_only"))),
                ("communication", comm_sentence(s, got["groups"])),
                ("straggler", straggler_sentence(s, got["wait"])),
                ("compute", compute_sentence(got["eff"], got["ops"])),
                ("kernels", kernel_sentence(got["kernels"], device.get("cpu_only")))]
        rows += [{"run_id": run, "about": about, "sentence": text} for about, text in said if text]
    return pl.DataFrame(rows, schema={"run_id": pl.String, "about": pl.String, "sentence": pl.String})


def _sentence(text: str | None, tail: str = "") -> str | None:
    """A clause as a sentence: capitalised, with ``tail`` and a full stop."""
    return f"{text[0].upper()}{text[1:]}{tail}." if text else None


def step_sentence(s: dict) -> str:
    """'All 8 ranks traced on Tesla V100-SXM2-32GB, 1 profiled step; step time 19.9 ms (...); the traced
    span is 7.8 % compute, 38 % exposed communication and 54 % idle (mean over ranks).'"""
    ranks, world = s.get("ranks_traced") or 0, s.get("world_size")
    traced = (f"{ranks} of {world} ranks traced" if present(world) and world != ranks
              else "both ranks traced" if ranks == 2 else f"all {ranks} ranks traced" if ranks > 2
              else count(ranks, "rank") + " traced")
    if s.get("device_name") and not s.get("cpu_only"):  # a CPU-only run naming a device: the warning says it
        traced += f" on {s['device_name']}"
    steps = _profiled_steps(s)
    clauses = [f"{traced}, {count(steps, 'profiled step') if steps else 'no profiled step (no ProfilerStep annotation)'}"]
    if present(s.get("step_time_ns")):
        source = ("step in the collector's step log" if s.get("step_time_source") == "step_log"
                  else "ProfilerStep")
        over = count(s["num_steps"], "step") if present(s.get("num_steps")) else "steps"
        clauses.append(f"step time {duration(s['step_time_ns'])} (the device's steady-state step period: the device "
                       "runs behind the host and paces the loop)" if s.get("step_time_source") == "device_period"
                       else f"step time {duration(s['step_time_ns'])} (the slowest rank's {source}, median over {over})")
    parts = [f"{share(pct)} {words}" for pct, words in _step_parts(s) if share(pct)]
    if parts:
        # the window's length per step: the device step period, the idle sentence's "of its … on the device"
        lane = "CPU" if s.get("cpu_only") else "device"
        window = (f"the profiled steps' {lane} window ({duration(s['traced_window_per_step_ns'])} a step)"
                  if present(s.get("traced_window_per_step_ns")) else "the traced span")
        clauses.append(f"{window} is {listing(parts)} (over ranks and steps)")
    return _sentence("; ".join(clauses))


def _step_parts(s: dict) -> list[tuple[float, str]]:
    """(share, words) of each positive part of the step, in STEP_PARTS order; the collective wait of a
    CPU-only run (run_summary.collective_wait_pct, a part of other_pct) said on its own before the rest
    of other."""
    pcts = {p: number(s.get(f"{p}_pct")) for p in STEP_PARTS}
    wait = min(number(s.get("collective_wait_pct")) or 0.0, pcts["other"] or 0.0)
    parts = []
    for p, words in STEP_PARTS.items():
        if p == "other" and wait > 0:
            parts.append((wait, COLLECTIVE_WAIT))
            rest = pcts["other"] - wait
            pcts["other"] = rest if rest > 1e-9 * pcts["other"] else 0.0  # no rounding residue said as a share
        if pcts[p] is not None and pcts[p] > 0:
            parts.append((pcts[p], words))
    return parts


def _profiled_steps(s: dict) -> int:
    """The ProfilerSteps traced (run_summary.profiled_steps); num_steps counts the steps of the step
    time, the step log's where the run has one, and only stands in for a summary without the column."""
    return (s["profiled_steps"] if "profiled_steps" in s else s.get("num_steps")) or 0


def warnings_sentence(s: dict) -> str | None:
    """run_summary's warnings, each as the query words it, said beside the step sentence: 'Warning: MFU
    120 % is above 100 %: ...'; None where there is none."""
    text = s.get("warnings")
    return f"Warning: {text.rstrip('.')}." if isinstance(text, str) and text.strip() else None


def _lanes(cpu_only, ranks: int) -> str:
    return "the traced CPU threads" if cpu_only else "the GPUs" if ranks > 1 else "the GPU"


def idle_sentence(idle: pl.DataFrame, cpu_only=None, span_idle_pct=None) -> str | None:
    """'The GPUs sat idle 7.68 ms per profiled step (mean over ranks and steps): 98 % of it waiting for
    the host to launch work (CPU-bound), 1.3 % waiting on a dependency (...)'; 'never idle' for zero.
    The idle is run_summary's idle_pct in ms per step: the gaps inside each step's device window and
    the gap before it, from the previous step's device work (idle_breakdown).  ``span_idle_pct`` is
    accepted for older callers and not used: no idle of the steps lies outside these rows."""
    if idle.is_empty():
        return None
    lanes = _lanes(cpu_only, idle["rank"].n_unique())
    stepped = idle["step"].is_not_null().any()
    window = "per profiled step (mean over ranks and steps)" if stepped else (
        "in its traced window (mean over ranks)")
    idle = idle.with_columns(pl.col(c).cast(pl.Float64).fill_nan(None) for c in ("idle_ns", *IDLE_WORDS))
    total = idle["idle_ns"].sum()
    if not duration(idle["idle_ns"].mean()):
        return None
    if not total:
        # of the window, not the step: a step longer than its device work has idle outside it
        return _sentence(f"{lanes} {'were' if lanes != 'the GPU' else 'was'} never idle "
                         f"{'in the device window of the profiled steps' if stepped else 'in the traced window'}")
    words = dict(IDLE_WORDS, host_wait_ns=CPU_HOST_WORDS) if cpu_only else IDLE_WORDS
    parts = sorted(((idle[c].sum(), w) for c, w in words.items() if idle[c].sum() > 0 and share(100 * idle[c].sum() / total)),
                   key=lambda p: -p[0])
    split = ", ".join(f"{share(100 * ns / total)}{' of it' if i == 0 else ''} {w}" for i, (ns, w) in enumerate(parts))
    return _sentence(f"{lanes} sat idle {duration(idle['idle_ns'].mean())} {_of_period(idle, window, stepped, cpu_only)}"
                     + (f": {split}" if split else ""))


def _of_period(idle: pl.DataFrame, window: str, stepped: bool, cpu_only=None) -> str:
    """'per profiled step, 3.0 % of its 18.8 ms on the device (mean over ranks and steps)': the idle
    of the step model's steady-state device slots (docs/metrics.md; idle_breakdown's rows), one
    aggregate: ms = Σ idle ÷ rows, the slot = Σ span ÷ rows (run_summary.device_step_period_ns), % =
    Σ idle ÷ Σ span (run_summary.idle_pct), so the % is the ms over the slot."""
    if not stepped or "span_ns" not in idle.columns:
        return window
    pct = 100 * idle["idle_ns"].sum() / idle["span_ns"].sum() if idle["span_ns"].sum() else None
    where = "CPU window" if cpu_only else "on the device"
    of = f", {share(pct)} of its {duration(idle['span_ns'].mean())} {where}" if present(pct) else ""
    return f"per profiled step{of} (mean over ranks and steps)"


def _group(process_group: str) -> str:
    return "an unnamed process group" if process_group == "unnamed group" else f"process group {process_group}"


def _collective(name: str) -> str:
    return "collectives of unknown type" if name in (None, "?") else name


def comm_sentence(s: dict, groups: pl.DataFrame) -> str | None:
    """'Exposed communication is 38 % of the step (mean over ranks), most of it all_to_all in an
    unnamed process group (29 % of the span) and ...'; 'no communication' / 'all under compute'."""
    if groups.is_empty():
        return "No communication in its traces."
    exposed = groups.filter(pl.col("exposed_per_rank_ns") > 0).sort(
        pl.col("group_exposed_comm_pct").fill_nan(None), descending=True, nulls_last=True)
    if exposed.is_empty():
        comm = duration(groups["comm_per_rank_ns"].cast(pl.Float64).fill_nan(None).sum())
        return _sentence(f"its communication{f' ({comm} per rank)' if comm else ''} ran entirely under compute: "
                         "no exposed communication")
    top = exposed.head(TOP_GROUPS).to_dicts()
    stated = all(share(g["group_exposed_comm_pct"]) for g in top)  # each share, or none of them
    named = [f"{_collective(g['collective'])} in {_group(g['process_group'])}"
             + (f" {share(g['group_exposed_comm_pct'])}" + above_100(g["group_exposed_comm_pct"], OVERLAPPING_COLLECTIVES)
                if stated else "") for g in top]
    more = exposed.height - len(top)
    window = "step" if _profiled_steps(s) else "traced span"
    lead = (f"exposed communication is {share(s['exposed_comm_pct'])} of the {window} (mean over ranks)"
            f"{_waited(s)}; " if present(s.get("exposed_comm_pct")) else "")
    return _sentence(f"{lead}{'by process group and collective, ' if stated else 'its exposed communication is in '}{', '.join(named)}"
                     + (f" (and {count(more, 'other')})" if more else "")
                     + (" of the span (each group's kernels' exposed time ÷ the rank's span, mean over ranks; "
                        "concurrent collectives each count)" if stated else ""))


def _waited(s: dict) -> str:
    """', and the CPU threads sat blocked waiting for a collective a further 31 %' (a CPU-only run's
    collective waits: run_summary.collective_wait_pct, counted in other, not in exposed communication)."""
    wait = share(s.get("collective_wait_pct")) if (number(s.get("collective_wait_pct")) or 0) > 0 else None
    return f", and its CPU threads sat blocked waiting for a collective a further {wait}" if wait else ""


def straggler_sentence(s: dict, wait: pl.DataFrame) -> str | None:
    """'Rank 7 is the straggler: it arrived last at 5 of the 8 collectives matched across the 8 ranks;
    waiting for a slower peer is 96 % of their communication time (50.8 of 52.5 ms, summed over ranks).'"""
    ranks = wait.filter(pl.col("num_collectives") > 0) if not wait.is_empty() else wait
    world = s.get("world_size")
    if ranks.height == 1 and present(world) and world > 1 and (s.get("ranks_traced") or 0) < world:
        return (f"Only {s.get('ranks_traced') or 1} of the {world} ranks is traced: waiting for a slower peer "
                "cannot be told apart from transfer, nor a straggler named.")
    if ranks.height < 2:
        return None
    top = ranks["straggler_count"].max()
    matched = ranks["num_collectives"].max()
    if not top:
        return _sentence(f"no straggler: the {ranks.height} ranks started "
                         f"{'the one' if matched == 1 else f'each of the {matched}'} matched "
                         f"collective{'s' if matched != 1 else ''} together")
    last = sorted(ranks.filter(pl.col("straggler_count") == top)["rank"].to_list())
    who = (f"rank {last[0]} is the straggler: it" if len(last) == 1
           else f"ranks {listing([str(r) for r in last])} are the stragglers: each")
    if too_few_ranks(s):  # the last of a few traced ranks is not the job's straggler (reports/basis.py)
        who = (f"only {s.get('ranks_traced')} of the {world} ranks are traced, too few to name the job's "
               f"straggler; of them, {f'rank {last[0]}' if len(last) == 1 else 'ranks ' + listing([str(r) for r in last])}")
    among = "the one collective" if matched == 1 else f"{top} of the {matched} collectives"
    text = f"{who} arrived last at {among} matched across the {ranks.height} ranks"
    waited, comm = (number(ranks[c].cast(pl.Float64).fill_nan(None).sum()) for c in ("wait_ns", "comm_ns"))
    if waited and comm and share(100 * waited / comm) and duration(waited) and duration(comm):
        text += (f"; waiting for a slower peer is {share(100 * waited / comm)} of their communication time "
                 f"({duration(waited)} of {duration(comm)}, summed over ranks)")
    return _sentence(text)


def compute_sentence(eff: pl.DataFrame, ops: pl.DataFrame) -> str | None:
    """'Its GEMM and attention kernels reach 60 % of the device's peak for their dtype (FLOPs-weighted;
    GEMM 62 %, 613 TFLOP/s; ...)'; without a known peak, the TFLOP/s its ops reach."""
    rows = {r["series"]: r for r in eff.iter_rows(named=True)} if not eff.is_empty() else {}
    fams = [name for name in rows if name != ALL_OPS]
    if fams and ALL_OPS in rows:
        each = "; ".join(f"{f} {share(rows[f]['pct_of_peak'])}, {figure(rows[f]['achieved_tflops'])} TFLOP/s" for f in fams)
        detail = f"FLOPs-weighted; {each}" if len(fams) > 1 else f"{figure(rows[fams[0]]['achieved_tflops'])} TFLOP/s"
        return (f"Its {listing(fams)} kernels reach {share(rows[ALL_OPS]['pct_of_peak'])} of the device's peak "
                f"for their dtype ({detail})." + peak_warning(rows))
    counted = ops.filter(pl.col("flops").is_not_null() & (pl.col("gpu_ns") > 0)) if not ops.is_empty() else ops
    if counted.is_empty():
        return None
    per = (counted.group_by("family").agg(pl.col("flops").sum(), pl.col("gpu_ns").sum(),
                                          pl.col("dtype").drop_nulls().unique().sort().str.join("/"))
           .sort("flops", descending=True))
    said = [f"{FAMILIES.get(r['family'], r['family'])} ops run at {figure(r['flops'] / r['gpu_ns'] / 1e3)} TFLOP/s"
            + (f" ({r['dtype']})" if r["dtype"] else "") for r in per.iter_rows(named=True)]
    return f"Its {listing(said)}; no peak FLOP/s is known for that device and dtype, so no % of peak."


def kernel_sentence(kernels: pl.DataFrame, cpu_only=None) -> str | None:
    """'Kernel time by family (summed over ranks): GEMM 45 % (12.3 ms), elementwise 20 % (5.4 ms), ...'
    (kernel_summary's total_ns and time_pct_of_kernel_time summed per family; CPU-only traces: CPU ops)."""
    if kernels.is_empty():
        return None
    pct = pl.col("time_pct_of_kernel_time").cast(pl.Float64)
    fams = (kernels.group_by("family").agg(pl.col("total_ns").cast(pl.Float64).sum(),
                                           pl.when(pct.is_not_null().any()).then(pct.sum()))  # all NULL: NULL
            .filter(pl.col("total_ns") > 0).sort(["total_ns", "family"], descending=[True, False]))
    if fams.is_empty():
        return None
    said = [f"{r['family']} {share(r['time_pct_of_kernel_time'])} ({duration(r['total_ns'])})"
            if present(r["time_pct_of_kernel_time"]) else f"{r['family']} {duration(r['total_ns'])}"
            for r in fams.head(TOP_KERNEL_FAMILIES).iter_rows(named=True)]
    what = ("CPU op time by family (summed over ranks; a nested op counts inside its parent too)" if cpu_only
            else "Kernel time by family (summed over ranks)")
    return f"{what}: {', '.join(said)}."


def lines(sentences: pl.DataFrame) -> list[str]:
    """The sentences for a terminal: each run's name, then its sentences indented."""
    out = []
    for (run,), part in sentences.group_by(["run_id"], maintain_order=True):
        out.append(f"{run}:")
        out += [f"  {text}" for text in part["sentence"]]
    return out


__all__ = ["RunTables", "comm_sentence", "compute_sentence", "describe_runs", "idle_sentence", "kernel_sentence",
           "lines", "load_tables", "run_sentences", "step_sentence", "straggler_sentence", "warnings_sentence"]
