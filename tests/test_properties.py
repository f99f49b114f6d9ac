"""Hypothesis properties of the interval unions (pipeline/intervals.py) and the breakdown SQL
against a point-set reference.

The reference counts covered integer nanoseconds with Python sets: slow but
obviously right, and independent of the merge code under test.
"""

from __future__ import annotations

import duckdb
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline import intervals
from pipeline.schema import MACROS_SQL, SCHEMA_SQL

KINDS = ["compute", "comm", "memory", "sync", "other"]
event = st.tuples(st.sampled_from(KINDS), st.integers(0, 300), st.integers(0, 60))


def breakdown(events: list[tuple[str, int, int]]) -> dict:
    """Unions computed as ingest does (pipeline/intervals.py), metrics by the SQL macro."""
    kinds = [k for k, _, _ in events]
    starts = [ts for _, ts, _ in events]
    rows, _ = intervals.window_unions(kinds, starts, [ts + d for _, ts, d in events], [None] * len(events))
    con = duckdb.connect()
    con.execute(SCHEMA_SQL.read_text())
    con.execute(MACROS_SQL.read_text())
    if rows:
        con.executemany("INSERT INTO interval_unions VALUES (1, 'r', 0, ?, ?, ?, ?, ?)", rows)
    rel = con.sql("SELECT * FROM window_breakdown(false, NULL)")
    got = rel.fetchall()
    return dict(zip(rel.columns, got[0])) if got else {}


def covered(events, kinds) -> set[int]:
    return {t for k, ts, dur in events if k in kinds for t in range(ts, ts + dur)}


@settings(max_examples=150, deadline=None)
@given(st.lists(event, min_size=1, max_size=25))
def test_matches_point_set_reference(events):
    r = breakdown(events)
    compute, comm = covered(events, {"compute"}), covered(events, {"comm"})
    memory, busy = covered(events, {"memory"}), covered(events, set(KINDS))
    assert r["busy_ns"] == len(busy)
    assert r["compute_ns"] == len(compute)
    assert r["comm_ns"] == len(comm)
    assert r["overlap_ns"] == len(compute & comm)
    assert r["exposed_comm_ns"] == len(comm - compute)
    assert r["exposed_memory_ns"] == len(memory - compute - comm)
    span = max(ts + d for _, ts, d in events) - min(ts for _, ts, _ in events)
    assert r["span_ns"] == span


@settings(max_examples=40, deadline=None)
@given(st.lists(event, min_size=1, max_size=25))
def test_identity_and_bounds(events):
    r = breakdown(events)
    assert 0 <= r["exposed_comm_ns"] <= r["comm_ns"]
    assert 0 <= r["overlap_ns"] <= min(r["comm_ns"], r["compute_ns"])
    parts = r["compute_ns"] + r["exposed_comm_ns"] + r["exposed_memory_ns"] + r["other_ns"] + r["idle_ns"]
    assert parts == r["span_ns"]


@settings(max_examples=30, deadline=None)
@given(st.lists(event, min_size=1, max_size=20), st.randoms())
def test_invariant_to_event_order(events, rnd):
    shuffled = list(events)
    rnd.shuffle(shuffled)
    assert breakdown(events) == breakdown(shuffled)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 40)), max_size=30))
def test_merge_matches_point_sets(spans):
    merged = intervals.merge([(s, s + d) for s, d in spans])
    assert all(a[1] < b[0] for a, b in zip(merged, merged[1:]))  # disjoint, sorted, gaps between
    assert sum(e - s for s, e in merged) == len({t for s, d in spans for t in range(s, s + d)})
