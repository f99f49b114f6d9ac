"""Shared fixtures: paths, a database of the project's micro traces, trace writers."""

from __future__ import annotations

import atexit
import fcntl
import gzip
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from scaletrace.pipeline import connect, ingest

ROOT = Path(__file__).resolve().parent.parent
# Reports in the suite skip the <noscript> SVG fallbacks (0.4 s a chart); the tests of them turn them on
# with the `static_svgs` fixture.
os.environ.setdefault("SCALETRACE_STATIC_SVGS", "0")
# New databases are copies of a template, and reports inline a JavaScript bundle, kept in a cache
# directory (pipeline/common/cachefiles.py): the suite's is its own, so that it never writes to the
# user's cache nor reads what was left there.  Under pytest-xdist the workers share the one the
# controller made (and removes), so that each is built once per run.
if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("SCALETRACE_SUITE_CACHE_DIR"):
    os.environ["SCALETRACE_CACHE_DIR"] = os.environ["SCALETRACE_SUITE_CACHE_DIR"]
else:
    _CACHE = tempfile.mkdtemp(prefix="scaletrace-test-cache-")
    os.environ["SCALETRACE_CACHE_DIR"] = os.environ["SCALETRACE_SUITE_CACHE_DIR"] = _CACHE
    atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)


# Under pytest-xdist (`make test` runs `pytest -n 2 --dist loadgroup`) each worker builds its own session and
# module fixtures. These modules keep all their tests on one worker: test_cluster shares one Ray
# cluster (and counts the raylets around a command that starts its own), test_collectors its collector jobs
# and their warm launcher, test_reports and test_report_numbers synthetic sweeps and the reports built from them once,
# test_cross_check the reports of its six databases, each built once for the tests that read it,
# test_packaging one wheel (built in the source tree's build/: two workers building at once collide
# there, "File exists").  Every other test is scheduled on its own.
ONE_WORKER_MODULES = ("test_cluster", "test_collectors", "test_cross_check", "test_packaging", "test_report_numbers",
                      "test_reports")
# These modules keep the tests of one parameter (one run) together: test_hta_conformance loads a run's
# traces into HTA once for its two tests.
ONE_WORKER_PER_PARAMETER = ("test_hta_conformance",)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadgroup, by module name: xdist's own loadgroup renames the test ids (`id@group`), which
    pytest 9 no longer lets it do, so its groups are silently lost there. A scope per test, or per
    module for ONE_WORKER_MODULES; xdist hands out the largest scopes (these modules) first."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            if Path(module).stem in ONE_WORKER_MODULES:
                return module
            if Path(module).stem in ONE_WORKER_PER_PARAMETER and nodeid.endswith("]"):
                return module + "[" + nodeid.split("[", 1)[1]
            return nodeid

    return ModuleGroups(config, log)


@pytest.fixture
def static_svgs(monkeypatch):
    monkeypatch.setenv("SCALETRACE_STATIC_SVGS", "1")
FIXTURES = ROOT / "fixtures"
# The large real traces; SCALETRACE_SHARED_TRACES points elsewhere (the tests of the skip reason use it).
SHARED_TRACES = Path(os.environ.get("SCALETRACE_SHARED_TRACES") or ROOT.parent / "shared" / "traces")
NO_SHARED_TRACES = f"real traces not present at {SHARED_TRACES}"


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    if not SHARED_TRACES.is_dir():
        pytest.skip(NO_SHARED_TRACES)
    return SHARED_TRACES


def shared_runs() -> list:
    """The shared run folders as parametrize values; where the folder is absent, one
    skipped case that says so (an empty list would skip with "got empty parameter set")."""
    if not SHARED_TRACES.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason=NO_SHARED_TRACES))]
    return sorted(p.name for p in SHARED_TRACES.iterdir() if p.is_dir() and p.name != "LICENSES")


@pytest.fixture(scope="session")
def fixtures_db(tmp_path_factory) -> Path:
    """The hand-written micro traces (fixtures/micro-*)."""
    db = tmp_path_factory.mktemp("fixtures") / "fixtures.duckdb"
    report = ingest(sorted(FIXTURES.glob("micro-*")), db=db, workers=1)
    assert not report.errors, [o.line() for o in report.errors]
    return db


