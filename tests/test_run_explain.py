"""`scaletrace explain` of runs that are no sweep, the sliver rule and the one-line projection note.

Every real GPU run of ../shared/traces (shared_db: each run its own folder, with no run.json, so no
sweep) is explained, and each sentence `scaletrace explain` says about it is checked against an
independent reading: the trace's JSON
read here (device intervals, ProfilerStep windows, launches by correlation, NCCL kernels matched
by order across ranks: DESIGN.md's definitions, none of the pipeline's code), or the query rows
recomputed (per process group, compute efficiency, kernel families).
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from decimal import Decimal
from statistics import mean, median

import polars as pl
import pytest
from click.testing import CliRunner

from conftest import SHARED_TRACES, cpu, kernel, query, shared_runs, spec_values, write_trace
from scaletrace.cli import main
from scaletrace.pipeline import connect, ingest
from scaletrace.pipeline.synth import SynthRun, write_run
from scaletrace.reports import build_report
from scaletrace.reports.charts_projection import not_projected_line
from scaletrace.reports import explain as explain_module
from scaletrace.reports.explain import explain
from scaletrace.queries.analysis.projection_sweeps import Skipped
from scaletrace.reports.run_explain import (comm_sentence, compute_sentence, describe_runs, idle_sentence,
                                            kernel_sentence, step_sentence, straggler_sentence)
from scaletrace.reports.words import duration, share

SLIVER_PCT = 10  # the rule as specified: device activity covering under 10 % of the step is a sliver

# --- an independent reading of a Kineto trace (DESIGN.md "Classification", "Metric definitions") -------

DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset", "cuda_sync"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime", "hip_runtime"}
STEP_RE = re.compile(r"ProfilerStep\s*#\s*(\d+)")
# communication: NCCL / RCCL / HCCL kernels, symmetric-memory and custom all-reduce kernels, DeepEP, ...
COMM_RE = re.compile(r"nccl|rccl|^hccl|all_?gather|reduce_?scatter|all_?reduce|cross_device_reduce|multimem"
                     r"|lamport|deep_ep|all_?to_?all|nvshmem|userbuffers|mscclpp")


def _ns(us) -> int:
    """µs (a Decimal as written in the file: a float would lose the ns of 1.7e18-ns clocks) -> ns."""
    return int(round(Decimal(us) * 1000))


def _union(intervals) -> list[list[int]]:
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        elif e > s:
            out.append([s, e])
    return out


def _length(islands) -> int:
    return sum(e - s for s, e in islands)


def _minus(a, b) -> int:
    """|a \\ b| of two unions."""
    return _length(a) - sum(max(0, min(e, be) - max(s, bs)) for s, e in a for bs, be in b)


def _gaps(events) -> list[tuple[int, int, list]]:
    """(gap start, gap end, the events starting at the gap's end) of one window's device events."""
    out, prev_end = [], None
    events = sorted(events, key=lambda e: (e["start"], e["end"]))
    starting: dict[int, list] = {}  # start -> the events starting then, in order
    for e in events:
        starting.setdefault(e["start"], []).append(e)
    for i, e in enumerate(events):
        if prev_end is not None and e["start"] > prev_end and (i == 0 or events[i - 1]["start"] != e["start"]):
            out.append((prev_end, e["start"], starting[e["start"]]))
        prev_end = e["end"] if prev_end is None else max(prev_end, e["end"])
    return out


def read_rank(path) -> dict:
    """One rank's trace: span, busy, exposed comm (whole trace), ProfilerStep windows, idle per window
    and its split by when the gap's next event was launched, NCCL kernels in start order."""
    with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as f:
        doc = json.load(f, parse_float=Decimal)
    raw = doc["traceEvents"] if isinstance(doc, dict) else doc
    xs = [e for e in raw if e.get("ph") == "X"]
    launch = {e["args"]["correlation"]: _ns(e["ts"]) for e in xs
              if str(e.get("cat", "")).lower() in RUNTIME_CATS and "correlation" in (e.get("args") or {})}
    dev = []
    for e in xs:
        if str(e.get("cat", "")).lower() in DEVICE_CATS:
            start = _ns(e["ts"])
            corr = (e.get("args") or {}).get("correlation")
            dev.append({"start": start, "end": start + _ns(e["dur"]), "launch": launch.get(corr),
                        "comm": str(e["cat"]).lower() == "kernel" and bool(COMM_RE.search(e["name"].lower())),
                        "kernel": str(e["cat"]).lower() == "kernel"})
    steps = {}
    for e in xs:  # CPU-side ProfilerStep annotations (the GPU-side mirror is not a step of its own)
        m = STEP_RE.search(e.get("name", ""))
        if m and str(e.get("cat", "")).lower() != "gpu_user_annotation":
            steps.setdefault(int(m.group(1)), (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])))
    # a device event belongs to the step of the call that launched it, else the step it starts in
    windows: dict = {}
    for e in dev:
        t = e["launch"] if e["launch"] is not None else e["start"]
        inside = [n for n, (s, f) in steps.items() if s <= t < f]
        if inside:
            windows.setdefault(max(inside, key=lambda n: steps[n][0]), []).append(e)
    if not steps:
        windows = {None: dev}
    windows = dict(sorted(windows.items(), key=lambda kv: -1 if kv[0] is None else kv[0]))
    # the step model (docs/metrics.md): each step's device slot runs from the end of the earlier
    # steps' device work to the end of its own (the first from the earliest device event); its idle is
    # the slot less the merged device events of every profiled step inside it, whichever launched them
    spans = {n: (min(e["start"] for e in w), max(e["end"] for e in w)) for n, w in windows.items()}
    windows = {n: w for n, w in windows.items() if spans[n][1] > spans[n][0]}
    stepped = [e for w in windows.values() for e in w]
    timeline = _union((e["start"], e["end"]) for e in stepped)
    idle, slots, end = [], [], min((spans[n][0] for n in windows), default=None)
    for n in windows:
        lo, end = end, max(end, spans[n][1])
        slots.append(end - lo)
        idle.append((end - lo) - sum(max(0, min(e, end) - max(s, lo)) for s, e in timeline))
    # the steady-state slots: all but the first, unless it is the only one; they tile [lo, hi)
    first_end = min(spans[n][0] for n in windows) + slots[0] if len(slots) > 1 else None
    if first_end is not None:
        idle, slots = idle[1:], slots[1:]
    lo = first_end if first_end is not None else min((spans[n][0] for n in windows), default=None)
    split = Counter()
    for g0, g1, nexts in _gaps(stepped):  # classified by the launch of the events that end each gap
        if first_end is not None and g0 < first_end:
            continue  # a gap in the first slot (a gap never crosses a slot's end)
        launched = [e["launch"] for e in nexts if e["launch"] is not None]
        split["other" if not launched else "host" if min(launched) > g0 else "dependency"] += g1 - g0
    span = max(e["end"] for e in dev) - min(e["start"] for e in dev)
    comm = _union((e["start"], e["end"]) for e in dev if e["comm"])
    compute = _union((e["start"], e["end"]) for e in dev if e["kernel"] and not e["comm"])
    # the window of the run's shares: from the first device event the profiled steps launched to the
    # last one's end, its parts measured once on the device timeline; the whole trace without steps
    if steps and stepped:
        def clip(es):  # the events' intervals inside the steady-state slots [lo, hi)
            return _union((max(e["start"], lo), min(e["end"], hi)) for e in es if e["end"] > lo)
        hi = max(e["end"] for e in stepped)
        step_span = hi - lo
        step_busy = _length(clip(stepped))
        step_exposed = _minus(clip([e for e in stepped if e["comm"]]),
                              clip([e for e in stepped if e["kernel"] and not e["comm"]]))
    else:
        step_span, step_busy, step_exposed = span, None, _minus(comm, compute)
    info = doc.get("distributedInfo") or {} if isinstance(doc, dict) else {}
    busy = _length(_union((e["start"], e["end"]) for e in dev))
    return {"span": span, "busy": busy, "step_span": step_span,
            "step_busy": busy if step_busy is None else step_busy, "step_exposed": step_exposed,
            "exposed": _minus(comm, compute), "steps": steps, "window_idle": idle, "split": split,
            "slots": slots, "worked": set(windows) - {None},
            "steady": list(windows)[1:] if len(windows) > 1 else list(windows),
            "window_spans": [max(e["end"] for e in w) - min(e["start"] for e in w) for w in windows.values()],
            "window_busy": [_length(_union((e["start"], e["end"]) for e in w)) for w in windows.values()],
            "collectives": sorted((e["start"], e["end"] - e["start"]) for e in dev if e["comm"]),
            "world": info.get("world_size"), "rank": info.get("rank"), "has_comm": bool(comm)}


