"""Hypothesis properties of the interval unions (pipeline/read/intervals.py) and the breakdown SQL
against a point-set reference.

The reference counts covered integer nanoseconds with Python sets: slow but
obviously right, and independent of the merge code under test.  Every part of
the span is checked on its own (their sum is the span by construction).
"""

from __future__ import annotations

import functools

import duckdb
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import BREAKDOWN_COLUMNS, SPAN_PARTS, assert_parts_sane, differences, sweep_breakdown
from scaletrace.pipeline.read import intervals
from scaletrace.pipeline.store.schema import SCHEMA_SQL
from scaletrace.queries import definitions

KINDS = ["compute", "comm", "memory", "sync", "other"]
event = st.tuples(st.sampled_from(KINDS), st.integers(0, 300), st.integers(0, 60))


@functools.cache
def _database() -> duckdb.DuckDBPyConnection:
    """One in-memory database with the schema and the macros for every example: building it is most
    of a second, an example's query milliseconds; each example empties interval_unions first."""
    con = duckdb.connect()
    con.execute(SCHEMA_SQL.read_text())
    definitions.register(con)
    return con


def windows(events: list[tuple[str, int, int, int | None]]) -> dict:
    """Every window's breakdown row, the whole trace under None and each step under its number:
    unions computed as ingest does (pipeline/read/intervals.py), metrics by the SQL macro."""
    kinds = np.array([intervals.KINDS.index(k) for k, *_ in events], dtype=np.int8)
    starts = np.array([ts for _, ts, _, _ in events], dtype=np.int64)
    ends = starts + np.array([d for _, _, d, _ in events], dtype=np.int64)
    has_step = np.array([s is not None for *_, s in events], dtype=bool)
    steps = np.array([s or 0 for *_, s in events], dtype=np.int64)
    rows = intervals.window_unions(kinds, starts, ends, steps, has_step)[0].rows()
    con = _database()
    con.execute("DELETE FROM interval_unions")
    if rows:
        con.executemany("INSERT INTO interval_unions VALUES (1, 'r', 0, ?, ?, ?, ?, ?)", rows)
    found = {}
    for per_step in (False, True):
        rel = con.sql(f"SELECT * FROM window_breakdown({per_step}, NULL)")
        found.update({row[rel.columns.index("step")]: dict(zip(rel.columns, row)) for row in rel.fetchall()})
    return found


def breakdown(events: list[tuple[str, int, int]]) -> dict:
    """The whole trace's breakdown row (no steps)."""
    return windows([(*e, None) for e in events]).get(None, {})


def covered(events, kinds) -> set[int]:
    return {t for k, ts, dur in events if k in kinds for t in range(ts, ts + dur)}


def point_set_breakdown(events: list[tuple[str, int, int]]) -> dict:
    """Every *_ns column of one window, each counted on its own as a set of covered nanoseconds."""
    compute, comm, memory = (covered(events, {kind}) for kind in ("compute", "comm", "memory"))
    busy = covered(events, set(KINDS))
    first, last = min(ts for _, ts, _ in events), max(ts + d for _, ts, d in events)
    return {"span_ns": last - first, "busy_ns": len(busy), "comm_ns": len(comm), "memory_ns": len(memory),
            "overlap_ns": len(compute & comm),
            # the five parts of the span
            "compute_ns": len(compute),
            "exposed_comm_ns": len(comm - compute),
            "exposed_memory_ns": len(memory - compute - comm),
            "other_ns": len(busy - compute - comm - memory),
            "idle_ns": len(set(range(first, last)) - busy)}


stepped_event = st.tuples(st.sampled_from(KINDS), st.integers(0, 300), st.integers(0, 60),
                          st.one_of(st.none(), st.integers(1, 4)))


@settings(max_examples=100, deadline=None)
@given(st.lists(stepped_event, min_size=1, max_size=25))
def test_every_part_matches_point_sets_in_every_window(events):
    """Each column, in the whole trace and in each step, against its own point count.  other and
    idle are remainders in the SQL, so the five parts sum to the span whatever the unions are:
    only a check of each part on its own can fail."""
    got = windows(events)
    in_window = {None: events, **{s: [e for e in events if e[3] == s] for *_, s in events if s is not None}}
    assert set(got) == set(in_window)
    for step, mine in in_window.items():
        row, expected = got[step], point_set_breakdown([e[:3] for e in mine])
        assert {column: row[column] for column in BREAKDOWN_COLUMNS} == expected, (step, differences(row, expected))
        assert sum(expected[part] for part in SPAN_PARTS) == expected["span_ns"]  # the reference is a partition
        assert_parts_sane(row)


@settings(max_examples=100, deadline=None)
@given(st.lists(event, min_size=1, max_size=25))
def test_sweep_reference_matches_point_sets(events):
    """conftest.sweep_breakdown, the reference of the tests over whole traces, against point sets."""
    assert sweep_breakdown([(k, ts, ts + d) for k, ts, d in events]) == point_set_breakdown(events)


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


@settings(max_examples=100, deadline=None)
@given(st.lists(stepped_event, min_size=1, max_size=30))
def test_per_step_unions_match_point_sets(events):
    kinds = np.array([intervals.KINDS.index(k) for k, *_ in events], dtype=np.int8)
    starts = np.array([ts for _, ts, _, _ in events], dtype=np.int64)
    ends = starts + np.array([d for _, _, d, _ in events], dtype=np.int64)
    has_step = np.array([s is not None for *_, s in events])
    steps = np.array([s or 0 for *_, s in events], dtype=np.int64)
    rows = intervals.window_unions(kinds, starts, ends, steps, has_step)[0].rows()
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


def _main_pid_by_counting(codes: list[int], ids: list):
    """The int pid most of ``codes`` map to, the first seen among those tied: counted one code at
    a time, in order (how extract counted it before main_pid)."""
    pids: dict = {}
    for code in codes:
        if isinstance(ids[code], int):
            pids[ids[code]] = pids.get(ids[code], 0) + 1
    return max(pids, key=pids.get) if pids else None


@settings(max_examples=300, deadline=None, derandomize=True)
@given(ids=st.lists(st.one_of(st.integers(0, 9), st.sampled_from(["Spans", "7", None])), min_size=1, max_size=6,
                    unique_by=lambda v: (type(v), v)),
       picks=st.lists(st.integers(0, 5), max_size=40))
def test_the_main_pid_is_the_most_frequent_int_first_seen_among_ties(ids, picks):
    from scaletrace.pipeline.read.extract import main_pid

    codes = [p % len(ids) for p in picks]
    assert main_pid(np.array(codes, dtype=np.int32), ids) == _main_pid_by_counting(codes, ids)
