"""Turn one decoded trace into the rows scaletrace stores (runs in a worker process).

Output tables (columns as in ``pipeline/schema.sql``, without the trace key):
``device`` (GPU events, or CPU lanes on CPU-only traces), ``cpu`` (runtime
calls, step annotations, collective ops), ``steps`` and ``collectives``.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from pipeline import collectives as coll
from pipeline import intervals
from pipeline.classify import Classifier, is_collective_call
from pipeline.decode import INT64_MAX, Args, Event, TraceDoc, TraceError, iter_events

DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset", "cuda_sync"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime", "hip_runtime"}
STEP_RE = re.compile(r"ProfilerStep\s*#\s*(\d+)")
COLLECTIVE_OP_PREFIXES = ("record_param_comms", "nccl:", "c10d::", "gloo:", "mpi:", "ucc:")


@dataclass
class Extracted:
    """What one trace file yields; tables are pyarrow, ready for DuckDB."""

    meta: dict
    device: pa.Table
    cpu: pa.Table
    steps: pa.Table
    collectives: pa.Table
    unions: pa.Table  # interval unions per window and set (pipeline/intervals.py)
    islands: pa.Table  # merged compute intervals of the whole trace


def _times(index: int, ev: Event) -> tuple[int, int]:
    """(ts, dur) in integer ns, validated; Decimal keeps every digit of ns-resolution stamps."""
    if ev.ts is None or ev.dur is None:
        raise TraceError(f"event #{index} ({ev.cat} {ev.name!r}): missing {'ts' if ev.ts is None else 'dur'}")
    ts, dur = int(ev.ts.scaleb(3)), int(ev.dur.scaleb(3))
    if not (-INT64_MAX <= ts <= INT64_MAX and 0 <= dur <= INT64_MAX):
        if dur < 0:
            raise TraceError(f"event #{index} ({ev.cat} {ev.name!r}): negative duration {ev.dur} µs")
        raise TraceError(f"event #{index} ({ev.cat} {ev.name!r}): timestamp {ev.ts} µs is beyond "
                         "64-bit nanoseconds")
    return ts, dur


def _int(value, what: str, index: int) -> int | None:
    """An int arg (ints written as strings are accepted); None when absent or not a number."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            return None
    if abs(value) > INT64_MAX:
        raise TraceError(f"event #{index}: {what} {value} is beyond 64 bits")
    return value


def _str(value) -> str | None:
    return None if value is None else str(value)


class _Steps:
    """ProfilerStep intervals, for finding the step an instant belongs to."""

    def __init__(self, rows: list[tuple[int, int, int]]):
        self.rows = sorted(rows, key=lambda r: r[1])  # (step, ts, end)
        self.starts = [r[1] for r in self.rows]

    def at(self, ts: int) -> int | None:
        i = bisect.bisect_right(self.starts, ts) - 1
        for j in range(i, max(i - 4, -1), -1):  # steps do not nest; allow slight overlap
            step, start, end = self.rows[j]
            if start <= ts < end:
                return step
        return None


class _Enclosing:
    """Per-thread sorted CPU intervals; finds those that contain an instant."""

    def __init__(self):
        self.by_tid: dict = {}

    def add(self, tid, ts: int, end: int, item) -> None:
        self.by_tid.setdefault(tid, []).append((ts, end, item))

    def freeze(self) -> None:
        for rows in self.by_tid.values():
            rows.sort(key=lambda r: r[0])
        self.starts = {tid: [r[0] for r in rows] for tid, rows in self.by_tid.items()}

    def containing(self, tid, ts: int, depth: int = 16) -> list:
        """Innermost first; looks back ``depth`` intervals (nesting is shallow)."""
        rows = self.by_tid.get(tid)
        if not rows:
            return []
        i = bisect.bisect_right(self.starts[tid], ts) - 1
        found = []
        for j in range(i, max(i - depth, -1), -1):
            start, end, item = rows[j]
            if start <= ts < end:
                found.append(item)
        return found


class Slim:
    """What is kept of an event once decoded: its category, name, process, thread and args
    (timestamps are converted to ns beside it); the decoded Event itself is dropped."""

    __slots__ = ("cat", "name", "pid", "tid", "args")

    def __init__(self, ev: Event):
        self.cat, self.name, self.pid, self.tid, self.args = ev.cat, ev.name, ev.pid, ev.tid, ev.args


