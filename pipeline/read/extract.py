"""Turn one trace into the rows scaletrace stores (runs in a worker process).

Stage 1 (``pipeline/read/columns.py``) reads the kept events as columns, with the compiled scanner
or the reference msgspec reader; stage 2 (:func:`build`, here) makes the tables from those
columns with numpy and Arrow, deciding once per distinct category, name, stream or thread.

Output: :class:`Extracted`, one pyarrow table per per-trace table of the
database (columns as in ``pipeline/store/schema.sql``, without the trace key), and
the file's :class:`TraceMeta`.  What counts as a device event, a runtime call,
a step or a collective op is ``pipeline/read/vocabulary.py``.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pyarrow as pa

from scaletrace.pipeline.read import collectives as coll
from scaletrace.pipeline.read import arrays, columns, intervals, launchers
from scaletrace.pipeline.common import limits
from scaletrace.pipeline.read.classify import Classifier, category_notes, is_collective_call, issues_collective
from scaletrace.pipeline.read.columns import flags_by_code as by_code
from scaletrace.pipeline.read.decode import Args, TraceError, check_utf8_text, decode
from scaletrace.pipeline.read.vocabulary import (PER_TRACE_TABLES, COLLECTIVE_NAME_PREFIXES, COLLECTIVE_OP_PREFIXES, CPU_OP_CATS,
                                                 FLOP_OP_RE, GPU_ANNOTATION_CAT, KINDS, PYTHON_CAT,
                                                 RUNTIME_CATS, STEP_NAME, STEP_RE)

# Which stage 1 reads traces (README, "The compiled extractor"): "compiled (simdjson X.Y.Z)" when
# pipeline/read/_scan.cpp is built and SCALETRACE_EXTRACTOR is not "python", else "python (msgspec)".
EXTRACTOR = columns.active_extractor()


@dataclass
class TraceMeta:
    """Facts about one trace file, for its ``traces`` row (``pipeline/store/schema.sql``)."""

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
    notes: tuple = ()  # about categories the vocabulary does not know (classify.category_notes)


@dataclass
class Extracted:
    """What one trace file yields: its facts, and a pyarrow table per per-trace table of the
    database, named as that table (columns as in ``pipeline/store/schema.sql``, without the trace key)."""

    meta: TraceMeta
    device_events: pa.Table  # GPU events, or CPU lanes on CPU-only traces
    cpu_events: pa.Table  # runtime calls, step annotations, collective ops
    steps: pa.Table
    collectives: pa.Table
    interval_unions: pa.Table  # per window and set of kinds (pipeline/read/intervals.py)
    compute_islands: pa.Table  # merged compute intervals of the whole trace

    TABLES: ClassVar[tuple[str, ...]] = PER_TRACE_TABLES

    # A parse worker's result is pickled with each table packed (arrays.Packed: a compressed Arrow IPC
    # stream, ~0.15 x its size for the CPU-op mixes), and the writing process keeps it packed until it
    # inserts it, one table at a time (table()).  Pickled as they were, the tables were copied whole
    # into one growing pickle in the worker (~2 x them for a moment) and received whole beside the
    # tables they became in the writing process (docs: Robustness, "Memory").
    def table(self, name: str) -> pa.Table:
        """The table ``name``; a packed one is unpacked at each call (the caller drops it once used)."""
        value = getattr(self, name)
        return value.unpack() if isinstance(value, arrays.Packed) else value

    def tables(self) -> dict[str, pa.Table]:
        return {name: self.table(name) for name in self.TABLES}

    def nbytes(self) -> int:
        """The tables' buffers, packed or not, as they take memory once unpacked."""
        return sum(v.nbytes if isinstance(v, arrays.Packed) else v.get_total_buffer_size()
                   for v in map(functools.partial(getattr, self), self.TABLES))

    def __reduce__(self):
        packed = tuple(v if isinstance(v, arrays.Packed) else arrays.Packed(v)
                       for v in map(functools.partial(getattr, self), self.TABLES))
        return _received, (self.meta, packed)


def _received(meta: TraceMeta, packed: tuple) -> Extracted:
    """An unpickled Extracted: its tables stay packed until :meth:`Extracted.table` is called."""
    return Extracted(meta, **dict(zip(Extracted.TABLES, packed)))


