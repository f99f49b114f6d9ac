"""The critical path of each profiled step, across CPU threads, GPU streams and ranks.

The graph is SQL (``queries/macros/critical_path_graph.sql``: one row per node with the indices of
its predecessors; ``critical_path_steps.sql``: each rank's step window and the slowest rank).  Here
is only the walk: from the end of the slowest rank's step back to its start, at every node taking
the predecessor that became ready last (the one the node waited for).  Every edge runs forward in
time, so the segments tile the window and the path's length is the slowest rank's step window
(critical_path_steps: a rank's windows never overlap).  The walk visits the path's nodes only (a
Python step per segment, none per event); the arrays it indexes come from one Arrow result.

At a node i reached at time t (its end, or a point inside it):

* a communication event: the collective ends on every member ``transfer_ns`` after its last
  member arrived.  The part [max(J, t − transfer), t) is ``comm_transfer``; when the last arrival
  J is another rank's and later than i's own start, [J, t − transfer) is ``comm_wait`` and the walk
  goes on at that rank's event, at its start J.  When i arrived last, its own start is where the
  walk goes on (what lies before t − transfer is ``comm_wait``, as rank_wait counts it);
* a host node that waited for the GPU (``waited_for``): a synchronize or a memcpy in which a device
  event ended; any other runtime call that lasted at least BLOCKED_CALL_NS and returned at most
  WAIT_SLACK_NS after a device event ended (a launch that could not be issued while the launch
  queue was full, an implicitly synchronizing call); a collective op that returned at most
  WAIT_SLACK_NS after the end of the collective it launched, which ran at least BLOCKED_CALL_NS
  inside it (a blocking collective).  The node's time after that end is ``cpu_op`` and the walk
  goes on at that device event, at its end;
* anything else: its own time [start, t) is the node's kind (``compute_kernel``, ``memory``, or
  ``cpu_op`` for a runtime call), and then of its predecessors (the previous node on its lane;
  the launching call and the event a CUDA sync event says it waited for, for a device event; the
  collective op that waited and that the thread resumed after, for a runtime call; the inferred
  wait, see WAIT_SLACK_NS) the one ready last is taken, ties to the lane: the time
  between is ``launch_delay`` on a stream (the kernel was launched or its stream free, yet it had
  not started) and, on a thread, ``cpu_op`` named after the op that launched the next call's
  device events, or ``host_gap`` when no op is known.  A host wait (``drained``) is one more
  predecessor of a runtime call: the device event queued ahead of its next launch, when the host gap
  before the call (at least BLOCKED_CALL_NS, no call in it) had that stream busy through it and
  ended within WAIT_SLACK_NS of that event's end; the step's last host gap likewise waits for the
  step's last device event.  A node without predecessors leaves a ``host_gap`` back to the
  window's start.

``prepare(db, run_id)`` runs the walk and replaces the ``critical_path_rows`` macro on the
database's connection with one over the result, so the ``critical_path`` and
``critical_path_summary`` query files (SQL over that relation) work as any other query.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:  # the layer stays below the pipeline: only the type is imported
    from scaletrace.pipeline.store.db import Database

QUERIES = ("critical_path", "critical_path_summary")  # the query files that read critical_path_rows
RELATION = "critical_path_segments"  # the walk's result, registered on the connection
KINDS = ("cpu_op", "launch_delay", "compute_kernel", "comm_transfer", "comm_wait", "memory", "host_gap")
DEVICE_KIND = {"compute": "compute_kernel", "other": "compute_kernel", "memory": "memory"}
WAIT_SLACK_NS = 20_000  # an inferred wait: the other lane's node ended at most this long before the start
# A runtime call at least this long (a collective op whose collective ran this long inside it) that
# returned within WAIT_SLACK_NS after a device event ended waited for it (waited_for).  A launch takes a
# few µs; on the real traces the launches this long that returned so soon after a device event's end
# (692 on hta-ns-resolution, GPU-bound: a full launch queue) returned a median 5.5 µs, at most 18 µs
# after it, as the synchronize calls do (6-15 µs)
BLOCKED_CALL_NS = 50_000
HOST = "(host)"  # the name of a host gap no op accounts for
COLUMNS = (("run_id", pa.string()), ("step", pa.int64()), ("seq", pa.int64()), ("trace_id", pa.int64()),
           ("rank", pa.int32()), ("lane", pa.string()), ("kind", pa.string()), ("name", pa.string()),
           ("event_id", pa.int64()), ("start_ns", pa.int64()), ("dur_ns", pa.int64()),
           ("offset_ns", pa.int64()), ("clock_ns", pa.int64()))


class _Graph:
    """critical_path_graph's columns as Python lists, indexed by node idx."""

    def __init__(self, table: pa.Table):
        for name in table.column_names:
            setattr(self, name, table[name].to_pylist())
        self.n = table.num_rows
        assert self.idx == list(range(self.n)), "critical_path_graph numbers its nodes 0, 1, ... in order"
        # each (trace, lane) is a contiguous idx range ordered by start: for the step's last host call
        self.lanes: dict = {}
        self.ops: dict = {}  # (trace, lane) -> its collective ops
        for i, key in enumerate(zip(self.trace_id, self.lane)):
            first, _ = self.lanes.get(key, (i, i))
            self.lanes[key] = (first, i + 1)
            if self.kind[i] == "collective_op":
                self.ops.setdefault(key, []).append(i)
        self.clock = dict(zip(self.trace_id, self.clock_ns))  # per trace, the same for all its nodes

    def last_on_lane_before(self, trace_id: int, lane: str, t: int) -> int:
        """The host node on the lane that was ready last at t: of the last node that starts before t
        and the collective op that waited and ended last at or before t, the later (-1: neither)."""
        first, end = self.lanes.get((trace_id, lane), (0, 0))
        k = bisect.bisect_left(self.start_ns, t, first, end) - 1
        k = k if k >= first else -1
        ended = [h for h in self.ops.get((trace_id, lane), ())
                 if self.end_ns[h] <= t and waited_for(self, h) is not None]
        h = max(ended, key=lambda h: self.end_ns[h], default=-1)
        return h if h >= 0 and (k < 0 or self.end_ns[h] > min(self.end_ns[k], t)) else k