def _needed_on_gpu_trace(cat: str, ev) -> bool:
    """CPU events kept beside GPU activity: launches, steps, collective ops, stream-arg events."""
    name = ev.name or ""
    return (cat in RUNTIME_CATS or "ProfilerStep" in name or cat == "python_function"
            or name.startswith(COLLECTIVE_OP_PREFIXES)
            or (ev.args is not None and ev.args.stream is not None))


def extract(doc: TraceDoc, classifier: Classifier, keep_python: bool = False,
            fractional: bool = False, gpu_trace: bool = True) -> Extracted:
    """``fractional``: some timestamp in the file is written with a decimal point (HTA rounds those).
    ``gpu_trace``: the file has device categories (a byte scan says so); then only the CPU events
    needed beside GPU activity are kept while decoding, which bounds memory."""
    raws = doc.traceEvents or []
    device_evs, cpu_evs = [], []
    lower: dict = {}
    for index, ev in enumerate(iter_events(raws)):
        if ev.ph != "X":
            continue
        cat = lower.get(ev.cat)
        if cat is None:
            cat = lower[ev.cat] = (ev.cat or "").lower()
        if cat in DEVICE_CATS:
            device_evs.append((index, Slim(ev), cat, ev.name or "", *_times(index, ev)))
        elif cat == "trace" or (cat == "python_function" and not keep_python):
            continue
        elif cat == "gpu_user_annotation" and "ProfilerStep" not in (ev.name or ""):
            continue
        elif not gpu_trace or _needed_on_gpu_trace(cat, ev):  # GPU-side ProfilerStep: for HTA
            cpu_evs.append((index, Slim(ev), cat, ev.name or "", *_times(index, ev)))
    if gpu_trace and not device_evs:  # the byte scan was fooled: decode again keeping CPU lanes
        return extract(doc, classifier, keep_python, fractional, gpu_trace=False)
    runtime, step_rows = {}, []
    for index, ev, cat, name, ts, dur in cpu_evs:
        if cat in RUNTIME_CATS and ev.args is not None:
            corr = _int(ev.args.correlation, "correlation", index)
            if corr is not None:
                runtime[corr] = (ts, ev.tid)
        elif cat != "gpu_user_annotation" and "ProfilerStep" in name:
            match = STEP_RE.search(name)
            if match:
                step = _int(int(match.group(1)), "ProfilerStep number", index)
                step_rows.append((step, ts, ts + dur))
    steps = _Steps(step_rows)
    meta = _meta(doc, fractional, len(raws), cpu_evs)
    meta["zero_duration_events"] = sum(1 for e in device_evs if e[5] == 0)
    if device_evs:
        meta["trace_mode"] = "gpu"
        device, collectives = _gpu_tables(device_evs, cpu_evs, runtime, steps, classifier)
    else:
        meta["trace_mode"] = "cpu"
        device, collectives = _cpu_tables(cpu_evs, steps, classifier)
    return Extracted(
        meta=meta,
        device=device,
        cpu=_cpu_table(cpu_evs, cpu_only=not device_evs),
        steps=pa.table({
            "step": pa.array([r[0] for r in steps.rows], pa.int64()),
            "ts_ns": pa.array([r[1] for r in steps.rows], pa.int64()),
            "dur_ns": pa.array([r[2] - r[1] for r in steps.rows], pa.int64()),
        }),
        **_union_tables(device, collectives),
    )


def _union_tables(device: pa.Table, collectives: pa.Table) -> dict:
    """Interval unions, compute islands, and the exposed part of every comm event."""
    starts = device["ts_ns"].to_pylist()
    ends = [s + d for s, d in zip(starts, device["dur_ns"].to_pylist())]
    rows, islands = intervals.window_unions(device["kind"].to_pylist(), starts, ends, device["step"].to_pylist())
    span = dict(zip(device["event_id"].to_pylist(), zip(starts, ends)))
    island_ends = [e for _, e in islands]
    exposed = [intervals.exposed(*span[i], islands, island_ends) for i in collectives["event_id"].to_pylist()]
    return {
        "collectives": collectives.append_column("exposed_ns", pa.array(exposed, pa.int64())),
        "unions": pa.table({
            "step": pa.array([r[0] for r in rows], pa.int64()),
            "set_name": pa.array([r[1] for r in rows], pa.string()),
            "union_ns": pa.array([r[2] for r in rows], pa.int64()),
            "first_ns": pa.array([r[3] for r in rows], pa.int64()),
            "last_ns": pa.array([r[4] for r in rows], pa.int64()),
        }),
        "islands": pa.table({"start_ns": pa.array([i[0] for i in islands], pa.int64()),
                             "end_ns": pa.array([i[1] for i in islands], pa.int64())}),
    }


