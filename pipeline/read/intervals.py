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


def window_unions(kinds: np.ndarray, starts: np.ndarray, ends: np.ndarray, steps: np.ndarray,
                  has_step: np.ndarray):
    """Rows (step, set_name, union_ns, first_ns, last_ns), step None = whole trace, and the
    whole trace's compute islands (start and end arrays).

    kinds: kind index per event (into KINDS); steps / has_step: the event's window."""
    rows = []
    compute = (starts[:0], ends[:0])
    step_values, step_group = np.unique(steps[has_step], return_inverse=True)
    for set_name, members in SETS.items():
        in_set = np.isin(kinds, [KINDS.index(k) for k in members])
        if not in_set.any():
            continue
        _, s, e = grouped_islands(np.zeros(int(in_set.sum()), dtype=np.int64), starts[in_set], ends[in_set])
        if set_name == "compute":
            compute = (s, e)
        rows.append((None, set_name, int((e - s).sum()), int(s[0]), int(e.max())))
        stepped = in_set[has_step]
        if not stepped.any():
            continue
        g, s, e = grouped_islands(step_group[stepped], starts[has_step][stepped], ends[has_step][stepped])
        bounds = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
        totals = np.add.reduceat(e - s, bounds)
        lasts = np.maximum.reduceat(e, bounds)
        for b, total, last in zip(bounds.tolist(), totals.tolist(), lasts.tolist()):
            rows.append((int(step_values[g[b]]), set_name, total, int(s[b]), last))
    return rows, compute


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