def waited_for(g: _Graph, i: int) -> int | None:
    """The device event host node i waited for (see the module's docstring), or None."""
    d = g.sync_idx[i]
    if d is None or g.side[i] != "cpu":
        return None
    if g.blocking[i]:
        return d
    if g.kind[i] == "collective_op":  # tens of µs of host work of its own: held only by a long collective
        held_ns = g.end_ns[d] - max(g.start_ns[d], g.start_ns[i])
    else:  # a launch takes a few µs: a long one was held
        held_ns = g.end_ns[i] - g.start_ns[i]
    return d if held_ns >= BLOCKED_CALL_NS and 0 <= g.end_ns[i] - g.end_ns[d] <= WAIT_SLACK_NS else None


def drained(g: _Graph, j: int | None, gap_start: int, t: int) -> int | None:
    """Device event j, when the host waited for it through a host gap [gap_start, t) in which no call
    was recorded: the gap lasted at least BLOCKED_CALL_NS (a few µs between two calls is the host's
    own overhead), j's stream was busy through it (no idle piece longer than WAIT_SLACK_NS from
    within WAIT_SLACK_NS of its start) and j, the work queued ahead of the host's next launch, ended
    within WAIT_SLACK_NS of t: the host went on as the stream drained (a host that polls, a launch
    queue's throttle, a wait no runtime call records).  None otherwise."""
    if (j is None or g.side[j] != "gpu" or t - gap_start < BLOCKED_CALL_NS or not gap_start < g.end_ns[j]
            or abs(g.end_ns[j] - t) > WAIT_SLACK_NS):
        return None
    m, begin = j, g.start_ns[j]
    while begin > gap_start + WAIT_SLACK_NS:  # back along the stream to the gap's start, without a long idle
        m = g.prev_idx[m]
        if m is None or g.end_ns[m] < begin - WAIT_SLACK_NS:
            return None
        begin = min(begin, g.start_ns[m])
    return j


