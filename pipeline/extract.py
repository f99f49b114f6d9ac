"""Turn one decoded trace into the rows scaletrace stores (runs in a worker process).

Output: :class:`Extracted`, one pyarrow table per per-trace table of the
database (columns as in ``pipeline/schema.sql``, without the trace key), and
the file's :class:`TraceMeta`.  What counts as a device event, a runtime call,
a step or a collective op is ``pipeline/vocabulary.py``.
"""

from __future__ import annotations

import bisect
import re
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa

from scaletrace.pipeline import collectives as coll
from scaletrace.pipeline import intervals, limits, oneline
from scaletrace.pipeline.classify import Classifier, is_collective_call
from scaletrace.pipeline.decode import INT64_MAX, Args, Event, TraceDoc, TraceError, iter_events
from scaletrace.pipeline.schema import PER_TRACE_TABLES
from scaletrace.pipeline.vocabulary import (COLLECTIVE_NAME_PREFIXES, COLLECTIVE_OP_PREFIXES, CPU_OP_CAT,
                                            FLOP_OP_RE, GPU_ANNOTATION_CAT, KINDS, PROFILER_CAT, PYTHON_CAT,
                                            RUNTIME_CATS, STEP_NAME, STEP_RE)


@dataclass
class TraceMeta:
    """Facts about one trace file, for its ``traces`` row (``pipeline/schema.sql``)."""

    rank: int | None  # distributedInfo.rank (ingest falls back to run.json, then the file name)
    world_size: int | None
    backend: str | None
    nccl_version: str | None
    base_time_ns: int | None  # baseTimeNanoseconds
    host: str | None
    pid: int | None  # the most frequent CPU process id
    device_name: str | None  # the first deviceProperties name
    ts_fractional: bool  # some timestamp has a decimal point (HTA then rounds to µs)
    num_events: int  # events in traceEvents
    trace_mode: str  # "gpu" (device events present) or "cpu" (CPU-only: lanes are threads)
    zero_duration_events: int  # device events of zero duration (kept; worth a note)


@dataclass
class Extracted:
    """What one trace file yields: its facts, and a pyarrow table per per-trace table of the
    database, named as that table (columns as in ``pipeline/schema.sql``, without the trace key)."""

    meta: TraceMeta
    device_events: pa.Table  # GPU events, or CPU lanes on CPU-only traces
    cpu_events: pa.Table  # runtime calls, step annotations, collective ops
    steps: pa.Table
    collectives: pa.Table
    interval_unions: pa.Table  # per window and set of kinds (pipeline/intervals.py)
    compute_islands: pa.Table  # merged compute intervals of the whole trace

    TABLES: ClassVar[tuple[str, ...]] = PER_TRACE_TABLES

    def tables(self) -> dict[str, pa.Table]:
        return {name: getattr(self, name) for name in self.TABLES}


def _times(index: int, ev: Event) -> tuple[int, int]:
    """(ts, dur) in integer ns, validated; Decimal keeps every digit of ns-resolution stamps."""
    if ev.ts is None or ev.dur is None:
        raise TraceError(f"event #{index} ({ev.cat} {ev.name!r}): missing {'ts' if ev.ts is None else 'dur'}")
    try:  # the exponent is checked before int(): 1e999990 would take tens of seconds
        ts, dur = limits.ns_from_us(ev.ts), limits.ns_from_us(ev.dur)
    except limits.LimitError as exc:
        raise TraceError(f"event #{index} ({ev.cat} {oneline.one_line(repr(ev.name), 80)}): ts or dur {exc}") from None
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

    def at_many(self, times: np.ndarray) -> pa.Array:
        """The step each instant falls in (the latest-starting step that contains it; steps do not
        nest, slight overlaps are allowed), as a nullable int64 Arrow array."""
        found = np.full(len(times), NONE, dtype=np.int64)
        if self.rows:
            starts = np.array(self.starts, dtype=np.int64)
            ends = np.array([r[2] for r in self.rows], dtype=np.int64)
            numbers = np.array([r[0] for r in self.rows], dtype=np.int64)
            i = np.searchsorted(starts, times, side="right") - 1
            for back in range(4):  # look back a few steps in case of overlap
                j = i - back
                ok = (found == NONE) & (j >= 0)
                jj = np.maximum(j, 0)
                ok &= (starts[jj] <= times) & (times < ends[jj])
                found[ok] = numbers[jj[ok]]
        return pa.array(found, mask=found == NONE)

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