def _kernel_traces(run: str) -> list:
    files = sorted(p for p in (SHARED_TRACES / run).iterdir() if ".json" in p.name)
    return files


def _is_gpu(files) -> bool:
    for path in files:
        with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as f:
            if b'"kernel"' in f.read():
                return True
    return False


# --- every real GPU run, no run.json ------------------------------------------------------


@pytest.fixture(scope="module")
def single(shared_db):
    """run name -> (the database, that run's sentences by topic, the lines `scaletrace explain` printed
    under its name).  The database is shared_db: every shared run ingested once for the suite, each
    run alone in its folder with no run.json; `explain` is run once on it, for every run."""
    # the sentences are those of the explain() the command computed (most of its cost): the test
    # compares them with what the command printed
    computed = []

    def recording(*args, **kwargs):
        computed.append(explain(*args, **kwargs))
        return computed[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(explain_module, "explain", recording)
        result = CliRunner().invoke(main, ["explain", "--db", str(shared_db)])
    assert result.exit_code == 0, result.output
    (computed,) = computed
    printed: dict = {}  # run -> the lines under its name, up to the next run's
    for line in result.output.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            under = printed.setdefault(line[:-1], [])
        elif line:
            under.append(line)

    def get(run: str):
        rows = computed.runs.filter(pl.col("run_id") == run)
        return shared_db, dict(zip(rows["about"], rows["sentence"])), printed.get(run)
    return get


def _whole(text: str) -> None:
    """A sentence states values only: no NaN, None, empty clause or doubled word."""
    assert not re.search(r"\bnan\b|\bNone\b|\bnull\b|\(\s*\)|,\s*[,.;]|;\s*[;.]|\s{2,}", text), text
    assert text.endswith(".") and (text[0].isupper() or text[0].isdigit()), text


@pytest.mark.parametrize("run", shared_runs())
def test_explain_speaks_of_every_real_run_and_each_sentence_is_true(run, single):
    files = _kernel_traces(run)
    if not _is_gpu(files):
        pytest.skip(f"{run}: a CPU-only trace (no GPU kernels): not a GPU run")
    ranks = [read_rank(p) for p in files]
    db, said, printed = single(run)
    assert printed is not None and [ln.strip() for ln in printed] == list(said.values())
    for text in said.values():
        _whole(text)

    # step: ranks, profiled steps, step time, the span's idle and exposed communication shares
    step = said["step"]
    n_steps = len({n for r in ranks for n in r["steps"]})
    assert (f"{n_steps} profiled step" in step) if n_steps else "no profiled step" in step
    if n_steps:
        # the steps that launched device work (all of them where none did); the device's period:
        # Σ steady-state slot ÷ their count over ranks; where it is over 1.1 × the steady steps' CPU
        # time (median of the slowest rank's) and over the host's step, it is the step time
        worked = {n for r in ranks for n in r["worked"]} or {n for r in ranks for n in r["steps"]}
        slowest = [max(r["steps"][n][1] - r["steps"][n][0] for r in ranks if n in r["steps"])
                   for n in sorted(worked)]
        step_ns = median(slowest)
        slots = [x for r in ranks for x in r["slots"]]
        steady = sorted({n for r in ranks for n in r["steady"] if n is not None})
        if slots and steady:
            period = sum(slots) / len(slots)
            cpu_ns = median(max(r["steps"][n][1] - r["steps"][n][0] for r in ranks if n in r["steady"])
                            for n in steady)
            if period > 1.1 * cpu_ns and period > step_ns:
                step_ns = int(period)
        assert f"step time {duration(step_ns)} " in step
    idle_pct = 100 * sum(r["step_span"] - r["step_busy"] for r in ranks) / sum(r["step_span"] for r in ranks)
    exposed_pct = 100 * sum(r["step_exposed"] for r in ranks) / sum(r["step_span"] for r in ranks)
    assert (f"{share(idle_pct)} idle" in step) == (idle_pct > 0), (idle_pct, step)
    assert (f"{share(exposed_pct)} exposed communication" in step) == (exposed_pct > 0), (exposed_pct, step)

    # sliver: the device span per step (mean over ranks and steps) under SLIVER_PCT % of the step
    if n_steps:
        span_ns = mean(s for r in ranks for s in r["window_spans"])
        busy_ns = mean(b for r in ranks for b in r["window_busy"])
        assert ("sliver" in said) == (100 * span_ns / step_ns < SLIVER_PCT), (span_ns, step_ns)
        if "sliver" in said:
            assert f"busy {duration(busy_ns)}" in said["sliver"] and f"of a {duration(step_ns)} step" in said["sliver"]

    # idle: per profiled step (or the trace), mean over ranks and windows; split by the next event's launch
    idle = said["idle"]
    idle_ns = mean(i for r in ranks for i in r["window_idle"])
    if idle_ns == 0:
        assert "never idle" in idle
    else:
        assert f"sat idle {duration(idle_ns)} {'per profiled step' if n_steps else 'in its traced window'}" in idle
        split = sum((r["split"] for r in ranks), Counter())
        total = sum(split.values())
        words = {"host": "waiting for the host to launch work", "dependency": "waiting on a dependency",
                 "other": "with no launching call in the trace"}
        parts = sorted(((ns, words[k]) for k, ns in split.items() if ns > 0), reverse=True)
        for i, (ns, phrase) in enumerate(parts):
            assert f"{share(100 * ns / total)}{' of it' if i == 0 else ''} {phrase}" in idle, (split, idle)

    # exposed communication by process group: exposed_comm_by_group's rows recomputed (÷ the rank's span)
    comm = said["communication"]
    if not any(r["has_comm"] for r in ranks):
        assert comm == "No communication in its traces."
    else:
        spans = {r["rank"]: r["span_ns"] for r in query(db, "rank_breakdown", run_id=run).iter_rows(named=True)}
        assert sorted(spans.values()) == sorted(r["span"] for r in ranks)  # the spans read here
        per = {}
        for g in query(db, "exposed_comm_by_group", run_id=run).iter_rows(named=True):
            key = (g["pg_desc"] or g["pg_name"] or "unnamed group", g["collective"] or "?")
            per[key] = per.get(key, 0) + 100 * g["exposed_ns"] / sum(spans.values())  # Σ ÷ Σ over ranks
        exposed = sorted(((pct, key) for key, pct in per.items() if pct > 0), reverse=True)
        if not exposed:
            assert "ran entirely under compute" in comm
        else:
            assert comm.startswith(f"Exposed communication is {share(exposed_pct)} of the ")
            at = [comm.index(f" {share(pct)}", comm.index(f"{coll if coll != '?' else 'collectives of unknown type'} in "))
                  for pct, (group, coll) in exposed[:3]]
            assert at == sorted(at), comm  # largest first

    # the straggler: the k-th NCCL kernel of each rank is one collective; the latest to start arrived last
    if len(ranks) > 1:
        k_max = min(len(r["collectives"]) for r in ranks)
        last, waited, total = Counter(), 0, 0
        for k in range(k_max):
            inst = [r["collectives"][k] for r in ranks]
            latest = max(s for s, _ in inst)
            last.update(i for i, (s, _) in enumerate(inst) if s == latest)
            fastest = min(d for _, d in inst)
            waited += sum(d - fastest for _, d in inst)
            total += sum(d for _, d in inst)
        (top, count), = [(i, c) for i, c in last.items() if c == max(last.values())][:1]
        world = ranks[0]["world"] or len(ranks)
        who = (f"Rank {ranks[top]['rank']} is the straggler: it" if len(ranks) >= world / 8  # reports/basis.py
               else f"Only {len(ranks)} of the {world} ranks are traced, too few to name the job's straggler; "
                    f"of them, rank {ranks[top]['rank']}")
        assert said["straggler"].startswith(f"{who} arrived last at {count} of "
                                            f"the {k_max} collectives matched across the {len(ranks)} ranks")
        assert f"waiting for a slower peer is {share(100 * waited / total)} of their communication time " \
               f"({duration(waited)} of {duration(total)}" in said["straggler"]
    elif ranks[0]["world"] and ranks[0]["world"] > 1 and ranks[0]["has_comm"]:
        assert said["straggler"].startswith(f"Only 1 of the {ranks[0]['world']} ranks is traced")
    else:
        assert "straggler" not in said

    # compute efficiency: op_efficiency's rows with a peak, FLOPs-weighted
    ops = query(db, "op_efficiency", run_id=run).filter(pl.col("achieved_pct_of_peak").is_not_null())
    if ops.is_empty():
        assert "reach" not in said.get("compute", "")
    else:
        pct = (ops["flops"] * ops["achieved_pct_of_peak"]).sum() / ops["flops"].sum()
        assert f"reach {share(pct)} of the device's peak" in said["compute"]

    # kernel families: kernel_summary's rows summed per family, the largest named first
    try:
        kernels = query(db, "kernel_summary", run_id=run)
    except Exception:  # the query is another engineer's, landing; the sentence is skipped without it
        kernels = None
    if kernels is not None and "family" in kernels.columns:
        fams = kernels.group_by("family").agg(pl.col("total_ns").cast(pl.Float64).sum()).sort("total_ns",
                                                                                             descending=True)
        top = fams.row(0, named=True)
        assert said["kernels"].split(": ", 1)[1].startswith(f"{top['family']} ")
        assert f"({duration(top['total_ns'])})" in said["kernels"]


def test_dlrm_straggler_is_rank_7(shared_traces, single):
    """param-dlrm-8rank: the trace's NCCL kernels, by hand: rank 7 starts last in 5 of the 8."""
    ranks = [read_rank(p) for p in _kernel_traces("param-dlrm-8rank")]
    assert [r["rank"] for r in ranks] == list(range(8))
    last = Counter(max(range(8), key=lambda i: ranks[i]["collectives"][k][0]) for k in range(8))
    assert last.most_common(1) == [(7, 5)]
    _, said, _ = single("param-dlrm-8rank")
    assert said["straggler"].startswith("Rank 7 is the straggler: it arrived last at 5 of the 8 collectives")


# --- degenerate inputs keep sentences whole ------------------------------------------------------

BAD = re.compile(r"\bnan\b|\bNone\b|\bnull\b|\b0\.0 points\b|from (\S+) to \1\b|\(\s*\)|,\s*[,.;]|\s{2,}|\binf\b")


def _degenerate_runs(root):
    write_run(root, SynthRun("one-rank", ranks=1, steps=2))
    write_run(root, SynthRun("hidden", ranks=2, steps=2, overlap_us=100, transfer_us=100))  # comm all under compute
    write_run(root, SynthRun("no-comm-peer", ranks=2, steps=1, tokens_per_step=None, num_params=None))
    # no ProfilerStep: two kernels, one launched late
    write_trace(root / "no-steps" / "trace.json", [
        cpu("cudaLaunchKernel", 0, 1, cat="cuda_runtime", correlation=1), kernel("gemm_kernel", 5, 10, corr=1),
        cpu("cudaLaunchKernel", 30, 1, cat="cuda_runtime", correlation=2), kernel("gemm_kernel", 40, 10, corr=2)])
    # a step with no device event in it
    write_trace(root / "empty-step" / "trace.json", [cpu("ProfilerStep#1", 0, 100, cat="user_annotation"),
                                                    kernel("gemm_kernel", 500, 10)])


def test_degenerate_runs_keep_sentences_whole(tmp_path):
    _degenerate_runs(tmp_path)
    db = tmp_path / "t.duckdb"
    assert not ingest([tmp_path], db=db, workers=1).errors
    result = CliRunner().invoke(main, ["explain", "--db", str(db)])
    assert result.exit_code == 0, result.output
    with connect(db) as database:
        runs = explain(database).runs
    assert set(runs["run_id"]) == {"one-rank", "hidden", "no-comm-peer", "no-steps", "empty-step"}
    for text in runs["sentence"]:
        assert not BAD.search(text), text
        _whole(text)
    said = {(r["run_id"], r["about"]): r["sentence"] for r in runs.iter_rows(named=True)}
    assert said["hidden", "communication"].endswith("ran entirely under compute: no exposed communication.")
    assert ("one-rank", "straggler") not in said  # one GPU: no peer to wait for
    assert said["no-steps", "step"].startswith("1 rank traced, no profiled step (no ProfilerStep annotation)")
    # gap [15, 40) µs, next kernel launched at 30 µs, after the gap began: all of it host wait
    assert said["no-steps", "idle"] == ("The GPU sat idle 25 µs in its traced window (mean over ranks): 100 % of "
                                        "it waiting for the host to launch work (CPU-bound).")
    assert said["hidden", "straggler"].startswith("No straggler: the 2 ranks started each of the 2 matched")


# A table of degenerate values for each builder: no clause may print a missing or zero value as data.
EMPTY_IDLE = pl.DataFrame(schema={"run_id": pl.String, "rank": pl.Int32, "step": pl.Int64, "idle_ns": pl.Int64,
                                  "host_wait_ns": pl.Int64, "dependency_wait_ns": pl.Int64, "other_idle_ns": pl.Int64})
STEP_ROWS = [
    {"ranks_traced": 1, "world_size": None, "num_steps": None, "step_time_ns": None, "device_name": None,
     **{f"{p}_pct": None for p in ("compute", "exposed_comm", "exposed_memory", "other", "idle")}},
    {"ranks_traced": 1, "world_size": 1, "num_steps": 0, "step_time_ns": None, "device_name": "",
     "compute_pct": 100.0, "exposed_comm_pct": 0.0, "exposed_memory_pct": 0.0, "other_pct": 0.0, "idle_pct": 0.0},
    {"ranks_traced": 2, "world_size": 2, "num_steps": 1, "step_time_ns": 0, "device_name": "X",
     "compute_pct": float("nan"), "exposed_comm_pct": 99.96, "exposed_memory_pct": 0.004, "other_pct": 0.0,
     "idle_pct": 0.036},
]


@pytest.mark.parametrize("row", STEP_ROWS)
def test_step_sentence_of_degenerate_rows(row):
    text = step_sentence(row)
    assert not BAD.search(text) and "100 %" not in text.replace("100 % compute", ""), text
    _whole(text)


@pytest.mark.parametrize("rows", [
    [],  # no window
    [{"rank": 0, "step": None, "idle_ns": 0, "host_wait_ns": 0, "dependency_wait_ns": 0, "other_idle_ns": 0}],
    [{"rank": 0, "step": 1, "idle_ns": 10, "host_wait_ns": 0, "dependency_wait_ns": 0, "other_idle_ns": 10}],
    [{"rank": r, "step": 1, "idle_ns": 3, "host_wait_ns": 1, "dependency_wait_ns": 2, "other_idle_ns": 0}
     for r in range(3)],
])
@pytest.mark.parametrize("cpu_only", [None, False, True])
def test_idle_sentence_of_degenerate_rows(rows, cpu_only):
    df = pl.concat([EMPTY_IDLE, pl.DataFrame(rows, schema=EMPTY_IDLE.schema)]) if rows else EMPTY_IDLE
    text = idle_sentence(df, cpu_only, span_idle_pct=None)
    if not rows:
        assert text is None
        return
    assert not BAD.search(text), text
    _whole(text)
    if sum(r["idle_ns"] for r in rows) == 0:
        assert "never idle" in text and "%" not in text


GROUP_SCHEMA = {"process_group": pl.String, "collective": pl.String, "comm_per_rank_ns": pl.Float64,
                "exposed_per_rank_ns": pl.Float64, "group_exposed_comm_pct": pl.Float64}


@pytest.mark.parametrize("summary", [{"exposed_comm_pct": None, "num_steps": None},
                                     {"exposed_comm_pct": 0.0, "num_steps": 2}])
@pytest.mark.parametrize("groups", [
    [],
    [{"process_group": "unnamed group", "collective": None, "comm_per_rank_ns": 0.0, "exposed_per_rank_ns": 0.0,
      "group_exposed_comm_pct": 0.0}],
    [{"process_group": "dp", "collective": "?", "comm_per_rank_ns": 5.0, "exposed_per_rank_ns": 5.0,
      "group_exposed_comm_pct": 0.001}] * 5,
])
def test_comm_sentence_of_degenerate_rows(summary, groups):
    text = comm_sentence(summary, pl.DataFrame(groups, schema=GROUP_SCHEMA))
    assert not BAD.search(text), text
    _whole(text)
    if groups and not groups[0]["exposed_per_rank_ns"]:
        assert "no exposed communication" in text


WAIT_SCHEMA = {"rank": pl.Int32, "num_collectives": pl.Int64, "comm_ns": pl.Int64, "wait_ns": pl.Int64,
               "straggler_count": pl.Int64}


@pytest.mark.parametrize("summary", [{"world_size": None, "ranks_traced": 1}, {"world_size": 8, "ranks_traced": 1},
                                     {"world_size": 2, "ranks_traced": 2}])
@pytest.mark.parametrize("rows", [
    [],
    [{"rank": 0, "num_collectives": 1, "comm_ns": 0, "wait_ns": 0, "straggler_count": 0}],
    [{"rank": r, "num_collectives": 1, "comm_ns": 10, "wait_ns": 0, "straggler_count": 0} for r in range(2)],
    [{"rank": r, "num_collectives": 4, "comm_ns": 0, "wait_ns": 0, "straggler_count": 2} for r in range(2)],
])
def test_straggler_sentence_of_degenerate_rows(summary, rows):
    text = straggler_sentence(summary, pl.DataFrame(rows, schema=WAIT_SCHEMA))
    if text is None:
        return
    assert not BAD.search(text), text
    _whole(text)
    assert "ranks 0 and 1 are the stragglers" in text.lower() or "straggler" in text.lower()


def test_compute_and_kernel_sentences_of_empty_or_zero_rows():
    eff = pl.DataFrame(schema={"series": pl.String, "pct_of_peak": pl.Float64, "achieved_tflops": pl.Float64})
    ops = pl.DataFrame(schema={"family": pl.String, "dtype": pl.String, "flops": pl.Float64, "gpu_ns": pl.Int64})
    assert compute_sentence(eff, ops) is None
    no_peak = pl.DataFrame([{"family": "gemm", "dtype": None, "flops": 2e12, "gpu_ns": 1_000_000}], schema=ops.schema)
    # 2e12 FLOP in 1 ms = 2000 TFLOP/s; no dtype: none named
    assert compute_sentence(eff, no_peak) == ("Its GEMM ops run at 2,000 TFLOP/s; no peak FLOP/s is known for "
                                              "that device and dtype, so no % of peak.")
    kernels = pl.DataFrame(schema={"run_id": pl.String, "family": pl.String, "total_ns": pl.Int64,
                                   "time_pct_of_kernel_time": pl.Float64})
    assert kernel_sentence(kernels) is None
    zero = pl.DataFrame([{"run_id": "r", "family": "GEMM", "total_ns": 0, "time_pct_of_kernel_time": None}],
                        schema=kernels.schema)
    assert kernel_sentence(zero) is None
    unknown = pl.DataFrame([{"run_id": "r", "family": "GEMM", "total_ns": 1500, "time_pct_of_kernel_time": None}],
                           schema=kernels.schema)
    assert kernel_sentence(unknown) == "Kernel time by family (summed over ranks): GEMM 1.5 µs."


def test_kernel_sentence_is_skipped_while_kernel_summary_is_absent(tmp_path, monkeypatch):
    from scaletrace.pipeline.store.db import Database
    from scaletrace.queries import QueryError

    write_run(tmp_path, SynthRun("k", ranks=2, steps=1))
    db = tmp_path / "t.duckdb"
    assert not ingest([tmp_path], db=db, workers=1).errors
    real = Database.query

    def without(self, name, **params):
        if name == "kernel_summary":
            raise QueryError("unknown query 'kernel_summary'")
        return real(self, name, **params)

    monkeypatch.setattr(Database, "query", without)
    result = CliRunner().invoke(main, ["explain", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert "k:" in result.output and "Kernel time by family" not in result.output


def test_explain_one_run_and_errors(tmp_path):
    write_run(tmp_path, SynthRun("a", ranks=2, steps=1))
    write_run(tmp_path, SynthRun("b", ranks=1, steps=1))
    db = tmp_path / "t.duckdb"
    assert not ingest([tmp_path], db=db, workers=1).errors
    for args in (["a"], ["--run", "a"]):
        result = CliRunner().invoke(main, ["explain", *args, "--db", str(db)])
        assert result.exit_code == 0, result.output
        assert result.output.startswith("a:\n") and "b:" not in result.output
    both = CliRunner().invoke(main, ["explain", "a", "--run", "b", "--db", str(db)])
    assert both.exit_code == 2
    unknown = CliRunner().invoke(main, ["explain", "nope", "--db", str(db)])
    assert unknown.exit_code == 1 and "no run 'nope'" in unknown.output and unknown.output.count("\n") == 1
    csv = CliRunner().invoke(main, ["explain", "--db", str(db), "--format", "csv"])
    assert csv.exit_code == 0 and csv.output.startswith("run_id,about,sentence\n")  # no sweep: the sentences
    empty = tmp_path / "empty"
    empty.mkdir()
    ingest([empty], db=tmp_path / "e.duckdb", workers=1)
    none = CliRunner().invoke(main, ["explain", "--db", str(tmp_path / "e.duckdb")])
    assert none.exit_code == 1 and "nothing to explain" in none.output


# --- the sliver rule -----------------------------------------------------------------------------

def _sliver_runs(root):
    """sliver: a 1 s ProfilerStep whose one kernel runs 2 µs (span 0.0002 % of the step);
    busy-idle: a 1 ms step whose kernels, 10 µs in all, sit at both ends (span 98.5 %, busy 1 %):
    mostly idle, truly, not a sliver."""
    write_trace(root / "sliver" / "trace.json", [
        cpu("ProfilerStep#1", 0, 1_000_000, cat="user_annotation"),
        cpu("cudaLaunchKernel", 10, 1, cat="cuda_runtime", correlation=1), kernel("gemm_kernel", 20, 2, corr=1)])
    write_trace(root / "busy-idle" / "trace.json", [
        cpu("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        cpu("cudaLaunchKernel", 2, 1, cat="cuda_runtime", correlation=1), kernel("gemm_kernel", 10, 5, corr=1),
        cpu("cudaLaunchKernel", 980, 1, cat="cuda_runtime", correlation=2), kernel("gemm_kernel", 990, 5, corr=2)])


@pytest.fixture(scope="module")
def sliver_db(tmp_path_factory):
    root = tmp_path_factory.mktemp("sliver")
    _sliver_runs(root)
    db = root / "t.duckdb"
    assert not ingest([root], db=db, workers=1).errors
    return db


def test_device_share_query_by_hand(sliver_db):
    rows = {r["run_id"]: r for r in query(sliver_db, "run_device_share").iter_rows(named=True)}
    # sliver: span = busy = 2 µs of a 1 s step; busy-idle: span 10 → 995 µs = 985 µs, busy 10 µs, of 1000 µs
    assert (rows["sliver"]["device_busy_ns"], rows["sliver"]["device_span_ns"], rows["sliver"]["step_time_ns"]) == (
        2_000, 2_000, 1_000_000_000)
    assert rows["sliver"]["device_span_pct_of_step_time"] == pytest.approx(100 * 2_000 / 1e9)
    assert rows["busy-idle"]["device_span_pct_of_step_time"] == pytest.approx(100 * 985 / 1000)
    assert rows["busy-idle"]["device_busy_pct_of_step_time"] == pytest.approx(100 * 10 / 1000)


def test_sliver_is_said_in_explain_the_table_and_the_step_charts(sliver_db, tmp_path):
    words = "the GPU was busy 2 µs of a 1 s step: the breakdown describes that sliver"
    result = CliRunner().invoke(main, ["explain", "--db", str(sliver_db)])
    assert result.exit_code == 0, result.output
    assert f"  {words[0].upper()}{words[1:]}, not the step." in result.output.splitlines()
    assert "busy-idle:" in result.output and result.output.count("describes that sliver") == 1  # idle: no sliver
    report = build_report(sliver_db, tmp_path / "r.html")
    html = report.path.read_text()
    table = html.split("<h2>Runs</h2>")[1].split("</table>")[0]
    assert f'<td class="sliver" colspan="5">{words}</td>' in table
    specs = json.loads(re.search(r'<script type="application/json" id="specs">(.*?)</script>', html, re.S).group(1))
    for key in ("step_time", "breakdown"):
        rows = spec_values(specs[key])
        assert not [v for v in rows if v.get("run_id") == "sliver" and "part" in v], key  # no bars of the sliver
        assert [v for v in rows if v.get("run_id") == "sliver" and v.get("sliver_note") == words], key
        assert [v for v in rows if v.get("run_id") == "busy-idle" and v.get("part") == "idle"], key
    # the step-time axis is the drawn runs' (1 ms step), not the sliver's 1 s
    scales = [enc["x"]["scale"]["domain"] for enc in _encodings(specs["step_time"]) if "scale" in enc.get("x", {})]
    assert scales and all(d[1] < 2 for d in scales)




def _encodings(spec) -> list[dict]:
    out = []
    if isinstance(spec, dict):
        if isinstance(spec.get("encoding"), dict):
            out.append(spec["encoding"])
        for value in spec.values():
            out += _encodings(value)
    elif isinstance(spec, list):
        for item in spec:
            out += _encodings(item)
    return out


# --- projection: one line per report ----------------------------------------------------------------

def test_not_identifiable_is_one_line_per_report(tmp_path):
    for i in range(3):
        write_run(tmp_path, SynthRun(f"alone-{i}", ranks=1 + i, steps=2, workload=None))
    for n in (1, 2):
        write_run(tmp_path, SynthRun(f"two-{n}", ranks=n, steps=2, workload="two"))
    db = tmp_path / "t.duckdb"
    assert not ingest([tmp_path], db=db, workers=1).errors
    result = build_report(db, tmp_path / "r.html")
    said = [f for f in result.findings if "project" in f.lower()]
    assert said == ["Projection: no sweep could be projected: 3 runs without a workload in run.json, each a sweep "
                    "of one GPU count (alone-0, alone-1, alone-2); two (2 measured GPU counts: 1, 2); the model "
                    "needs at least 3 measured GPU counts per sweep."]


@pytest.mark.parametrize("skipped, projected, expected", [
    ([], ["s"], None),
    ([Skipped("r (no workload)", (8,), "sizes")], [],
     "Projection: no sweep could be projected: 1 run without a workload in run.json, each a sweep of one GPU "
     "count (r); the model needs at least 3 measured GPU counts per sweep."),
    ([Skipped(f"r{i} (no workload)", (1,), "sizes") for i in range(6)] + [Skipped("w", (), "sizes"),
                                                                          Skipped("t", (1, 2, 4), "tokens")],
     ["s", "u"],
     "Projection: s and u are projected; not projected: 6 runs without a workload in run.json, each a sweep of "
     "one GPU count (r0, r1, r2, r3 and 2 more); w (0 measured GPU counts, none with steps); t without "
     "tokens_per_step (or global_batch_size and seq_len) in run.json; the model needs at least 3 measured GPU "
     "counts per sweep."),
    (["projection not identifiable: no sweep"], [], "Projection: no sweep could be projected: projection not "
                                                    "identifiable: no sweep."),
])
def test_not_projected_line(skipped, projected, expected):
    assert not_projected_line(skipped, projected) == expected


def test_runs_are_described_in_run_order_not_as_text(tmp_path):
    # run ids that sort wrongly as text (w-16 < w-2 < w-8): the sentences follow the GPU count
    for n in (16, 2, 8):
        write_run(tmp_path, SynthRun(f"w-{n}", ranks=n, steps=1, workload="w"))
    db = tmp_path / "o.duckdb"
    assert not ingest([tmp_path], db=db, workers=1).errors
    with connect(db) as database:
        order = describe_runs(database)["run_id"].unique(maintain_order=True).to_list()
    assert order == ["w-2", "w-8", "w-16"]
