"""Interval unions per trace, computed once at ingest (so queries over 1000s of ranks stay scans).

For every window (the whole trace, and each ProfilerStep: a device event
belongs to the step that launched it) and every *set* of kinds:

    all, compute, comm, memory, cc (compute ∪ comm), ccm (compute ∪ comm ∪ memory)

the length of the union of the set's intervals, its first start and last
end.  Every breakdown metric follows by inclusion-exclusion, e.g.
|U(compute) ∩ U(comm)| = compute + comm − cc (queries/macros.sql).  The
merged compute intervals of the whole trace are kept too, for the exposed
part of each communication event.
"""

from __future__ import annotations

import bisect
from collections import defaultdict

SETS = {  # set -> kinds in it
    "all": ("compute", "comm", "memory", "sync", "other"),
    "compute": ("compute",),
    "comm": ("comm",),
    "memory": ("memory",),
    "cc": ("compute", "comm"),
    "ccm": ("compute", "comm", "memory"),
}


def merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Disjoint, sorted union of [start, end) intervals (touching ones merge)."""
    out: list[list[int]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1][1] = end
        else:
            out.append([start, end])
    return [(s, e) for s, e in out]


def window_unions(kinds: list[str], starts: list[int], ends: list[int], steps: list[int | None]):
    """Rows (step, set_name, union_ns, first_ns, last_ns), step None = whole trace; and the
    whole-trace compute islands."""
    by_window: dict = defaultdict(lambda: defaultdict(list))
    for kind, start, end, step in zip(kinds, starts, ends, steps):
        by_window[None][kind].append((start, end))
        if step is not None:
            by_window[step][kind].append((start, end))
    rows, compute_islands = [], []
    for step, per_kind in by_window.items():
        islands = {kind: merge(iv) for kind, iv in per_kind.items()}
        if step is None:
            compute_islands = islands.get("compute", [])
        for set_name, members in SETS.items():
            parts = [iv for kind in members for iv in islands.get(kind, ())]
            if not parts:
                continue
            merged = parts if len(members) == 1 else merge(parts)
            rows.append((step, set_name, sum(e - s for s, e in merged), merged[0][0],
                         max(e for _, e in merged)))
    return rows, compute_islands


def exposed(start: int, end: int, islands: list[tuple[int, int]], island_ends: list[int]) -> int:
    """|[start, end) \\ U(islands)|: the part of an event no island covers (islands merged, sorted;
    ``island_ends`` their ends, for bisection)."""
    hidden = 0
    for s, e in islands[bisect.bisect_right(island_ends, start):]:
        if s >= end:
            break
        hidden += min(e, end) - max(s, start)
    return end - start - hidden