def _meta(doc: TraceDoc, fractional: bool, num_events: int, cpu_evs) -> dict:
    dist = doc.distributedInfo
    pids: dict = {}
    for _, ev, cat, *_ in cpu_evs[:5000]:
        if isinstance(ev.pid, int):
            pids[ev.pid] = pids.get(ev.pid, 0) + 1
    devices = [d.name for d in (doc.deviceProperties or []) if d.name]
    return {
        "rank": dist.rank if dist else None,
        "world_size": dist.world_size if dist else None,
        "backend": dist.backend if dist else None,
        "nccl_version": dist.nccl_version if dist else None,
        "base_time_ns": doc.baseTimeNanoseconds,
        "host": doc.host_name,
        "pid": max(pids, key=pids.get) if pids else None,
        "device_name": devices[0] if devices else None,
        "ts_fractional": fractional,
        "num_events": num_events,
    }


def _gpu_tables(device_evs, cpu_evs, runtime, steps: _Steps, classifier: Classifier):
    ops = _Enclosing()
    for index, ev, cat, name, ts, dur in cpu_evs:
        if name.startswith(COLLECTIVE_OP_PREFIXES):
            ops.add(ev.tid, ts, ts + dur, (name, ev.args))
    ops.freeze()
    cols = {k: [] for k in ("event_id", "lane", "stream", "device", "cat", "name", "kind",
                            "ts_ns", "dur_ns", "correlation", "step")}
    coll_rows = []
    for index, ev, cat, name, ts, dur in device_evs:
        args = ev.args or Args()
        stream = _int(args.stream, "stream", index)
        corr = _int(args.correlation, "correlation", index)
        kind = classifier.classify("gpu", cat, name)
        launch = runtime.get(corr) if corr is not None else None
        step = steps.at(launch[0] if launch else ts)
        cols["event_id"].append(index)
        cols["lane"].append(f"stream {stream}" if stream is not None else f"tid {ev.tid}")
        cols["stream"].append(stream)
        cols["device"].append(_int(args.device, "device", index))
        cols["cat"].append(ev.cat)
        cols["name"].append(name)
        cols["kind"].append(kind)
        cols["ts_ns"].append(ts)
        cols["dur_ns"].append(dur)
        cols["correlation"].append(corr)
        cols["step"].append(step)
        if kind == "comm":
            enclosing = ops.containing(launch[1], launch[0]) if launch else []
            coll_rows.append(_collective_row(index, name, args, enclosing))
    return _device_table(cols), _collectives_table(coll_rows)


def _collective_row(index: int, kernel_name: str, args: Args, enclosing: list) -> tuple:
    """Metadata from kernel args, else the launching CPU op, else the kernel name."""
    sources = [("kernel_args", args)] if args.collective_name else []
    sources += [("cpu_op", a) for n, a in enclosing if a is not None and a.collective_name]
    names = [n for n, _ in enclosing]
    if sources:
        source, meta = sources[0]
        collective = coll.canonical(meta.collective_name)
    else:
        source, meta = None, Args()
        collective = None
        for n in names:
            if n.startswith(("nccl:", "c10d::")):
                source, collective = "cpu_op_name", coll.canonical(n)
                break
        if collective is None:
            collective = coll.from_kernel_name(kernel_name)
            source = "kernel_name" if collective else None
    return (
        index, collective, _str(meta.pg_name), meta.pg_desc,
        _int(meta.group_size, "Group size", index), meta.dtype,
        _int(meta.in_nelems, "In msg nelems", index), _int(meta.out_nelems, "Out msg nelems", index),
        _int(meta.seq, "Seq", index), source,
    )