def _int(value, what: str, index: int) -> int | None:
    value = columns.to_int(value, what, index)
    why = limits.check_arg(what, value)
    if why:
        raise TraceError(f"event #{index}: {why}")
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
        return _nullable(found)

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


NONE = columns.NONE


def _nullable(data: np.ndarray) -> pa.Array:
    """A nullable int64 Arrow array from int64 values where NONE means null.  Built from buffers:
    ``pa.array(data, mask=...)`` imports pandas (0.3 s in each worker process)."""
    data = np.ascontiguousarray(data, dtype=np.int64)
    valid = data != NONE
    nulls = len(data) - int(valid.sum())
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(pa.int64(), len(data), [bitmap, pa.py_buffer(data)], null_count=nulls)


def _int64(data: np.ndarray) -> pa.Array:
    data = np.ascontiguousarray(data, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(data), [None, pa.py_buffer(data)])


def _strings(codes: np.ndarray, values: list) -> pa.Array:
    """A string column from codes into ``values`` (one Python str per distinct value), kept
    dictionary-encoded: a row costs 4 bytes in the worker, in the result sent to the writing
    process and in DuckDB's insert, not the string's length + 4."""
    return arrays.dictionary(codes, values)


_text, _ints, _array = arrays.text, arrays.int64, arrays.array  # pa.array imports pandas: pipeline/read/arrays.py


def read(doc, classifier: Classifier, keep_python: bool = False, gpu_trace: bool = True) -> columns.Kept:
    """Stage 1: the kept events of ``doc`` (a decoded TraceDoc: the reference; or what the
    compiled scanner read, ``columns.Scanned``) as columns."""
    if isinstance(doc, columns.Scanned):
        return doc.kept(classifier.device_categories, keep_python, gpu_trace)
    return columns.read_python(doc, classifier.device_categories, keep_python, gpu_trace)


def extract(doc, classifier: Classifier, keep_python: bool = False,
            fractional: bool = False, gpu_trace: bool = True) -> Extracted:
    """``doc``: a TraceDoc from ``decode`` or a ``columns.Scanned`` from the compiled scanner
    (:func:`scan_or_decode` picks).  ``fractional``: some timestamp in the file is written with a
    decimal point (HTA rounds those).  ``gpu_trace``: the file has device categories
    (``classifier.device_scan`` says so); then only the CPU events needed beside GPU activity are
    kept, which bounds memory.  Device categories are ``classifier.device_categories``: the
    vocabulary's and those its rules name."""
    try:
        extracted = build(read(doc, classifier, keep_python, gpu_trace), classifier, fractional)
        if limits.over_budget():
            raise MemoryError
        return extracted
    except MemoryError:
        _over_budget()
        raise
    finally:
        limits.parse_done()


def _over_budget() -> None:
    """A MemoryError of a parse past its memory cap (limits.parse_budget) is the file's line."""
    why = limits.over_budget()
    limits.parse_done()
    if why:
        raise TraceError(why) from None


def scan_padding() -> int:
    """Bytes the active extractor wants readable after a file's JSON (``limits.padded``): simdjson's
    padding for the compiled scanner, which then reads the file's buffer in place; 0 for the reference."""
    return columns.padding() if columns.active_extractor().startswith("compiled") else 0


def scan_or_decode(data: bytes, extractor: str | None = None, utf8_checked: bool = True,
                   buffer: bytearray | None = None, device_categories: Iterable[str] = ()):
    """The compiled scanner's columns when it is active (``EXTRACTOR``, ``SCALETRACE_EXTRACTOR``)
    and takes the file; else the reference's msgspec decode (``decode.decode``).

    ``utf8_checked=False``: ``data`` is not yet checked to be UTF-8 (``unpack(check_utf8=False)``).
    The scanner validates UTF-8 itself (simdjson's stage 1) and refuses invalid text, so the
    check (0.2 s per 150 MB) runs only before the reference decodes, which then names the byte.
    ``buffer``: ``data`` is its first bytes, with ``scan_padding()`` bytes after them.
    ``device_categories``: what the scanner's ``prescans`` look for (ingest's)."""
    limits.parse_budget(len(data))  # in a parse worker: the watched cap of this file's memory
    try:
        if (extractor or columns.active_extractor()).startswith("compiled") and columns.compiled_available():
            scanned = columns.scan(data, buffer, device_categories)
            if scanned is not None and not limits.over_budget():
                return scanned
        if not utf8_checked:
            check_utf8_text(data)
        if limits.over_budget():  # the scanner stopped at the cap (std::bad_alloc): the reference would too
            raise MemoryError
        doc = decode(data)
        if limits.over_budget():  # msgspec holds the GIL: the peak is known afterwards
            raise MemoryError
        return doc
    except MemoryError:
        _over_budget()
        raise
    except BaseException:
        limits.parse_done()
        raise


