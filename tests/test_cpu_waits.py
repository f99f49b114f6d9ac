"""CPU (gloo) traces: time the training thread spends waiting for a collective is sync, not compute.

Checked against the raw traces of the tensor-parallel demo runs (recorded by the project's
collector, fixtures/demo-sweep): the wait intervals are read straight from the JSON here, with
the test's own interval arithmetic, and compared with what ingest stored.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

from conftest import FIXTURES, query
from scaletrace.pipeline import connect, ingest

RUNS = ["tp-4", "fsdp_tp-4"]  # the runs whose training thread calls _c10d_functional::wait_tensor


def _union(intervals):
    merged = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return merged


def _length(intervals) -> int:
    return sum(e - s for s, e in _union(intervals))


def _intersection(a, b) -> int:
    a, b = _union(a), _union(b)
    total = 0
    for s, e in a:
        for t, u in b:
            total += max(0, min(e, u) - max(s, t))
    return total


def _raw(path: Path):
    """(training thread, wait intervals, gloo intervals) in ns, from the trace's own events."""
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)  # µs with ns digits, exact
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]

    def to_ns(e):
        ts = int(e["ts"] * 1000)
        return ts, ts + int(e["dur"] * 1000)

    thread = Counter(e["tid"] for e in events if e.get("cat") == "cpu_op").most_common(1)[0][0]
    waits = [to_ns(e) for e in events if e["tid"] == thread and e["name"] == "_c10d_functional::wait_tensor"]
    gloo = [to_ns(e) for e in events if e["name"].startswith("gloo:")]
    return thread, waits, gloo


@pytest.fixture(scope="module")
def tp_db(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("tp") / "tp.duckdb"
    report = ingest([FIXTURES / "demo-sweep" / run for run in RUNS], db=db, workers=1)
    assert not report.errors, [o.line() for o in report.errors]
    return db


@pytest.mark.parametrize("run", RUNS)
def test_waits_are_sync_and_expose_the_collective(tp_db, run):
    breakdown = {r["rank"]: r for r in query(tp_db, "rank_breakdown", run_id=run).iter_rows(named=True)}
    traces = sorted((FIXTURES / "demo-sweep" / run).glob("rank*.pt.trace.json.gz"))
    assert len(traces) == len(breakdown) == 4
    with connect(tp_db) as db:
        for path in traces:
            rank = int(path.name[4:path.name.index(".")])
            thread, waits, gloo = _raw(path)
            assert _length(waits) > 0, "the TP run's training thread waits for its collectives"
            lane = f"thread {thread}"
            rows = db.sql(
                "SELECT d.kind, d.ts_ns, d.ts_ns + d.dur_ns AS end_ns FROM device_events d "
                "JOIN traces t USING (trace_id) WHERE t.run_id = $run AND t.rank = $rank AND d.lane = $lane",
                {"run": run, "rank": rank, "lane": lane})
            stored = {k: list(zip(g["ts_ns"], g["end_ns"])) for (k,), g in rows.group_by("kind")}
            # every wait interval of the raw trace is sync, and nothing stored as sync is anything else
            assert _length(stored.get("sync", [])) == _length(waits)
            # no compute on the training thread while it waits
            assert _intersection(stored.get("compute", []), waits) == 0
            # the collective running while the thread waits is exposed (it was hidden before: the
            # wait counted as compute); compute runs on the training thread only
            r = breakdown[rank]
            assert r["exposed_comm_ns"] >= _intersection(gloo, waits) > 0
            assert r["compute_ns"] == _length(stored["compute"])
            assert r["compute_ns"] + _length(waits) <= r["span_ns"]