class _Columns:
    """Kept events as columns: one shared str per distinct name, category and thread, ints in
    arrays; the decoded Event is dropped (bounded memory for large traces).  ``args`` keeps the
    Args of the few events that carry collective metadata, by position."""

    def __init__(self):
        self.index, self.ts, self.dur = array("q"), array("q"), array("q")
        self.cat_raw, self.cat, self.name, self.pid, self.tid = [], [], [], [], []
        self.stream, self.device = [], []
        self.corr = array("q")  # NONE where absent: most events have one, so no int objects
        self.args: dict[int, Args] = {}
        self.shapes: dict[int, tuple] = {}  # position -> (Input Dims, Input type, Concrete Inputs) JSON

    def __len__(self) -> int:
        return len(self.index)

    def add(self, index: int, ev: Event, cat: str, shared: dict) -> None:
        ts, dur = _times(index, ev)
        a = ev.args
        stream = device = corr = None
        if a is not None:
            stream = _int(a.stream, "stream", index)
            device = _int(a.device, "device", index)
            corr = _int(a.correlation, "correlation", index)
            if a.collective_name is not None or a.pg_name is not None or a.in_nelems is not None:
                self.args[len(self.index)] = a
            if len(a.input_dims) and FLOP_OP_RE.match(ev.name or ""):
                self.shapes[len(self.index)] = tuple(bytes(r).decode() or None for r in
                                                     (a.input_dims, a.input_types, a.concrete_inputs))
        self.index.append(index)
        self.ts.append(ts)
        self.dur.append(dur)
        self.cat_raw.append(shared.setdefault(ev.cat, ev.cat))
        self.cat.append(cat)
        name = ev.name or ""
        self.name.append(shared.setdefault(name, name))
        self.pid.append(shared.setdefault(ev.pid, ev.pid))
        self.tid.append(shared.setdefault(ev.tid, ev.tid))
        self.stream.append(stream)
        self.device.append(device)
        self.corr.append(NONE if corr is None else corr)


NONE = -(2**63)  # "absent" in int arrays: _int rejects every value this far out


def _nullable(values) -> pa.Array:
    """An int64 Arrow array from an array('q') where NONE means null."""
    data = np.frombuffer(values, dtype=np.int64)
    return pa.array(data, mask=data == NONE)


def _int64(values) -> pa.Array:
    """A non-null int64 Arrow array from an array('q'), without a per-item conversion."""
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def _needed_on_gpu_trace(cat: str, name: str, stream) -> bool:
    """CPU events kept beside GPU activity: launches, steps, collective ops, stream-arg events,
    FLOP-counted op candidates (with their shapes)."""
    return (cat in RUNTIME_CATS or STEP_NAME in name or cat == PYTHON_CAT
            or name.startswith(COLLECTIVE_OP_PREFIXES) or stream is not None
            or (cat == CPU_OP_CAT and FLOP_OP_RE.match(name) is not None))