def build(kept: columns.Kept, classifier: Classifier, fractional: bool) -> Extracted:
    """Stage 2: the tables, from the kept columns (per-distinct decisions, numpy / Arrow).  The kept
    columns are released (``kept`` emptied) once the tables that read them are made: the interval
    unions, the last and largest step, run without them."""
    dev, cpu, vocab = kept.dev, kept.cpu, kept.vocab
    for side in (dev, cpu):
        _check_computable(side, vocab)
    steps = _Steps(_step_rows(cpu, vocab))
    meta = TraceMeta(**_doc_facts(kept.doc, cpu, vocab), ts_fractional=fractional, num_events=kept.num_events,
                     trace_mode="gpu" if len(dev) else "cpu", zero_duration_events=int((dev.dur == 0).sum()),
                     notes=category_notes(kept.found, kept.unplaced, bool(len(dev))))
    if len(dev):
        device, collectives, spans = _gpu_tables(dev, cpu, vocab, steps, classifier)
    else:
        device, collectives, spans = _cpu_tables(cpu, vocab, steps, classifier)
    cpu_events = _cpu_table(cpu, vocab, cpu_only=not len(dev))
    kept.dev = kept.cpu = dev = cpu = None
    return Extracted(
        meta=meta,
        device_events=device,
        cpu_events=cpu_events,
        steps=pa.table({
            "step": _ints([r[0] for r in steps.rows]),
            "ts_ns": _ints([r[1] for r in steps.rows]),
            "dur_ns": _ints([r[2] - r[1] for r in steps.rows]),
        }),
        **_union_tables(device, collectives, *spans),
    )


def _check_computable(side: columns.Side, vocab: columns.Vocab) -> None:
    """Refuse the file when a value would overflow a query's arithmetic (``limits``
    item 2): one run's bad value must never break the queries of every run in the database."""
    bad = limits.outside_times(side.ts, side.dur)
    if len(bad):
        j = int(bad[0])
        raise TraceError(f"event #{int(side.index[j])} ({vocab.cats[side.cat[j]]} {vocab.names[side.name[j]]!r}): "
                         f"starts at {int(side.ts[j])} ns and lasts {int(side.dur[j])} ns, outside the times the "
                         f"queries compute with ({limits.TIME_MIN_NS:,} to {limits.TIME_MAX_NS:,} ns)")
    checked: dict = {}
    for position, (dims, _, concrete) in side.shapes.items():  # one check per distinct text
        why = checked.get((dims, concrete), "")
        if why == "":
            why = checked[(dims, concrete)] = limits.check_shape_text(dims, concrete)
        if why:
            raise TraceError(f"event #{int(side.index[position])} ({vocab.names[side.name[position]]!r}): {why}")


def _step_rows(cpu: columns.Side, vocab: columns.Vocab) -> list[tuple[int, int, int]]:
    """(step, ts, end) of the ProfilerStep annotations among the CPU events, in file order."""
    annotation = by_code(vocab.lower, lambda c: c == GPU_ANNOTATION_CAT or c in RUNTIME_CATS)[cpu.cat]
    candidate = ~annotation & by_code(vocab.names, lambda n: STEP_NAME in n)[cpu.name]
    rows = []
    for j in np.flatnonzero(candidate).tolist():
        match = STEP_RE.search(vocab.names[cpu.name[j]])
        if match:
            try:
                step = limits.int_from_digits(match.group(1), "ProfilerStep number")
            except limits.LimitError as exc:
                raise TraceError(f"event #{int(cpu.index[j])}: {exc}") from None
            ts, dur = int(cpu.ts[j]), int(cpu.dur[j])
            rows.append((step, ts, ts + dur))
    return rows