def walk(g: _Graph, end_idx: int, t: int, lo: int, host_lane: tuple | None, infer: bool = True) -> list[tuple]:
    """Segments (node idx or -1, kind, name, start, end, (trace, rank, lane)) from ``t`` back to ``lo``,
    latest first.  ``end_idx`` is the node the path ends in (-1: none; then ``host_lane`` names the
    lane of a host gap that fills the window)."""
    segs: list[tuple] = []

    def emit(node: int, kind: str, name: str, a: int, b: int, where: tuple) -> None:
        a = max(a, lo)
        if b > a:
            segs.append((node, kind, name, a, b, where))

    def at(i: int) -> tuple:
        return (g.trace_id[i], g.rank[i], g.lane[i])

    i = end_idx
    if i < 0:
        emit(-1, "host_gap", HOST, lo, t, host_lane)
        return segs
    budget = 4 * g.n + 16  # every move goes to an earlier node; this only guards against a bad graph
    while t > lo and budget > 0:
        budget -= 1
        start, side, kind = g.start_ns[i], g.side[i], g.kind[i]
        if side == "gpu" and kind == "comm":
            q, transfer = g.last_idx[i], g.transfer_ns[i] or 0
            arrival = g.start_ns[q] if q is not None else start
            through = max(arrival, t - transfer)
            emit(i, "comm_transfer", g.name[i], through, t, at(i))
            if q is not None and q != i and start < arrival < t:
                emit(i, "comm_wait", g.name[i], arrival, through, at(i))
                i, t = q, arrival  # on at the last member's arrival, at its own start
                continue
            else:
                emit(i, "comm_wait", g.name[i], start, through, at(i))
                t = min(t, start)
        elif (d := waited_for(g, i)) is not None and start < g.end_ns[d] <= t:
            emit(i, "cpu_op", g.name[i], g.end_ns[d], t, at(i))
            i, t = d, g.end_ns[d]
            continue
        else:
            own = "cpu_op" if side == "cpu" else DEVICE_KIND.get(kind, "compute_kernel")
            emit(i, own, g.name[i], start, t, at(i))
            t = min(t, start)
        # the predecessor that became ready last
        prev, launch = g.prev_idx[i], g.launch_idx[i] if side == "gpu" else None
        best, ready = -1, None
        if prev is not None:
            best, ready = prev, min(g.end_ns[prev], t)
        if launch is not None and (ready is None or min(g.start_ns[launch], t) > ready):
            best, ready = launch, min(g.start_ns[launch], t)
        exact = g.event_idx[i] if side == "gpu" else None
        if exact is not None and (ready is None or min(g.end_ns[exact], t) > ready):
            best, ready = exact, min(g.end_ns[exact], t)  # a cross-stream wait a CUDA sync event recorded
        held = g.block_idx[i] if side == "cpu" else None
        if held is not None and waited_for(g, held) is not None and (ready is None or min(g.end_ns[held], t) > ready):
            best, ready = held, min(g.end_ns[held], t)  # the thread resumed after a blocking collective
        wait = g.wait_idx[i] if infer else None
        if wait is not None and (ready is None or g.end_ns[wait] > ready) and (
                side == "cpu" or t - g.end_ns[wait] <= WAIT_SLACK_NS):
            best, ready = wait, g.end_ns[wait]  # waited for another stream, or woken by another thread
        if infer and side == "cpu" and kind != "collective_op" and g.target_idx[i] is not None:
            # the stream the next launch targets busy through the host gap: the host waited for it
            d = drained(g, g.prev_idx[g.target_idx[i]], lo if best < 0 else ready, t)
            if d is not None:
                best, ready = d, min(g.end_ns[d], t)
        if best < 0:
            emit(-1, "host_gap", HOST, lo, t, at(i))
            break
        if side == "gpu":
            emit(i, "launch_delay", g.name[i], ready, t, at(i))
        else:
            op = g.launched_op[i]
            emit(-1, "cpu_op" if op else "host_gap", op or HOST, ready, t, at(i))
        i, t = best, ready  # at a launching call: at its start, its own time is off the path
    return segs


