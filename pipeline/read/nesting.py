"""Nesting of CPU intervals on one thread, vectorised: each interval's parent, and the innermost
interval that contains an instant (the op whose runtime call launched a kernel).

Ops on a thread nest (``aten::linear`` holds ``aten::addmm`` holds ``cudaLaunchKernel``).  Sorted by
start (longer first on ties), an interval's depth is the number of earlier intervals still open at
its start, and its parent the last earlier interval one level up.  The innermost interval holding
instant t is then the last interval starting at or before t, or the nearest of its ancestors that
has not ended by t.  Intervals that overlap without nesting (rounding in a trace) are tolerated:
every answer is checked to contain its instant, and an instant no interval contains gets -1.
"""

from __future__ import annotations

import numpy as np


class Nesting:
    """Intervals ``[starts, ends)`` of one thread (any order); positions refer to the input order."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray):
        starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
        self.order = np.lexsort((-(ends - starts), starts))  # by start, the longer first
        self.starts, self.ends = starts[self.order], ends[self.order]
        n = len(self.starts)
        closed = np.searchsorted(np.sort(self.ends), self.starts, side="right")
        self.depth = np.maximum(np.arange(n) - closed, 0)
        self.parent = np.full(n, -1, dtype=np.int64)
        levels = [np.flatnonzero(self.depth == d) for d in range(int(self.depth.max()) + 1 if n else 0)]
        for d in range(1, len(levels)):
            up, here = levels[d - 1], levels[d]
            k = np.searchsorted(up, here) - 1
            self.parent[here[k >= 0]] = up[k[k >= 0]]
        self.levels = levels

    def innermost(self, points: np.ndarray) -> np.ndarray:
        """For each instant, the sorted position of the innermost interval containing it, or -1."""
        points = np.asarray(points, dtype=np.int64)
        found = np.searchsorted(self.starts, points, side="right") - 1
        for _ in range(len(self.levels) + 1):
            ok = found >= 0
            outside = np.zeros(len(points), dtype=bool)
            outside[ok] = self.ends[found[ok]] <= points[ok]
            if not outside.any():
                break
            found[outside] = self.parent[found[outside]]
        return found

    def down(self, values: np.ndarray, inherit) -> np.ndarray:
        """``values`` (one per sorted interval) handed down the nesting: an interval takes its
        parent's value where ``inherit(parent_values)`` is true, level by level from the roots."""
        out = np.array(values, copy=True)
        for here in self.levels[1:]:
            parent = self.parent[here]
            has = parent >= 0
            take = np.zeros(len(here), dtype=bool)
            take[has] = inherit(out[parent[has]])
            out[here[take]] = out[parent[take]]
        return out