def _union_tables(device: pa.Table, collectives: pa.Table, span_start: np.ndarray, span_end: np.ndarray) -> dict:
    """Interval unions, compute islands, and the exposed part of every comm event (its span:
    ``span_start`` to ``span_end``, one per collectives row)."""
    starts = arrays.values(device["ts_ns"])
    ends = starts + arrays.values(device["dur_ns"])
    codes, names = arrays.encoded(device["kind"])
    kinds = np.array([KINDS.index(k) if k in KINDS else KINDS.index("other") for k in names] or [0],
                     dtype=np.int8)[codes]
    step = device["step"]
    has_step = arrays.valid(step)
    steps = np.where(has_step, arrays.values(step), 0)
    unions, (isl_start, isl_end) = intervals.window_unions(kinds, starts, ends, steps, has_step)
    exposed = intervals.exposed(span_start, span_end, isl_start, isl_end)
    return {
        "collectives": collectives.append_column("exposed_ns", _int64(exposed))
                                  .append_column("ts_ns", _int64(span_start))
                                  .append_column("dur_ns", _int64(span_end - span_start))
                                  .append_column("ordinal", _ordinals(collectives, span_start)),
        "interval_unions": pa.table({
            "step": arrays.numeric(unions.step, unions.has_step),
            "set_name": arrays.decoded(unions.set_code, list(intervals.SET_NAMES)),
            "union_ns": _int64(unions.union_ns),
            "first_ns": _int64(unions.first_ns),
            "last_ns": _int64(unions.last_ns),
        }),
        "compute_islands": pa.table({"start_ns": _int64(isl_start), "end_ns": _int64(isl_end)}),
    }


def _ordinals(collectives: pa.Table, starts: np.ndarray) -> pa.Array:
    """Each comm event's position (0, 1, ...) among the rank's events of its process group, in
    start order (then event id): the sequence used to match collectives across ranks when the trace
    has none.  Events without a process group name form one group, with those named "?"."""
    n = collectives.num_rows
    if not n:
        return _int64(np.zeros(0, dtype=np.int64))
    codes, names = arrays.encoded(collectives["pg_name"])
    same = {name: i for i, name in reversed(list(enumerate(names)))}  # a value's first code
    codes = np.array([same["?" if name is None else name] if ("?" if name is None else name) in same
                      else len(names) for name in names], dtype=np.int64)[codes]
    order = np.lexsort((arrays.values(collectives["event_id"]), starts, codes))
    ranked = codes[order]
    first = np.ones(n, dtype=bool)
    first[1:] = ranked[1:] != ranked[:-1]
    at = np.arange(n, dtype=np.int64)
    ordinal = np.empty(n, dtype=np.int64)
    ordinal[order] = at - np.maximum.accumulate(np.where(first, at, 0))
    return _int64(ordinal)


def _doc_facts(doc, cpu: columns.Side, vocab: columns.Vocab) -> dict:
    """The TraceMeta fields the document's header (and its CPU pids) tell."""
    dist = doc.distributedInfo
    devices = [d.name for d in (doc.deviceProperties or []) if d.name]
    return {
        "rank": dist.rank if dist else None,
        "world_size": dist.world_size if dist else None,
        "backend": dist.backend if dist else None,
        "nccl_version": dist.nccl_version if dist else None,
        "base_time_ns": doc.baseTimeNanoseconds,
        "host": doc.host_name,
        "pid": main_pid(cpu.pid[:5000], vocab.ids),
        "device_name": devices[0] if devices else None,
    }


def main_pid(codes: np.ndarray, ids: list):
    """The int pid of most of ``codes`` (codes into ``ids``; str and None pids are not counted), the
    first seen among those tied; None when there is none."""
    seen, first, counts = np.unique(codes, return_index=True, return_counts=True)
    best = None
    for code, at, count in zip(seen.tolist(), first.tolist(), counts.tolist()):
        pid = ids[code]
        if isinstance(pid, int) and (best is None or (count, -at) > best[:2]):
            best = (count, -at, pid)
    return best[2] if best else None