def built_once(tmp_path_factory, name: str, build) -> Path:
    """The folder ``build(folder)`` filled, built by one process for the whole run: under pytest-xdist
    each worker has its own session, so the first worker to get here builds it in the run's shared
    base temp folder while the others wait on a lock, then all read it.  Only for what the tests
    never write to (a DuckDB file opened read-only by many processes at once)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the folder above the workers' own
    folder = root / f"built-once-{name}"
    with open(root / f"built-once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / ".complete").exists():
            shutil.rmtree(folder, ignore_errors=True)  # a build that failed half-way
            folder.mkdir()
            build(folder)
            (folder / ".complete").touch()
    return folder


def _ingest_shared(folder: Path) -> None:
    report = ingest([SHARED_TRACES], db=folder / "shared.duckdb")
    assert not report.errors, [o.line() for o in report.errors]


@pytest.fixture(scope="module")
def small_db(tmp_path_factory) -> Path:
    """fixtures/micro-2rank ingested, once per module (its tests hold it open, time out on it and copy it)."""
    db = tmp_path_factory.mktemp("small") / "t.duckdb"
    report = ingest([FIXTURES / "micro-2rank"], db=db, workers=1)
    assert not report.errors, [o.line() for o in report.errors]
    return db


@pytest.fixture(scope="session")
def shared_db(tmp_path_factory, shared_traces) -> Path:
    """Every shared trace ingested, once for all workers: the tests only read it."""
    return built_once(tmp_path_factory, "shared", _ingest_shared) / "shared.duckdb"


def _ingest_demo(folder: Path) -> None:
    report = ingest([FIXTURES / "demo-sweep"], db=folder / "demo.duckdb", workers=2)
    assert not report.errors, [o.line() for o in report.errors]


@pytest.fixture(scope="session")
def demo_db(tmp_path_factory) -> Path:
    """The shipped demo sweep (fixtures/demo-sweep) ingested, once for all workers: the tests only read it."""
    return built_once(tmp_path_factory, "demo", _ingest_demo) / "demo.duckdb"


def holds_open(pid: int, path: Path, timeout_s: float = 60) -> None:
    """Wait until process ``pid`` has ``path`` open (DuckDB locks the file as it opens it; Linux's /proc)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        fds = Path(f"/proc/{pid}/fd")
        try:
            if any(os.path.realpath(fd) == str(path.resolve()) for fd in fds.iterdir()):
                return
        except OSError:  # an fd closed while listed
            pass
        time.sleep(0.05)
    raise AssertionError(f"process {pid} never opened {path}")


def copy_db(src: Path, dst: Path) -> Path:
    """A copy of a closed DuckDB file (its write-ahead log too, where one is left), for a test that
    writes to a database a session or module fixture built once: copying is milliseconds, an
    ingest seconds."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    wal = src.with_name(src.name + ".wal")
    if wal.exists():
        shutil.copyfile(wal, dst.with_name(dst.name + ".wal"))
    return dst


def query(db: Path, name: str, **params):
    with connect(db) as database:
        return database.query(name, **params)


def kernel(name, ts, dur, stream=7, corr=None, cat="kernel", **args):
    a = {"device": 0, "stream": stream, **args}
    if corr is not None:
        a["correlation"] = corr
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur, "args": a}


def cpu(name, ts, dur, cat="cpu_op", tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": tid, "ts": ts, "dur": dur, "args": args}


def write_trace(path: Path, events: list, rank: int | None = None, gz: bool = False, **top) -> Path:
    doc = {"schemaVersion": 1, "traceEvents": events, **top}
    if rank is not None:
        doc["distributedInfo"] = {"rank": rank, "world_size": 2, "backend": "nccl"}
    data = json.dumps(doc).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


# Independent references for the breakdown and cross-rank queries: plain Python over the
# ingested events, sharing no code with pipeline/read/intervals.py or the SQL they check.

BREAKDOWN_COLUMNS = ("span_ns", "busy_ns", "idle_ns", "compute_ns", "comm_ns", "memory_ns", "overlap_ns",
                     "exposed_comm_ns", "exposed_memory_ns", "other_ns")
SPAN_PARTS = ("compute_ns", "exposed_comm_ns", "exposed_memory_ns", "other_ns", "idle_ns")


def sweep_breakdown(events, window: tuple[int, int] | None = None) -> dict:
    """Every *_ns column of window_breakdown for one window of events (kind, start_ns, end_ns);
    ``window`` (start, end): the events clipped to it, and the span is the window (a step's device
    slot, docs/metrics.md "The step model": its time outside every event is idle).

    A sweep over the event boundaries: between two consecutive boundaries the set of
    kinds in progress is fixed, so each such segment counts, whole, toward one part of
    the span (DESIGN.md "Metric definitions"): compute if a compute event covers it,
    else exposed comm, else exposed memory, else other if any event covers it, else idle.
    """
    if window is not None:
        events = [(kind, max(start, window[0]), min(end, window[1])) for kind, start, end in events
                  if min(end, window[1]) > max(start, window[0])]
    bounds = sorted(((t, delta, kind) for kind, start, end in events for t, delta in ((start, 1), (end, -1))),
                    key=lambda bound: bound[0])
    active = dict.fromkeys({kind for kind, _, _ in events}, 0)
    sums = dict.fromkeys(BREAKDOWN_COLUMNS, 0)
    prev = bounds[0][0]
    for t, delta, kind in bounds:
        if t > prev:
            on = {k for k, n in active.items() if n}
            compute, comm, memory = "compute" in on, "comm" in on, "memory" in on
            for column, covers in (("busy_ns", on), ("compute_ns", compute), ("comm_ns", comm),
                                   ("memory_ns", memory), ("overlap_ns", compute and comm),
                                   ("exposed_comm_ns", comm and not compute),
                                   ("exposed_memory_ns", memory and not (compute or comm)),
                                   ("other_ns", on and not (compute or comm or memory)), ("idle_ns", not on)):
                sums[column] += (t - prev) if covers else 0
            prev = t
        active[kind] += delta
    sums["span_ns"] = max(end for _, _, end in events) - min(start for _, start, _ in events)
    if window is not None:
        sums["idle_ns"] += (window[1] - window[0]) - sums["span_ns"]
        sums["span_ns"] = window[1] - window[0]
    return sums


def step_slots(steps: dict) -> dict:
    """step -> (start, end) of each step's device slot (docs/metrics.md "The step model"), from
    step -> its events (kind, start, end): from the end of the earlier steps' device work to the end
    of its own (the first from the earliest event); steps whose events span no time have none."""
    own = {n: (min(s for _, s, _ in ev), max(e for _, _, e in ev)) for n, ev in sorted(steps.items())}
    own = {n: b for n, b in own.items() if b[1] > b[0]}
    slots, end = {}, min((b[0] for b in own.values()), default=None)
    for n, (_, last) in own.items():
        slots[n] = (end, max(end, last))
        end = slots[n][1]
    return slots


def differences(row: dict, expected: dict) -> dict:
    """column -> (got, expected) where they differ: the failure message of the comparisons below."""
    return {c: (row[c], value) for c, value in expected.items() if row[c] != value}


def assert_parts_sane(row: dict) -> None:
    """Invariants of every breakdown row: each part ≥ 0, overlap and exposed comm ≤ comm."""
    assert all(row[c] >= 0 for c in BREAKDOWN_COLUMNS), row
    assert row["overlap_ns"] <= min(row["comm_ns"], row["compute_ns"]), row
    assert row["exposed_comm_ns"] <= row["comm_ns"] and row["exposed_memory_ns"] <= row["memory_ns"], row


def assert_breakdown_matches_sweep(db: Path, run_id: str | None = None) -> int:
    """rank_breakdown and rank_step_breakdown, every *_ns column, against sweep_breakdown over
    the ingested device events (kind, ts, dur, launching step) of each trace; returns the number
    of windows checked."""
    with connect(db) as database:
        events = database.sql("SELECT run_id, rank, step, kind, ts_ns, ts_ns + dur_ns AS end_ns FROM device_events "
                              "WHERE $run_id IS NULL OR run_id = $run_id", {"run_id": run_id})
    windows: dict = {}
    stepped: dict = {}  # (run, rank) -> step -> its events
    for r in events.iter_rows(named=True):
        event = (r["kind"], r["ts_ns"], r["end_ns"])
        windows.setdefault((r["run_id"], r["rank"], None), []).append(event)
        if r["step"] is not None:
            stepped.setdefault((r["run_id"], r["rank"]), {}).setdefault(r["step"], []).append(event)
    # a step's window is its device slot over every profiled step's events (the step model)
    bounds = {}
    for (run, rank), steps in stepped.items():
        timeline = [e for ev in steps.values() for e in ev]
        for step, slot in step_slots(steps).items():
            windows[(run, rank, step)], bounds[(run, rank, step)] = timeline, slot
    got = {(r["run_id"], r["rank"], None): r for r in query(db, "rank_breakdown", run_id=run_id).iter_rows(named=True)
           if r["span_ns"] is not None}
    got.update({(r["run_id"], r["rank"], r["step"]): r
                for r in query(db, "rank_step_breakdown", run_id=run_id).iter_rows(named=True)})
    assert set(got) == set(windows)
    for key, window in windows.items():
        expected, row = sweep_breakdown(window, bounds.get(key)), got[key]
        assert {c: row[c] for c in BREAKDOWN_COLUMNS} == expected, (key, differences(row, expected))
        assert_parts_sane(row)
    return len(windows)


def union(intervals) -> list[tuple[int, int]]:
    """The sorted, disjoint union of [start, end) intervals."""
    merged: list[list[int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        elif end > start:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def uncovered(start: int, end: int, islands: list[tuple[int, int]]) -> int:
    """|[start, end) \\ U(islands)|."""
    return (end - start) - sum(max(0, min(end, e) - max(start, s)) for s, e in islands)


def rank_wait_reference(db: Path, run_id: str | None = None) -> dict:
    """rank_wait's columns per (run_id, rank), from the raw per-rank collectives (start,
    duration, process group, sequence number) and compute events, matched here (DESIGN.md
    "Cross-rank"): the k-th collective of a process group on each rank (by the trace's
    sequence number, else by start order on the rank) is one collective; transfer = the
    shortest of its durations, wait = this rank's duration − transfer, taken as the first
    part of the kernel; exposed = |event \\ U(compute)|, exposed wait = |[start, start +
    wait) \\ U(compute)|, exposed transfer = the rest of the exposed part."""
    with connect(db) as database:
        rows = database.sql("SELECT run_id, rank, trace_id, event_id, coalesce(pg_name, '?') AS pg, seq, ts_ns, dur_ns "
                            "FROM collectives WHERE $run_id IS NULL OR run_id = $run_id", {"run_id": run_id})
        compute = database.sql("SELECT trace_id, ts_ns, ts_ns + dur_ns AS end_ns FROM device_events "
                               "WHERE kind = 'compute' AND ($run_id IS NULL OR run_id = $run_id)", {"run_id": run_id})
    islands: dict = {}
    for r in compute.iter_rows(named=True):
        islands.setdefault(r["trace_id"], []).append((r["ts_ns"], r["end_ns"]))
    islands = {trace: union(spans) for trace, spans in islands.items()}
    events = sorted(rows.iter_rows(named=True), key=lambda r: (r["ts_ns"], r["event_id"]))
    order: dict = {}
    matched: dict = {}
    for r in events:
        nth = order[r["trace_id"], r["pg"]] = order.get((r["trace_id"], r["pg"]), -1) + 1
        matched.setdefault((r["run_id"], r["pg"], nth if r["seq"] is None else r["seq"]), []).append(r)
    out: dict = {}
    for instances in matched.values():
        transfer = min(r["dur_ns"] for r in instances)
        for r in instances:
            start, wait, own = r["ts_ns"], r["dur_ns"] - transfer, islands.get(r["trace_id"], [])
            exposed = uncovered(start, start + r["dur_ns"], own)
            exposed_wait = uncovered(start, start + wait, own)
            sums = out.setdefault((r["run_id"], r["rank"]), dict.fromkeys(
                ("num_collectives", "comm_ns", "transfer_ns", "wait_ns", "exposed_ns", "exposed_wait_ns",
                 "exposed_transfer_ns"), 0))
            for column, value in (("num_collectives", 1), ("comm_ns", r["dur_ns"]), ("transfer_ns", transfer),
                                  ("wait_ns", wait), ("exposed_ns", exposed), ("exposed_wait_ns", exposed_wait),
                                  ("exposed_transfer_ns", exposed - exposed_wait)):
                sums[column] += value
    return out


def assert_rank_wait_matches_reference(db: Path, run_id: str | None = None) -> None:
    """rank_wait against rank_wait_reference, with its bounds: every part ≥ 0, each exposed
    part ≤ the part it is exposed of."""
    expected = rank_wait_reference(db, run_id)
    got = {(r["run_id"], r["rank"]): r for r in query(db, "rank_wait", run_id=run_id).iter_rows(named=True)}
    assert set(got) == set(expected)
    for key, sums in expected.items():
        row = got[key]
        assert {c: row[c] for c in sums} == sums, (key, differences(row, sums))
        assert min(row[c] for c in sums) >= 0, row
        assert row["exposed_wait_ns"] <= row["wait_ns"] and row["exposed_transfer_ns"] <= row["transfer_ns"], row
        assert row["exposed_ns"] <= row["comm_ns"], row


# A run whose traces record shapes (pipeline/synth.py writes none): per rank and profiled step,
# one bf16 aten::mm (M×K @ K×N) whose GEMM kernel runs gemm_us, then a kernel launched only after
# the GEMM ended (host_gap_us of idle waiting for the host), then one launched at the step's start
# that waits dep_gap_us after it (idle waiting on a dependency).  Kernels start GEMM_AT_US into the step.
GEMM_AT_US, SMALL_US = 100, 10


def shaped_run(root: Path, run_id: str, ranks: int, mnk: tuple[int, int, int], gemm_us: int,
               host_gap_us: int, dep_gap_us: int, steps: int = 2, step_us: int = 1000,
               workload: str = "shaped", tokens_per_step: int = 8192) -> Path:
    m, k, n = mnk
    run = root / run_id
    for rank in range(ranks):
        events = []
        for s in range(steps):
            s0 = s * step_us
            c = 10 * s
            gemm_end = s0 + GEMM_AT_US + gemm_us
            late = gemm_end + host_gap_us  # the host launches it 1 µs before it starts
            events += [
                cpu(f"ProfilerStep#{s + 1}", s0, step_us, cat="user_annotation"),
                cpu("aten::mm", s0 + 10, 5, **{"Input Dims": [[m, k], [k, n]],
                                               "Input type": ["c10::BFloat16"] * 2, "Concrete Inputs": ["", ""]}),
                cpu("cudaLaunchKernel", s0 + 11, 1, cat="cuda_runtime", correlation=c + 1),
                kernel("sm90_xmma_gemm_bf16", s0 + GEMM_AT_US, gemm_us, corr=c + 1),
                cpu("cudaLaunchKernel", late - 1, 1, cat="cuda_runtime", correlation=c + 2),
                kernel("elementwise_kernel", late, SMALL_US, corr=c + 2),
                cpu("cudaLaunchKernel", s0 + 20, 1, cat="cuda_runtime", correlation=c + 3),
                kernel("elementwise_kernel", late + SMALL_US + dep_gap_us, SMALL_US, corr=c + 3),
            ]
        write_trace(run / f"rank{rank}.json", events, deviceProperties=[{"name": "NVIDIA H200"}],
                    distributedInfo={"rank": rank, "world_size": ranks, "backend": "nccl"})
    (run / "run.json").write_text(json.dumps({
        "run_id": run_id, "workload": workload, "scaling": "strong", "world_size": ranks,
        "parallel": {"dp": ranks, "tp": 1, "pp": 1, "cp": 1}, "tokens_per_step": tokens_per_step,
        "dtype": "bf16", "device": {"name": "NVIDIA H200"}}))
    return run


def spec_values(spec: dict) -> list[dict]:
    """Every inline data row anywhere in a Vega-Lite spec."""
    out = []
    if isinstance(spec, dict):
        if isinstance(spec.get("data"), dict) and "values" in spec["data"]:
            out += spec["data"]["values"]
        for key, value in spec.items():
            if key == "datasets":
                for rows in value.values():
                    out += rows
            elif key != "data":
                out += spec_values(value)
    elif isinstance(spec, list):
        for item in spec:
            out += spec_values(item)
    return out