def extract(doc: TraceDoc, classifier: Classifier, keep_python: bool = False,
            fractional: bool = False, gpu_trace: bool = True) -> Extracted:
    """``fractional``: some timestamp in the file is written with a decimal point (HTA rounds those).
    ``gpu_trace``: the file has device categories (``classifier.device_scan`` says so); then only the
    CPU events needed beside GPU activity are kept while decoding, which bounds memory.  Device
    categories are ``classifier.device_categories``: the vocabulary's and those its rules name."""
    raws = doc.traceEvents or []
    device_cats = classifier.device_categories
    dev, cpu = _Columns(), _Columns()
    lower: dict = {}
    shared: dict = {None: None}  # one object per distinct name, category, pid, tid
    for index, ev in enumerate(iter_events(raws)):
        if ev.ph != "X":
            continue
        cat = lower.get(ev.cat)
        if cat is None:
            cat = lower[ev.cat] = (ev.cat or "").lower()
        if cat in device_cats:
            dev.add(index, ev, cat, shared)
        elif index == 0 and gpu_trace and cat != PROFILER_CAT:
            # HTA links a kernel whose correlation has no CPU call to the trace's first
            # event (index_correlation 0): hta_events needs that event's time
            cpu.add(index, ev, cat, shared)
        elif cat == PROFILER_CAT or (cat == PYTHON_CAT and not keep_python):
            continue
        elif cat == GPU_ANNOTATION_CAT and STEP_NAME not in (ev.name or ""):
            continue
        elif not gpu_trace or _needed_on_gpu_trace(cat, ev.name or "", ev.args and ev.args.stream):
            cpu.add(index, ev, cat, shared)  # (GPU-side ProfilerSteps are kept for HTA's filter)
    if gpu_trace and not len(dev):  # the byte scan was fooled: decode again keeping CPU lanes
        return extract(doc, classifier, keep_python, fractional, gpu_trace=False)
    num_events = len(raws)
    doc.traceEvents = raws = None  # the raw slices (and the file's bytes) are no longer needed
    step_rows = []
    for j, cat in enumerate(cpu.cat):
        if cat != GPU_ANNOTATION_CAT and STEP_NAME in cpu.name[j] and cat not in RUNTIME_CATS:
            match = STEP_RE.search(cpu.name[j])
            if match:
                try:
                    step = limits.int_from_digits(match.group(1), "ProfilerStep number")
                except limits.LimitError as exc:
                    raise TraceError(f"event #{cpu.index[j]}: {exc}") from None
                step_rows.append((step, cpu.ts[j], cpu.ts[j] + cpu.dur[j]))
    steps = _Steps(step_rows)
    meta = TraceMeta(**_doc_facts(doc, cpu), ts_fractional=fractional, num_events=num_events,
                     trace_mode="gpu" if len(dev) else "cpu", zero_duration_events=dev.dur.count(0))
    if len(dev):
        device, coll_rows, spans = _gpu_tables(dev, cpu, steps, classifier)
    else:
        device, coll_rows, spans = _cpu_tables(cpu, steps, classifier)
    return Extracted(
        meta=meta,
        device_events=device,
        cpu_events=_cpu_table(cpu, cpu_only=not len(dev)),
        steps=pa.table({
            "step": pa.array([r[0] for r in steps.rows], pa.int64()),
            "ts_ns": pa.array([r[1] for r in steps.rows], pa.int64()),
            "dur_ns": pa.array([r[2] - r[1] for r in steps.rows], pa.int64()),
        }),
        **_union_tables(device, _collectives_table(coll_rows), spans),
    )


def _union_tables(device: pa.Table, collectives: pa.Table, spans: list[tuple[int, int]]) -> dict:
    """Interval unions, compute islands, and the exposed part of every comm event (``spans``)."""
    starts = device["ts_ns"].to_numpy()
    ends = starts + device["dur_ns"].to_numpy()
    kind_codes = {k: i for i, k in enumerate(KINDS)}
    other = kind_codes["other"]
    kinds = np.array([kind_codes.get(k, other) for k in device["kind"].to_pylist()], dtype=np.int8)
    step = device["step"]
    has_step = step.is_valid().to_numpy(zero_copy_only=False)
    steps = step.fill_null(0).to_numpy()
    rows, (isl_start, isl_end) = intervals.window_unions(kinds, starts, ends, steps, has_step)
    span_start = np.array([s for s, _ in spans], dtype=np.int64)
    span_end = np.array([e for _, e in spans], dtype=np.int64)
    exposed = intervals.exposed(span_start, span_end, isl_start, isl_end)
    return {
        "collectives": collectives.append_column("exposed_ns", pa.array(exposed, pa.int64()))
                                  .append_column("ts_ns", pa.array(span_start, pa.int64()))
                                  .append_column("dur_ns", pa.array(span_end - span_start, pa.int64()))
                                  .append_column("ordinal", _ordinals(collectives, span_start)),
        "interval_unions": pa.table({
            "step": pa.array([r[0] for r in rows], pa.int64()),
            "set_name": pa.array([r[1] for r in rows], pa.string()),
            "union_ns": pa.array([r[2] for r in rows], pa.int64()),
            "first_ns": pa.array([r[3] for r in rows], pa.int64()),
            "last_ns": pa.array([r[4] for r in rows], pa.int64()),
        }),
        "compute_islands": pa.table({"start_ns": pa.array(isl_start, pa.int64()),
                                     "end_ns": pa.array(isl_end, pa.int64())}),
    }


