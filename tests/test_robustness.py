"""Crash safety (SIGKILL mid-ingest), concurrent ingests, and fuzzing the parser with mutated traces."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, SHARED_TRACES
from scaletrace.pipeline import ingest
from scaletrace.pipeline.read.classify import DEFAULT_RULES
from scaletrace.pipeline.execute.ingest import parse_file
from scaletrace.pipeline.synth import SynthRun, write_run

SCALETRACE = [sys.executable, "-m", "scaletrace.cli"]


def make_runs(root, count, ranks=4, steps=150, prefix="r"):
    for i in range(count):
        write_run(root, SynthRun(f"{prefix}{i:02d}", ranks=ranks, steps=steps, tp_comm_us=10, seed=i))
    return sorted(p for p in root.iterdir() if p.is_dir())


def consistent(db) -> tuple[int, int]:
    """(traces, device events); asserts every event belongs to a stored trace and every trace is whole."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        orphans = con.sql("SELECT count(*) FROM device_events WHERE trace_id NOT IN (SELECT trace_id FROM traces)")
        assert orphans.fetchall()[0][0] == 0
        # every synthetic rank file of these runs has 2 or 3 kernels per step: no trace is cut short
        partial = con.sql("""SELECT count(*) FROM traces t WHERE (SELECT count(*) FROM device_events e
                             WHERE e.trace_id = t.trace_id) <> 3 * 150""")
        assert partial.fetchall()[0][0] == 0
        return con.sql("SELECT (SELECT count(*) FROM traces), (SELECT count(*) FROM device_events)").fetchall()[0]
    finally:
        con.close()


def test_sigkill_midway_leaves_no_partial_file_and_rerun_completes(tmp_path):
    runs = make_runs(tmp_path / "traces", 16)
    db = tmp_path / "t.duckdb"
    wal = tmp_path / "t.duckdb.wal"
    proc = subprocess.Popen([*SCALETRACE, "ingest", *map(str, runs), "--db", str(db), "-q", "--workers", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (wal.exists() and wal.stat().st_size > 1_000_000):
        time.sleep(0.01)  # some files committed, most still to come
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    traces_before, _ = consistent(db)
    assert 0 < traces_before < 16 * 4, "the ingest should have been killed midway"
    report = ingest(runs, db=db)
    assert not report.errors
    assert consistent(db) == (16 * 4, 16 * 4 * 3 * 150)


def test_two_ingests_at_once_both_complete(tmp_path):
    first = make_runs(tmp_path / "a", 4, prefix="a")
    second = make_runs(tmp_path / "b", 4, prefix="b")
    db = tmp_path / "t.duckdb"
    procs = [subprocess.Popen([*SCALETRACE, "ingest", *map(str, runs), "--db", str(db)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for runs in (first, second)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert consistent(db) == (2 * 4 * 4, 2 * 4 * 4 * 3 * 150)  # both sets, whole


SEED_FILES = [FIXTURES / "micro-2rank" / "rank0.json", FIXTURES / "micro-cpu-gloo" / "rank0.json",
              FIXTURES / "micro-2021" / "worker_rank-1.pt.trace.json"]
if (SHARED_TRACES / "hta-triton").is_dir():
    SEED_FILES.append(SHARED_TRACES / "hta-triton" / "trace.json.gz")
SEEDS = [gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes() for p in SEED_FILES]

mutation = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0, 1)),
    st.tuples(st.just("flip"), st.floats(0, 1), st.integers(0, 255)),
    st.tuples(st.just("insert"), st.floats(0, 1), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("number"), st.floats(0, 1), st.sampled_from(
        [b"1e400", b"-1", b"NaN", b"99999999999999999999999", b'"x"', b"null", b"[]", b"{}", b"-0.0",
         # issue 11: values that escaped the checks before
         b'"NaN"', b'"sNaN"', b'"-Infinity"', b"1e999999", b"1e999990", b"9" * 5000, b"2000000000",
         # issue 21: values that ingested and then broke every query (overflow, division by zero),
         # and nesting that overflowed the compiled scanner's stack
         b"9223372036854775807", b"4611686018427387904", b"0", b"-9200000000000000", b"9200000000000000",
         b"[[4611686018427387904, 4611686018427387904], [4611686018427387904, 4611686018427387904]]",
         b"[" * 300 + b"]" * 300, b"[" * 200_000 + b"]" * 200_000, b'{"k":' * 50_000 + b"1" + b"}" * 50_000])),
)


def mutate(data: bytes, ops) -> bytes:
    for op in ops:
        at = int(op[1] * len(data))
        if op[0] == "truncate":
            data = data[:at]
        elif op[0] == "flip":
            data = data[:at] + bytes([op[2]]) + data[at + 1:]
        elif op[0] == "insert":
            data = data[:at] + op[2] + data[at:]
        else:  # replace the number that starts at or after `at`
            import re
            m = re.compile(rb"-?\d+(\.\d+)?").search(data, at)
            if m:
                data = data[:m.start()] + op[2] + data[m.end():]
    return data


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.sampled_from(range(len(SEEDS))), ops=st.lists(mutation, min_size=1, max_size=4),
       gz=st.booleans())
def test_fuzzed_traces_never_raise(seed, ops, gz, tmp_path):
    data = mutate(SEEDS[seed], ops)
    path = tmp_path / "rank0.json"
    path.write_bytes(gzip.compress(data) if gz else data)
    parsed = parse_file(str(path), None, DEFAULT_RULES, False)
    assert (parsed.extracted is None) != (parsed.error is None)
    assert parsed.error is None or (parsed.error and "\n" not in parsed.error)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(mutation, min_size=1, max_size=3))