def segments(db: "Database", run_id: str | None = None) -> pa.Table:
    """The critical path of every profiled step of the run (every run when None), as COLUMNS."""
    con = db.con
    graph = con.sql("SELECT * FROM critical_path_graph($run)", params={"run": run_id}).to_arrow_table()
    windows = con.sql("SELECT run_id, step, rank, trace_id, clock_ns, lane, start_ns, end_ns, host_end_ns "
                      "FROM critical_path_steps($run) WHERE is_slowest ORDER BY run_id, step",
                      params={"run": run_id}).fetchall()
    g = _Graph(graph)
    ends: dict = {}  # (trace, step) -> the device event of the step that ends last (the latest idx on a tie)
    for i, (trace, step, side) in enumerate(zip(g.trace_id, g.step, g.side)):
        if side == "gpu" and step is not None:
            j = ends.get((trace, step))
            if j is None or g.end_ns[i] >= g.end_ns[j]:
                ends[(trace, step)] = i
    out: dict[str, list] = {name: [] for name, _ in COLUMNS}
    seen = set()
    for run, step, rank, trace, clock, lane, lo, end, host_end in windows:
        if (run, step) in seen:  # two annotations of one step on the slowest rank: the first
            continue
        seen.add((run, step))
        last = ends.get((trace, step), -1)
        if last >= 0 and g.end_ns[last] >= end and end > host_end:
            segs = walk(g, last, end, lo, None)
        else:  # the host's step ends last: from the last call on its thread
            i = g.last_on_lane_before(trace, lane, end)
            segs = []
            t = end
            if i >= 0 and g.end_ns[i] < end:
                # the host left the step as its device work drained, busy through the gap: it waited for it
                d = drained(g, last if last >= 0 else None, max(g.end_ns[i], lo), end)
                t = min(g.end_ns[d], end) if d is not None else max(g.end_ns[i], lo)
                if t < end:
                    segs.append((-1, "host_gap", HOST, t, end, (trace, rank, lane)))
                i = d if d is not None else i
            segs += walk(g, i, t, lo, (trace, rank, lane))
        for seq, (node, kind, name, a, b, (where_trace, where_rank, where_lane)) in enumerate(reversed(segs)):
            clock_at = g.clock.get(where_trace, clock)
            out["run_id"].append(run)
            out["step"].append(step)
            out["seq"].append(seq)
            out["trace_id"].append(where_trace)
            out["rank"].append(where_rank)
            out["lane"].append(where_lane)
            out["kind"].append(kind)
            out["name"].append(name)
            out["event_id"].append(g.event_id[node] if node >= 0 else None)
            out["start_ns"].append(a - clock_at)
            out["dur_ns"].append(b - a)
            out["offset_ns"].append(a - lo)
            out["clock_ns"].append(clock_at)
    return pa.table({name: pa.array(out[name], typ) for name, typ in COLUMNS})


def prepare(db: "Database", run_id: str | None = None) -> None:
    """Walk the selected runs and make ``critical_path_rows`` on ``db``'s connection read the result."""
    table = db._guard(lambda: segments(db, run_id))
    db.con.register(RELATION, table)
    db.con.execute(f"CREATE OR REPLACE TEMP MACRO critical_path_rows(run) AS TABLE "
                   f"SELECT * FROM {RELATION} WHERE run IS NULL OR run_id = run")