def _cpu_tables(cpu_evs, steps: _Steps, classifier: Classifier):
    """CPU-only trace: lanes are threads; comm on gloo/mpi/ucc threads, compute elsewhere."""
    kinds = [classifier.classify("cpu", cat, name) for _, _, cat, name, _, _ in cpu_evs]
    comm_tids = {e[1].tid for e, k in zip(cpu_evs, kinds) if k == "comm"}
    calls = _Enclosing()
    for index, ev, cat, name, ts, dur in cpu_evs:
        if is_collective_call(name):
            calls.add(ev.tid, ts, ts + dur, True)
    calls.freeze()
    cols = {k: [] for k in ("event_id", "lane", "stream", "device", "cat", "name", "kind",
                            "ts_ns", "dur_ns", "correlation", "step")}
    coll_rows = []
    for (index, ev, cat, name, ts, dur), kind in zip(cpu_evs, kinds):
        if kind == "other":
            continue
        if kind == "compute" and (ev.tid in comm_tids or calls.containing(ev.tid, ts)):
            continue
        for key, value in (("event_id", index), ("lane", f"thread {ev.tid}"), ("stream", None),
                           ("device", None), ("cat", ev.cat), ("name", name), ("kind", kind),
                           ("ts_ns", ts), ("dur_ns", dur), ("correlation", None),
                           ("step", steps.at(ts))):
            cols[key].append(value)
        if kind == "comm":
            coll_rows.append((index, coll.canonical(name), None, None, None, None, None, None,
                              None, "cpu_op_name"))
    return _device_table(cols), _collectives_table(coll_rows)


def _device_table(cols: dict) -> pa.Table:
    types = {"event_id": pa.int64(), "lane": pa.string(), "stream": pa.int64(), "device": pa.int64(),
             "cat": pa.string(), "name": pa.string(), "kind": pa.string(), "ts_ns": pa.int64(),
             "dur_ns": pa.int64(), "correlation": pa.int64(), "step": pa.int64()}
    return pa.table({k: pa.array(cols[k], types[k]) for k in types})


COLLECTIVE_COLUMNS = (("event_id", pa.int64()), ("collective", pa.string()), ("pg_name", pa.string()),
                      ("pg_desc", pa.string()), ("group_size", pa.int64()), ("dtype", pa.string()),
                      ("in_nelems", pa.int64()), ("out_nelems", pa.int64()), ("seq", pa.int64()),
                      ("meta_source", pa.string()))


def _collectives_table(rows: list[tuple]) -> pa.Table:
    return pa.table({name: pa.array([r[i] for r in rows], typ)
                     for i, (name, typ) in enumerate(COLLECTIVE_COLUMNS)})


def _cpu_table(cpu_evs, cpu_only: bool) -> pa.Table:
    """Runtime calls, steps, collective ops, kept python_function events and events with a
    stream arg (HTA counts those); on GPU traces ``cpu_evs`` holds only those already."""
    cols = {k: [] for k in ("event_id", "cat", "name", "tid", "ts_ns", "dur_ns",
                            "correlation", "stream")}
    for index, ev, cat, name, ts, dur in cpu_evs:
        if cpu_only and not _needed_on_gpu_trace(cat, ev):
            continue
        args = ev.args
        stream = _int(args.stream, "stream", index) if args is not None else None
        cols["event_id"].append(index)
        cols["cat"].append(ev.cat)
        cols["name"].append(name)
        cols["tid"].append(_str(ev.tid))
        cols["ts_ns"].append(ts)
        cols["dur_ns"].append(dur)
        cols["correlation"].append(_int(args.correlation, "correlation", index) if args else None)
        cols["stream"].append(stream)
    types = {"event_id": pa.int64(), "cat": pa.string(), "name": pa.string(), "tid": pa.string(),
             "ts_ns": pa.int64(), "dur_ns": pa.int64(), "correlation": pa.int64(), "stream": pa.int64()}
    return pa.table({k: pa.array(cols[k], types[k]) for k in types})


RANK_RE = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def rank_from_filename(path: Path) -> int | None:
    match = RANK_RE.search(path.name)
    return int(match.group(1)) if match else None