def test_fuzzed_ingest_leaves_no_partial_rows(ops, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")
    run = tmp / "run"
    run.mkdir()
    (run / "rank0.json").write_bytes(mutate(SEEDS[0], ops))
    db = tmp / "t.duckdb"
    report = ingest([run], db=db, workers=1)
    con = duckdb.connect(str(db), read_only=True)
    stored = con.sql("SELECT count(*) FROM traces").fetchall()[0][0]
    events = con.sql("SELECT count(*) FROM device_events").fetchall()[0][0]
    con.close()
    if report.errors:
        assert stored == 0 and events == 0
    else:
        assert stored == 1


# --- issue 11: processes (a dying worker, a killed parent, Ctrl-C) ----------------------------------

def _start_ingest(runs, db, workers="2"):
    return subprocess.Popen([*SCALETRACE, "ingest", *map(str, runs), "--db", str(db), "-q", "--workers", workers],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _wait_for(predicate, seconds=60.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not predicate():
        time.sleep(0.01)
    return predicate()


def test_workers_die_with_their_parent(tmp_path):
    """Item 13: after SIGKILL of the ingest, its pool workers used to stay (orphans, ~150 MB each)."""
    from hostile import alive, children

    runs = make_runs(tmp_path / "traces", 16)
    proc = _start_ingest(runs, tmp_path / "t.duckdb")
    assert _wait_for(lambda: len(children(proc.pid)) >= 2), "the pool should have started"
    workers = children(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert _wait_for(lambda: not any(alive(pid) for pid in workers), 10), "workers outlived their parent"


def test_ctrl_c_is_one_line_and_exit_130(tmp_path):
    """Item 14: SIGINT to the process group (Ctrl-C) printed tracebacks (KeyboardInterrupt, Query
    interrupted, BrokenProcessPool) in 3 of 4 tries.  Four tries, from the start to midway."""
    import re

    from hostile import alive, children

    runs = make_runs(tmp_path / "traces", 12)
    for attempt, delay in enumerate((0.0, 0.05, 0.4, "midway")):
        db = tmp_path / f"t{attempt}.duckdb"
        wal = Path(f"{db}.wal")
        proc = _start_ingest(runs, db)
        assert _wait_for(lambda: db.exists() or wal.exists())
        if delay == "midway":  # some files committed, most still to come
            _wait_for(lambda: wal.exists() and wal.stat().st_size > 1_000_000)
        else:
            time.sleep(delay)
        workers = children(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # a hang: leave nothing behind
            raise
        assert proc.returncode == 130, (delay, proc.returncode, err)
        match = re.fullmatch(r"interrupted; (\d+) files? stored, re-run to finish\n", err)
        assert match, (delay, err)
        stored = _stored(db)  # (+1: Ctrl-C between a COMMIT and the count of that file)
        assert stored - int(match.group(1)) in (0, 1), (delay, err, stored)
        assert _wait_for(lambda: not any(alive(pid) for pid in workers), 10), "workers were left behind"
    assert stored > 0, "the last attempt should have been midway"
    report = ingest(runs, db=db)
    assert not report.errors and consistent(db) == (12 * 4, 12 * 4 * 3 * 150)


def _stored(db) -> int:
    """Traces stored in ``db`` (checked whole by consistent); 0 when the schema was never committed."""
    if db.exists():
        con = duckdb.connect(str(db), read_only=True)
        tables = con.sql("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'traces'").fetchall()[0][0]
        con.close()
        if tables:
            return consistent(db)[0]
    return 0


def _die_on_rank_13(doc, *args, **kwargs):
    """extract, except that the trace of rank 13 kills its process (as the OOM killer would)."""
    from scaletrace.pipeline.read.extract import extract

    if doc.distributedInfo and doc.distributedInfo.rank == 13:
        os.kill(os.getpid(), signal.SIGKILL)
    return extract(doc, *args, **kwargs)


def test_a_worker_that_dies_costs_its_file_only(tmp_path, monkeypatch):
    """Item 5: a worker killed by the OOM killer or SIGKILL aborted the ingest (BrokenProcessPool)."""
    import importlib

    from click.testing import CliRunner
    from scaletrace.cli import main

    ingest_module = importlib.import_module("scaletrace.pipeline.execute.ingest")
    monkeypatch.setattr(ingest_module, "extract", _die_on_rank_13)  # the forked workers inherit it
    runs = make_runs(tmp_path / "traces", 3, ranks=4, steps=150)
    doomed = runs[1] / "rank13.json"
    doomed.write_text((runs[1] / "rank3.json").read_text().replace('"rank":3,', '"rank":13,'))
    db = tmp_path / "t.duckdb"
    result = CliRunner().invoke(main, ["ingest", *map(str, runs), "--db", str(db), "-q", "--workers", "2"])
    assert result.exit_code == 1 and "Traceback" not in result.output, (result.output, result.exception)
    assert result.stderr.strip().splitlines() == [
        f"{doomed}: the parse process died (killed by SIGKILL: out of memory?); the other files were parsed again"]
    assert consistent(db) == (3 * 4, 3 * 4 * 3 * 150)




def test_a_trace_bigger_than_memory_is_one_line(tmp_path, monkeypatch):
    """Item 5: a trace bigger than RAM gave a bare MemoryError while read (only OSError was caught)."""
    import importlib

    from click.testing import CliRunner
    from scaletrace.cli import main

    ingest_module = importlib.import_module("scaletrace.pipeline.execute.ingest")
    read_regular = ingest_module.limits.read_regular

    def memory_error_for_huge(path, *args, **kwargs):
        if "huge" in str(path):
            raise MemoryError
        return read_regular(path, *args, **kwargs)

    monkeypatch.setattr(ingest_module.limits, "read_regular", memory_error_for_huge)
    runs = make_runs(tmp_path / "traces", 1, ranks=2, steps=150)
    huge = runs[0] / "rank9.huge.json"
    huge.write_text((runs[0] / "rank1.json").read_text().replace('"rank":1,', '"rank":9,'))
    result = CliRunner().invoke(main, ["ingest", str(runs[0]), "--db", str(tmp_path / "t.duckdb"), "-q"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.strip().splitlines() == [f"{huge}: cannot read file (MemoryError)"]
    assert consistent(tmp_path / "t.duckdb")[0] == 2
