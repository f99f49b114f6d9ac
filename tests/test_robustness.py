"""Crash safety (SIGKILL mid-ingest), concurrent ingests, and fuzzing the parser with mutated traces."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import time

import duckdb
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, SHARED_TRACES
from scaletrace.pipeline import ingest
from scaletrace.pipeline.classify import DEFAULT_RULES
from scaletrace.pipeline.ingest import parse_file
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
        [b"1e400", b"-1", b"NaN", b"99999999999999999999999", b'"x"', b"null", b"[]", b"{}", b"-0.0"])),
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