def _launches(dev: columns.Side, cpu: columns.Side, vocab: columns.Vocab) -> np.ndarray:
    """For each device event, the position in ``cpu`` of the runtime call that launched it
    (same correlation; the last such call in the file), or -1."""
    is_runtime = by_code(vocab.lower, lambda c: c in RUNTIME_CATS)[cpu.cat]
    positions = np.flatnonzero(is_runtime & (cpu.corr != NONE))
    order = np.argsort(cpu.corr[positions], kind="stable")
    keys, positions = cpu.corr[positions][order], positions[order]
    wanted = dev.corr
    k = np.searchsorted(keys, wanted, side="right") - 1
    hit = (k >= 0) & (wanted != NONE)
    hit[hit] = keys[k[hit]] == wanted[hit]
    return np.where(hit, positions[np.maximum(k, 0)] if len(keys) else -1, -1)


def _kinds(side: columns.Side, vocab: columns.Vocab, classifier: Classifier, where: str) -> np.ndarray:
    """Each event's kind as an index into KINDS, classified once per distinct (category, name)."""
    if not len(side):
        return np.zeros(0, dtype=np.int8)
    width = len(vocab.names)
    pairs, inverse = np.unique(side.cat.astype(np.int64) * width + side.name, return_inverse=True)
    kinds = [KINDS.index(classifier.classify(where, vocab.lower[p // width], vocab.names[p % width]))
             for p in pairs.tolist()]
    return np.array(kinds, dtype=np.int8)[inverse.reshape(-1)]


def _lanes(dev: columns.Side, vocab: columns.Vocab) -> pa.Array:
    """``stream N`` for events with a stream arg, else ``tid T``: one str per distinct lane."""
    has_stream = dev.stream != NONE
    streams, stream_lane = np.unique(dev.stream[has_stream], return_inverse=True)
    tids, tid_lane = np.unique(dev.tid[~has_stream], return_inverse=True)
    names = [f"stream {s}" for s in streams.tolist()] + [f"tid {vocab.ids[t]}" for t in tids.tolist()]
    codes = np.empty(len(dev), dtype=np.int32)
    codes[has_stream] = stream_lane.reshape(-1)
    codes[~has_stream] = len(streams) + tid_lane.reshape(-1)
    return _strings(codes, names)


def _gpu_tables(dev: columns.Side, cpu: columns.Side, vocab: columns.Vocab, steps: _Steps,
                classifier: Classifier):
    """The device table (GPU events), collective rows and the (start, end) of each comm event."""
    ops = _Enclosing()
    is_op = by_code(vocab.names, lambda n: n.startswith(COLLECTIVE_OP_PREFIXES))[cpu.name]
    for j in np.flatnonzero(is_op).tolist():
        ts = int(cpu.ts[j])
        ops.add(vocab.ids[cpu.tid[j]], ts, ts + int(cpu.dur[j]), (vocab.names[cpu.name[j]], cpu.args.get(j)))
    ops.freeze()
    launch = _launches(dev, cpu, vocab)
    # a device event belongs to the step of its launch, else to the step its start falls in
    step = steps.at_many(np.where(launch >= 0, cpu.ts[np.maximum(launch, 0)] if len(cpu) else 0, dev.ts))
    kind = _kinds(dev, vocab, classifier, "gpu")
    named = launchers.gpu_columns(dev, cpu, vocab, launch, kind)
    kind = _comm_by_launch(kind, named)
    coll_rows, spans, corrs, comm_names = [], [], [], []
    for i in np.flatnonzero(kind == KINDS.index("comm")).tolist():
        j = int(launch[i])
        enclosing = ops.containing(vocab.ids[cpu.tid[j]], int(cpu.ts[j])) if j >= 0 else []
        coll_rows.append(_collective_row(int(dev.index[i]), vocab.names[dev.name[i]], dev.args.get(i) or Args(),
                                         enclosing))
        spans.append((int(dev.ts[i]), int(dev.ts[i] + dev.dur[i])))
        corrs.append(int(dev.corr[i]) if dev.corr[i] != NONE else None)
        comm_names.append(vocab.names[dev.name[i]])
    coll_rows = coll.fill_by_period(coll_rows, corrs, comm_names)
    device = _device_table(_int64(dev.index), _lanes(dev, vocab), _nullable(dev.stream), _nullable(dev.device),
                           _strings(dev.cat, vocab.cats), _strings(dev.name, vocab.names), _strings(kind, KINDS),
                           _int64(dev.ts), _int64(dev.dur), _nullable(dev.corr), step,
                           *(_strings(*named[c]) for c in LAUNCH_COLUMNS), *_sync_waits(dev))
    return device, _collectives_table(coll_rows), _span_arrays(spans)


def _comm_by_launch(kind: np.ndarray, named: dict) -> np.ndarray:
    """A compute event launched by a collective call (its launching op, the innermost op around its
    launch: `record_param_comms`, `c10d::*`, `All2All_Pooled_Req`, ...; classify.is_collective_call)
    is communication, whatever its name (a library's all-to-all kernel).  A copy launched by an
    `aten::` op nested in the collective is not: its innermost op is that op.  ``named``: launchers'
    columns, whose family and basis the events made comm lose (only compute has a family)."""
    codes, values = named["launch_op"]
    used = np.unique(codes)
    collective = np.zeros(len(values), dtype=bool)
    collective[used] = [values[c] is not None and is_collective_call(values[c]) for c in used.tolist()]
    moved = collective[codes] & (kind == KINDS.index("compute"))
    if not moved.any():
        return kind
    for column in ("family", "family_basis"):
        family, family_values = named[column]
        named[column] = (np.where(moved, len(family_values) - 1, family), family_values)  # the last value: None
    return np.where(moved, KINDS.index("comm"), kind).astype(kind.dtype)


def _sync_waits(dev: columns.Side) -> tuple[pa.Array, pa.Array]:
    """wait_stream, wait_event_corr: a CUDA sync event's ``wait_on_stream`` and
    ``wait_on_cuda_event_record_corr_id`` as written (Kineto writes -1 where CUPTI did not say);
    NULL on every other event."""
    stream = np.full(len(dev), NONE, dtype=np.int64)
    corr = stream.copy()
    for position, a in dev.args.items():
        index = int(dev.index[position])
        for out, value, what in ((stream, a.wait_stream, "wait_on_stream"),
                                 (corr, a.wait_event_corr, "wait_on_cuda_event_record_corr_id")):
            number = columns.to_int(value, what, index)
            if number is not None:
                out[position] = number
    return _nullable(stream), _nullable(corr)


def _span_arrays(spans: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([a for a, _ in spans], dtype=np.int64).reshape(-1),
            np.array([b for _, b in spans], dtype=np.int64).reshape(-1))


@functools.lru_cache(maxsize=4096)
def _collective_of_kernel(name: str) -> str | None:
    return coll.from_kernel_name(name)


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
            collective = _collective_of_kernel(kernel_name)
            source = "kernel_name" if collective else None
    return (
        index, collective, _str(meta.pg_name), meta.pg_desc,
        _int(meta.group_size, "Group size", index), meta.dtype,
        _int(meta.in_nelems, "In msg nelems", index), _int(meta.out_nelems, "Out msg nelems", index),
        _int(meta.seq, "Seq", index), source,
    )


def _cpu_tables(cpu: columns.Side, vocab: columns.Vocab, steps: _Steps, classifier: Classifier):
    """CPU-only trace: lanes are threads; comm on gloo/mpi/ucc threads, compute elsewhere.

    A collective call (``c10d::allreduce_``) and what runs inside it is dispatch, not compute;
    a wait for a collective (``_c10d_functional::wait_tensor``: the sync rule) is kept as ``sync``
    and what runs inside it is not compute either (docs: "Classification").  An op that
    encloses a call or a wait (``aten::add`` around a DTensor wait) is stored as its pieces
    outside them, so that the thread's blocked time never counts as compute.

    Whole columns (numpy): per event only the ops that overlap a blocked interval are cut in Python."""
    kind = _kinds(cpu, vocab, classifier, "cpu")
    ts, dur, tid = cpu.ts, cpu.dur, cpu.tid.astype(np.int64)
    end = ts + dur
    comm, compute = kind == KINDS.index("comm"), kind == KINDS.index("compute")
    comm_tid = np.zeros(len(vocab.ids), dtype=bool)  # the backend's threads (gloo:*), not a caller's
    comm_tid[tid[comm & ~by_code(vocab.names, issues_collective)[cpu.name]]] = True
    blocking = (kind == KINDS.index("sync")) | by_code(vocab.names, is_collective_call)[cpu.name]
    # per thread, the merged intervals in which it is blocked in a collective call or a wait
    lane, b_start, b_end = intervals.grouped_islands(tid[blocking], ts[blocking], end[blocking])
    keep = (kind != KINDS.index("other")) & ~compute  # kept whole
    whole_compute = compute & ~comm_tid[tid]
    cut_pos, cut_ts, cut_dur = [], [], []
    for t in np.unique(lane).tolist():  # threads with blocked time: their compute ops are checked
        mine = lane == t
        starts, ends = b_start[mine], b_end[mine]
        ops = np.flatnonzero(whole_compute & (tid == t))
        i = np.searchsorted(ends, ts[ops], side="right")  # the first blocked interval ending after the op starts
        inside = (i < len(ends)) & (starts[np.minimum(i, len(ends) - 1)] <= ts[ops])  # it starts blocked
        overlaps = ~inside & (i < len(ends)) & (starts[np.minimum(i, len(ends) - 1)] < end[ops])
        whole_compute[ops[inside | overlaps]] = False  # inside: dropped; overlapping: cut below
        pieces = _Pieces(starts.tolist(), ends.tolist())
        for j in ops[overlaps].tolist():
            for a, b in pieces.outside(int(ts[j]), int(end[j])):
                cut_pos.append(j)
                cut_ts.append(a)
                cut_dur.append(b - a)
    whole = np.flatnonzero(keep | whole_compute)
    pos = np.concatenate([whole, np.array(cut_pos, dtype=np.int64)])
    order = np.argsort(pos, kind="stable")  # file order; an op's pieces in time order
    pos = pos[order]
    row_ts = np.concatenate([ts[whole], np.array(cut_ts, dtype=np.int64)])[order]
    row_dur = np.concatenate([dur[whole], np.array(cut_dur, dtype=np.int64)])[order]
    row_compute = compute[pos]
    names = cpu.name[pos]
    n = len(pos)
    family_names = np.unique(names[row_compute]).tolist()
    family_of = {code: i for i, code in enumerate(family_names)}
    family_codes = np.full(n, len(family_names), dtype=np.int32)
    if family_names:
        lookup = np.full(len(vocab.names), len(family_names), dtype=np.int32)
        lookup[family_names] = [family_of[c] for c in family_names]
        family_codes[row_compute] = lookup[names[row_compute]]
    nulls = _nullable(np.full(n, NONE, dtype=np.int64))
    no_text = _strings(np.zeros(n, dtype=np.int32), [None])
    device = _device_table(
        _int64(cpu.index[pos]), _strings(tid[pos], [f"thread {t}" for t in vocab.ids]), nulls, nulls,
        _strings(cpu.cat[pos], vocab.cats), _strings(names, vocab.names), _strings(kind[pos], KINDS),
        _int64(row_ts), _int64(row_dur), nulls, steps.at_many(row_ts),
        no_text,  # the op is its own launcher
        _strings(family_codes, [launchers.cpu_family(vocab.names[c]) for c in family_names] + [None]),
        _strings(np.where(row_compute, 0, 1), ["op", None]), _strings(names, vocab.names), nulls, nulls)
    is_comm = comm[pos]
    comm_names = np.unique(names[is_comm]).tolist()
    canonical = np.zeros(len(vocab.names), dtype=np.int32)
    canonical[comm_names] = np.arange(len(comm_names), dtype=np.int32)
    m = int(is_comm.sum())
    none_text, none_int = _strings(np.zeros(m, dtype=np.int32), [None]), _nullable(np.full(m, NONE, dtype=np.int64))
    collectives = pa.table({
        "event_id": _int64(cpu.index[pos[is_comm]]),
        "collective": _strings(canonical[names[is_comm]], [coll.canonical(vocab.names[c]) for c in comm_names]),
        "pg_name": none_text, "pg_desc": none_text, "group_size": none_int, "dtype": none_text,
        "in_nelems": none_int, "out_nelems": none_int, "seq": none_int,
        "meta_source": _strings(np.zeros(m, dtype=np.int32), ["cpu_op_name"]),
    })
    return device, collectives, (row_ts[is_comm], row_ts[is_comm] + row_dur[is_comm])


class _Pieces:
    """One thread's merged blocked intervals (sorted, disjoint)."""

    def __init__(self, starts: list[int], ends: list[int]):
        self.starts, self.ends = starts, ends

    def outside(self, ts: int, end: int) -> list[tuple[int, int]]:
        """[ts, end) minus the blocked intervals (the whole interval when none overlap)."""
        starts, ends = self.starts, self.ends
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
                  ("step", pa.int64()), ("launch_op", pa.string()), ("family", pa.string()),
                  ("family_basis", pa.string()), ("short_name", pa.string()),
                  ("wait_stream", pa.int64()), ("wait_event_corr", pa.int64()))
LAUNCH_COLUMNS = ("launch_op", "family", "family_basis", "short_name")  # pipeline/read/launchers.py


def _device_table(*columns) -> pa.Table:
    return pa.table({name: col if isinstance(col, pa.Array) else _array(col, typ)
                     for (name, typ), col in zip(DEVICE_COLUMNS, columns)})


COLLECTIVE_COLUMNS = (("event_id", pa.int64()), ("collective", pa.string()), ("pg_name", pa.string()),
                      ("pg_desc", pa.string()), ("group_size", pa.int64()), ("dtype", pa.string()),
                      ("in_nelems", pa.int64()), ("out_nelems", pa.int64()), ("seq", pa.int64()),
                      ("meta_source", pa.string()))


def _collectives_table(rows: list[tuple]) -> pa.Table:
    return pa.table({name: _array([r[i] for r in rows], typ)
                     for i, (name, typ) in enumerate(COLLECTIVE_COLUMNS)})


def _cpu_table(cpu: columns.Side, vocab: columns.Vocab, cpu_only: bool) -> pa.Table:
    """Runtime calls, steps, collective ops, kept python_function events, events with a
    stream arg (HTA counts those) and FLOP-counted ops with their shapes (columns.needed_on_gpu_trace);
    on GPU traces also the trace's first event (HTA's index_correlation 0), not the other ops
    read only to find launchers."""
    cat = lambda test: by_code(vocab.lower, test)[cpu.cat]  # noqa: E731
    name = lambda test: by_code(vocab.names, test)[cpu.name]  # noqa: E731
    keep = np.flatnonzero(
        cat(lambda c: c in RUNTIME_CATS) | name(lambda n: STEP_NAME in n) | cat(lambda c: c == PYTHON_CAT)
        | name(lambda n: n.startswith(COLLECTIVE_OP_PREFIXES)) | (cpu.stream != NONE)
        | (cat(lambda c: c in CPU_OP_CATS) & name(lambda n: FLOP_OP_RE.match(n) is not None))
        | ((cpu.index == 0) & (not cpu_only)))
    return pa.table({
        "event_id": _int64(cpu.index[keep]),
        "cat": _strings(cpu.cat[keep], vocab.cats),
        "name": _strings(cpu.name[keep], vocab.names),
        "tid": _strings(cpu.tid[keep], [_str(t) for t in vocab.ids]),
        "ts_ns": _int64(cpu.ts[keep]),
        "dur_ns": _int64(cpu.dur[keep]),
        "correlation": _nullable(cpu.corr[keep]),
        "stream": _nullable(cpu.stream[keep]),
        **_shape_columns(cpu, keep),
    })


def _shape_columns(cpu: columns.Side, positions: np.ndarray) -> dict:
    """input_dims, input_types, concrete_inputs (JSON text; NULL for events without shapes)."""
    rows = list(cpu.shapes.items())
    codes = np.full(len(positions), len(rows), dtype=np.int32)  # the last value: no shapes
    for i, (p, _) in enumerate(rows):
        k = int(np.searchsorted(positions, p))
        if k < len(positions) and positions[k] == p:
            codes[k] = i
    values = [s for _, s in rows] + [(None, None, None)]
    return {name: _strings(codes, [v[i] for v in values])
            for i, name in enumerate(("input_dims", "input_types", "concrete_inputs"))}
