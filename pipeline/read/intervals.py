"""Interval unions per trace, computed once at ingest (so queries over 1000s of ranks stay scans).

For every window (the whole trace, and each ProfilerStep: a device event
belongs to the step that launched it) and every *set* of kinds:

    all, compute, comm, memory, cc (compute ∪ comm), ccm (compute ∪ comm ∪ memory)

the length of the union of the set's intervals, its first start and last
end.  Every breakdown metric follows by inclusion-exclusion, e.g.
|U(compute) ∩ U(comm)| = compute + comm − cc (queries/macros/window_breakdown.sql).  The
merged compute intervals of the whole trace are kept too, for the exposed
part of each communication event.  Vectorised with numpy: 8 bytes per event
and per column, whatever the trace's size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scaletrace.pipeline.read.vocabulary import KINDS

SETS = {  # set -> kinds in it
    "all": KINDS,
    "compute": ("compute",),
    "comm": ("comm",),
    "memory": ("memory",),
    "cc": ("compute", "comm"),
    "ccm": ("compute", "comm", "memory"),
}


def merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Disjoint, sorted union of [start, end) intervals (touching ones merge)."""
    if not intervals:
        return []
    starts, ends = (np.array(x, dtype=np.int64) for x in zip(*intervals))
    s, e = islands(starts, ends)
    return list(zip(s.tolist(), e.tolist()))


def islands(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merged intervals (sorted, disjoint; touching ones merge) of [start, end) intervals."""
    _, s, e = grouped_islands(np.zeros(len(starts), dtype=np.int64), starts, ends)
    return s, e


def grouped_islands(groups: np.ndarray, starts: np.ndarray, ends: np.ndarray):
    """Merged intervals within each group: (group, start, end) arrays sorted by group, start.

    One sort for all groups: times are shifted by group × (span + 1) so that a
    running maximum never crosses a group boundary."""
    if len(starts) == 0:
        return groups[:0], starts[:0], ends[:0]
    t0 = int(starts.min())
    width = int(ends.max()) - t0 + 1
    if (int(groups.max()) + 1) * width >= 2**62:  # would overflow: one group at a time
        parts = [grouped_islands(groups[groups == g] * 0, starts[groups == g], ends[groups == g])
                 for g in np.unique(groups)]
        return (np.concatenate([np.full(len(p[1]), g) for g, p in zip(np.unique(groups), parts)]),
                np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts]))
    order = np.lexsort((ends, starts, groups))
    g = groups[order]
    shift = g * width - t0
    s, e = starts[order] + shift, ends[order] + shift
    reach = np.maximum.accumulate(e)  # the furthest end so far
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]  # starts after everything before it ended
    first = np.flatnonzero(new)
    gi = g[first]
    return gi, s[first] - shift[first], np.maximum.reduceat(e, first) - shift[first]


SET_NAMES = tuple(SETS)


@dataclass
class Unions:
    """Rows (step, set, union_ns, first_ns, last_ns) as columns: a ProfilerStep per kernel makes
    several rows per event, which as Python tuples took ~10 times the memory of the trace's JSON."""

    step: np.ndarray  # int64: the step number, where has_step
    has_step: np.ndarray  # bool: False on the whole trace's rows
    set_code: np.ndarray  # int8 index into SET_NAMES
    union_ns: np.ndarray
    first_ns: np.ndarray
    last_ns: np.ndarray

    def rows(self) -> list[tuple]:
        """(step or None, set_name, union_ns, first_ns, last_ns) per row."""
        steps = [s if h else None for s, h in zip(self.step.tolist(), self.has_step.tolist())]
        names = [SET_NAMES[c] for c in self.set_code.tolist()]
        return list(zip(steps, names, self.union_ns.tolist(), self.first_ns.tolist(), self.last_ns.tolist()))


def window_unions(kinds: np.ndarray, starts: np.ndarray, ends: np.ndarray, steps: np.ndarray,
                  has_step: np.ndarray) -> tuple[Unions, tuple[np.ndarray, np.ndarray]]:
    """Each window's row per set (the whole trace's, then each step's, set by set), and the whole
    trace's compute islands (start and end arrays).

    kinds: kind index per event (into KINDS); steps / has_step: the event's window."""
    parts = []  # (step, has_step, set code, union, first, last) arrays, one whole-trace and one per-step part a set
    compute = (starts[:0], ends[:0])
    step_values, step_group = np.unique(steps[has_step], return_inverse=True)
    step_group = step_group.reshape(-1)
    for code, (set_name, members) in enumerate(SETS.items()):
        in_set = np.isin(kinds, [KINDS.index(k) for k in members])
        if not in_set.any():
            continue
        _, s, e = grouped_islands(np.zeros(int(in_set.sum()), dtype=np.int64), starts[in_set], ends[in_set])
        if set_name == "compute":
            compute = (s, e)
        parts.append((np.zeros(1, dtype=np.int64), np.zeros(1, dtype=bool), code, [int((e - s).sum())], s[:1],
                      [int(e.max())]))
        stepped = in_set[has_step]
        if not stepped.any():
            continue
        g, s, e = grouped_islands(step_group[stepped], starts[has_step][stepped], ends[has_step][stepped])
        bounds = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
        parts.append((step_values[g[bounds]], np.ones(len(bounds), dtype=bool), code,
                      np.add.reduceat(e - s, bounds), s[bounds], np.maximum.reduceat(e, bounds)))
    return _joined(parts), compute


def _joined(parts: list) -> Unions:
    column = lambda i, dtype: np.concatenate([np.asarray(p[i], dtype=dtype) for p in parts])  # noqa: E731
    if not parts:
        return Unions(*(np.zeros(0, dtype=t) for t in (np.int64, bool, np.int8, np.int64, np.int64, np.int64)))
    codes = np.concatenate([np.full(len(p[1]), p[2], dtype=np.int8) for p in parts])
    return Unions(column(0, np.int64), column(1, bool), codes, column(3, np.int64), column(4, np.int64),
                  column(5, np.int64))


def exposed(spans_start: np.ndarray, spans_end: np.ndarray, isl_start: np.ndarray,
            isl_end: np.ndarray) -> np.ndarray:
    """|[start, end) \\ U(islands)| for each span, the islands merged and sorted."""
    length = isl_end - isl_start
    before = np.concatenate(([0], np.cumsum(length)))  # covered length before island k

    def covered_until(x: np.ndarray) -> np.ndarray:
        k = np.searchsorted(isl_start, x, side="right")  # islands starting at or before x
        inside = np.where(k > 0, np.clip(x - isl_start[np.maximum(k - 1, 0)], 0, length[np.maximum(k - 1, 0)])
                          if len(isl_start) else 0, 0)
        return before[np.maximum(k - 1, 0)] * (k > 0) + inside

    if len(isl_start) == 0:
        return spans_end - spans_start
    return (spans_end - spans_start) - (covered_until(spans_end) - covered_until(spans_start))