def _ordinals(collectives: pa.Table, starts: np.ndarray) -> pa.Array:
    """Each comm event's position (0, 1, ...) among the rank's events of its process group, in
    start order: the sequence used to match collectives across ranks when the trace has none."""
    groups = [g if g is not None else "?" for g in collectives["pg_name"].to_pylist()]
    event_ids = collectives["event_id"].to_pylist()
    ordinal = [0] * len(groups)
    seen: dict = {}
    for i in sorted(range(len(groups)), key=lambda i: (starts[i], event_ids[i])):
        ordinal[i] = seen.get(groups[i], 0)
        seen[groups[i]] = ordinal[i] + 1
    return pa.array(ordinal, pa.int64())


def _doc_facts(doc: TraceDoc, cpu: _Columns) -> dict:
    """The TraceMeta fields the document's header (and its CPU pids) tell."""
    dist = doc.distributedInfo
    pids: dict = {}
    for pid in cpu.pid[:5000]:
        if isinstance(pid, int):
            pids[pid] = pids.get(pid, 0) + 1
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
    }


def _launches(dev: _Columns, cpu: _Columns) -> np.ndarray:
    """For each device event, the position in ``cpu`` of the runtime call that launched it
    (same correlation; the last such call in the file), or -1."""
    is_runtime = np.fromiter((c in RUNTIME_CATS for c in cpu.cat), dtype=bool, count=len(cpu))
    cpu_corr = np.frombuffer(cpu.corr, dtype=np.int64)
    positions = np.flatnonzero(is_runtime & (cpu_corr != NONE))
    order = np.argsort(cpu_corr[positions], kind="stable")
    keys, positions = cpu_corr[positions][order], positions[order]
    wanted = np.frombuffer(dev.corr, dtype=np.int64)
    k = np.searchsorted(keys, wanted, side="right") - 1
    hit = (k >= 0) & (wanted != NONE)
    hit[hit] = keys[k[hit]] == wanted[hit]
    return np.where(hit, positions[np.maximum(k, 0)] if len(keys) else -1, -1)


def _gpu_tables(dev: _Columns, cpu: _Columns, steps: _Steps, classifier: Classifier):
    """The device table (GPU events), collective rows and the (start, end) of each comm event."""
    ops = _Enclosing()
    for j, name in enumerate(cpu.name):
        if name.startswith(COLLECTIVE_OP_PREFIXES):
            ops.add(cpu.tid[j], cpu.ts[j], cpu.ts[j] + cpu.dur[j], (name, cpu.args.get(j)))
    ops.freeze()
    launch = _launches(dev, cpu)
    dev_ts = np.frombuffer(dev.ts, dtype=np.int64)
    cpu_ts = np.frombuffer(cpu.ts, dtype=np.int64)
    # a device event belongs to the step of its launch, else to the step its start falls in
    step = steps.at_many(np.where(launch >= 0, cpu_ts[np.maximum(launch, 0)] if len(cpu_ts) else 0, dev_ts))
    lanes: dict = {}
    lane, kind = [], []
    coll_rows, spans = [], []
    for i in range(len(dev)):
        k = classifier.classify("gpu", dev.cat[i], dev.name[i])
        stream = dev.stream[i]
        key = ("stream", stream) if stream is not None else ("tid", dev.tid[i])
        lane.append(lanes.get(key) or lanes.setdefault(key, f"{key[0]} {key[1]}"))
        kind.append(k)
        if k == "comm":
            j = int(launch[i])
            enclosing = ops.containing(cpu.tid[j], cpu.ts[j]) if j >= 0 else []
            coll_rows.append(_collective_row(dev.index[i], dev.name[i], dev.args.get(i) or Args(), enclosing))
            spans.append((dev.ts[i], dev.ts[i] + dev.dur[i]))
    device = _device_table(_int64(dev.index), lane, dev.stream, dev.device, dev.cat_raw, dev.name, kind,
                           _int64(dev.ts), _int64(dev.dur), _nullable(dev.corr), step)
    return device, coll_rows, spans


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
            if n.startswith(COLLECTIVE_NAME_PREFIXES):
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


