"""Hypothesis properties of the interval unions (pipeline/intervals.py) and the breakdown SQL
against a point-set reference.

The reference counts covered integer nanoseconds with Python sets: slow but
obviously right, and independent of the merge code under test.
"""

from __future__ import annotations

import duckdb
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scaletrace.pipeline import intervals
from scaletrace.pipeline.schema import SCHEMA_SQL
from scaletrace.queries import definitions

KINDS = ["compute", "comm", "memory", "sync", "other"]
event = st.tuples(st.sampled_from(KINDS), st.integers(0, 300), st.integers(0, 60))


def breakdown(events: list[tuple[str, int, int]]) -> dict:
    """Unions computed as ingest does (pipeline/intervals.py), metrics by the SQL macro."""
    kinds = np.array([intervals.KINDS.index(k) for k, _, _ in events], dtype=np.int8)
    starts = np.array([ts for _, ts, _ in events], dtype=np.int64)
    ends = starts + np.array([d for _, _, d in events], dtype=np.int64)
    none = np.zeros(len(events), dtype=bool)
    rows, _ = intervals.window_unions(kinds, starts, ends, np.zeros(len(events), dtype=np.int64), none)
    con = duckdb.connect()
    con.execute(SCHEMA_SQL.read_text())
    definitions.register(con)
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


stepped_event = st.tuples(st.sampled_from(KINDS), st.integers(0, 300), st.integers(0, 60),
                          st.one_of(st.none(), st.integers(1, 4)))


@settings(max_examples=100, deadline=None)
@given(st.lists(stepped_event, min_size=1, max_size=30))
def test_per_step_unions_match_point_sets(events):
    kinds = np.array([intervals.KINDS.index(k) for k, *_ in events], dtype=np.int8)
    starts = np.array([ts for _, ts, _, _ in events], dtype=np.int64)
    ends = starts + np.array([d for _, _, d, _ in events], dtype=np.int64)
    has_step = np.array([s is not None for *_, s in events])
    steps = np.array([s or 0 for *_, s in events], dtype=np.int64)
    rows, _ = intervals.window_unions(kinds, starts, ends, steps, has_step)
    got = {(step, name): union for step, name, union, _, _ in rows}
    for step in {s for *_, s in events if s is not None}:
        mine = [e for e in events if e[3] == step]
        for name, members in intervals.SETS.items():
            expected = len(covered([e[:3] for e in mine], set(members)))
            if any(e[0] in members for e in mine):
                assert got[(step, name)] == expected, (step, name)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 40)), max_size=20),
       st.lists(st.tuples(st.integers(0, 200), st.integers(0, 40)), max_size=10))
def test_exposed_part_matches_point_sets(compute, comm):
    s, e = intervals.islands(np.array([a for a, _ in compute], dtype=np.int64),
                             np.array([a + d for a, d in compute], dtype=np.int64))
    got = intervals.exposed(np.array([a for a, _ in comm], dtype=np.int64),
                            np.array([a + d for a, d in comm], dtype=np.int64), s, e)
    cover = {t for a, d in compute for t in range(a, a + d)}
    assert got.tolist() == [len(set(range(a, a + d)) - cover) for a, d in comm]