def _cpu_tables(cpu: _Columns, steps: _Steps, classifier: Classifier):
    """CPU-only trace: lanes are threads; comm on gloo/mpi/ucc threads, compute elsewhere.

    A collective call (``c10d::allreduce_``) and what runs inside it is dispatch, not compute;
    a wait for a collective (``_c10d_functional::wait_tensor``: the sync rule) is kept as ``sync``
    and what runs inside it is not compute either (DESIGN.md, "Classification").  An op that
    encloses a call or a wait (``aten::add`` around a DTensor wait) is stored as its pieces
    outside them, so that the thread's blocked time never counts as compute."""
    kinds = [classifier.classify("cpu", cat, name) for cat, name in zip(cpu.cat, cpu.name)]
    comm_tids = {tid for tid, k in zip(cpu.tid, kinds) if k == "comm"}
    calls = _Enclosing()
    for j, name in enumerate(cpu.name):
        if kinds[j] == "sync" or is_collective_call(name):
            calls.add(cpu.tid[j], cpu.ts[j], cpu.ts[j] + cpu.dur[j], True)
    calls.freeze()
    blocked = _Blocked(calls)
    rows = []  # (position in cpu, ts, dur)
    for j, k in enumerate(kinds):
        if k == "other":
            continue
        if k != "compute":
            rows.append((j, cpu.ts[j], cpu.dur[j]))
        elif cpu.tid[j] not in comm_tids and not calls.containing(cpu.tid[j], cpu.ts[j]):
            rows += [(j, a, b - a) for a, b in blocked.outside(cpu.tid[j], cpu.ts[j], cpu.ts[j] + cpu.dur[j])]
    coll_rows = [(cpu.index[j], coll.canonical(cpu.name[j]), None, None, None, None, None, None, None,
                  "cpu_op_name") for j, _, _ in rows if kinds[j] == "comm"]
    spans = [(ts, ts + dur) for j, ts, dur in rows if kinds[j] == "comm"]
    device = _device_table(
        [cpu.index[j] for j, _, _ in rows], [f"thread {cpu.tid[j]}" for j, _, _ in rows], [None] * len(rows),
        [None] * len(rows), [cpu.cat_raw[j] for j, _, _ in rows], [cpu.name[j] for j, _, _ in rows],
        [kinds[j] for j, _, _ in rows], [ts for _, ts, _ in rows], [dur for _, _, dur in rows],
        [None] * len(rows), steps.at_many(np.array([ts for _, ts, _ in rows], dtype=np.int64)))
    return device, coll_rows, spans


class _Blocked:
    """Per thread, the merged intervals in which the thread is blocked in a collective call or wait."""

    def __init__(self, calls: _Enclosing):
        self.by_tid = {}
        for tid, items in calls.by_tid.items():
            merged = intervals.merge([(s, e) for s, e, _ in items])
            self.by_tid[tid] = ([s for s, _ in merged], [e for _, e in merged])

    def outside(self, tid, ts: int, end: int) -> list[tuple[int, int]]:
        """[ts, end) minus the thread's blocked intervals (the whole interval when none overlap)."""
        starts, ends = self.by_tid.get(tid, ((), ()))
        i = bisect.bisect_right(ends, ts)
        pieces, cursor = [], ts
        while i < len(starts) and starts[i] < end:
            if starts[i] > cursor:
                pieces.append((cursor, starts[i]))
            cursor = max(cursor, ends[i])
            i += 1
        if cursor < end or not pieces and cursor == end == ts:  # zero-length events stay as they are
            pieces.append((cursor, end))
        return pieces


DEVICE_COLUMNS = (("event_id", pa.int64()), ("lane", pa.string()), ("stream", pa.int64()),
                  ("device", pa.int64()), ("cat", pa.string()), ("name", pa.string()), ("kind", pa.string()),
                  ("ts_ns", pa.int64()), ("dur_ns", pa.int64()), ("correlation", pa.int64()),
                  ("step", pa.int64()))


def _device_table(*columns) -> pa.Table:
    return pa.table({name: col if isinstance(col, pa.Array) else pa.array(col, typ)
                     for (name, typ), col in zip(DEVICE_COLUMNS, columns)})


COLLECTIVE_COLUMNS = (("event_id", pa.int64()), ("collective", pa.string()), ("pg_name", pa.string()),
                      ("pg_desc", pa.string()), ("group_size", pa.int64()), ("dtype", pa.string()),
                      ("in_nelems", pa.int64()), ("out_nelems", pa.int64()), ("seq", pa.int64()),
                      ("meta_source", pa.string()))


def _collectives_table(rows: list[tuple]) -> pa.Table:
    return pa.table({name: pa.array([r[i] for r in rows], typ)
                     for i, (name, typ) in enumerate(COLLECTIVE_COLUMNS)})


def _cpu_table(cpu: _Columns, cpu_only: bool) -> pa.Table:
    """Runtime calls, steps, collective ops, kept python_function events and events with a
    stream arg (HTA counts those); on GPU traces ``cpu`` holds only those already."""
    if not cpu_only:
        return pa.table({"event_id": _int64(cpu.index), "cat": pa.array(cpu.cat_raw, pa.string()),
                         "name": pa.array(cpu.name, pa.string()),
                         "tid": pa.array([_str(t) for t in cpu.tid], pa.string()),
                         "ts_ns": _int64(cpu.ts), "dur_ns": _int64(cpu.dur),
                         "correlation": _nullable(cpu.corr), "stream": pa.array(cpu.stream, pa.int64()),
                         **_shape_columns(cpu, range(len(cpu)))})
    keep = [j for j in range(len(cpu)) if _needed_on_gpu_trace(cpu.cat[j], cpu.name[j], cpu.stream[j])]
    return pa.table({
        "event_id": pa.array([cpu.index[j] for j in keep], pa.int64()),
        "cat": pa.array([cpu.cat_raw[j] for j in keep], pa.string()),
        "name": pa.array([cpu.name[j] for j in keep], pa.string()),
        "tid": pa.array([_str(cpu.tid[j]) for j in keep], pa.string()),
        "ts_ns": pa.array([cpu.ts[j] for j in keep], pa.int64()),
        "dur_ns": pa.array([cpu.dur[j] for j in keep], pa.int64()),
        "correlation": pa.array([None if cpu.corr[j] == NONE else cpu.corr[j] for j in keep], pa.int64()),
        "stream": pa.array([cpu.stream[j] for j in keep], pa.int64()),
        **_shape_columns(cpu, keep),
    })


def _shape_columns(cpu: _Columns, positions) -> dict:
    """input_dims, input_types, concrete_inputs (JSON text; NULL for events without shapes)."""
    rows = [cpu.shapes.get(j, (None, None, None)) for j in positions]
    return {name: pa.array([r[i] for r in rows], pa.string())
            for i, name in enumerate(("input_dims", "input_types", "concrete_inputs"))}


RANK_RE = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def rank_from_filename(path: Path) -> int | None:
    match = RANK_RE.search(path.name)
    return int(match.group(1)) if match else None
