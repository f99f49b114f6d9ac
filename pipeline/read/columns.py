"""Stage 1 of extract: a trace's kept events as columns (README, "The compiled extractor").

Two readers give the same :class:`Kept`:

* the reference, :func:`read_python`: msgspec decodes every event into an ``Event`` struct and
  Python filters and validates it, event by event (``pipeline/read/decode.py``);
* the compiled scanner, :func:`read_compiled`: ``pipeline/read/_scan.cpp`` (simdjson On-Demand) turns
  the JSON into columns of every complete event, and the keep / drop decisions are taken here
  once per distinct category and name, then applied to whole columns.  Whatever the scanner is
  not certain to read exactly as the reference does, it refuses ("fallback": ``None``), and the
  reference reads the file; so every error message is the reference's.

Strings are dictionary-encoded: each side's ``cat`` / ``name`` / ``pid`` / ``tid`` column holds
codes into the trace's one :class:`Vocab`.  Ints are numpy int64; ``NONE`` marks an absent
stream, device or correlation.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec
import numpy as np

from scaletrace.pipeline.common import limits, oneline
from scaletrace.pipeline.read.families import OPTIMIZER_ANNOTATION_RE
from scaletrace.pipeline.read.decode import (INT64_MAX, Args, DeviceProperties, DistributedInfo, Event, TraceDoc,
                                             TraceError, iter_events)
from scaletrace.pipeline.read.vocabulary import (COLLECTIVE_OP_PREFIXES, CPU_OP_CATS, FLOP_OP_RE, GPU_ANNOTATION_CAT,
                                                 PROFILER_CAT, PYTHON_CAT, RUNTIME_CATS, STEP_NAME,
                                                 USER_ANNOTATION_CAT, found_on_device, unknown_category)

# What this module calls _scan.scan with and reads back (_scan.cpp's INTERFACE): a module built from
# an older _scan.cpp (an editable install not rebuilt since) is not used, and --version says so.
INTERFACE = 4


def usable(module) -> bool:
    return getattr(module, "INTERFACE", 1) == INTERFACE


try:  # built by setup.py where a compiler and simdjson are present
    from scaletrace.pipeline.read import _scan
except ImportError:  # pragma: no cover - depends on the build
    _scan = None
STALE_BUILD = _scan is not None and not usable(_scan)
if STALE_BUILD:  # pragma: no cover - depends on the build
    _scan = None

NONE = -(2**63)  # "absent" in int columns: _int rejects every value this far out
ENV = "SCALETRACE_EXTRACTOR"  # "python" forces the reference extractor


def compiled_available() -> bool:
    return _scan is not None


def active_extractor() -> str:
    """What extract uses now: ``compiled (simdjson X.Y.Z)`` or ``python (msgspec)``."""
    if _scan is not None and os.environ.get(ENV, "").lower() != "python":
        return f"compiled (simdjson {_scan.SIMDJSON_VERSION})"
    if STALE_BUILD:
        return "python (msgspec; the compiled extractor was built from an older source: pip install -e . rebuilds it)"
    return "python (msgspec)"


class Vocab:
    """The distinct categories (str or None), names (str: a missing name is ""), and pid / tid
    values (int, str or None) of one trace; columns hold codes into these lists."""

    def __init__(self, cats: list, names: list, ids: list):
        self.cats, self.names, self.ids = cats, names, ids
        self.lower = [(c or "").lower() for c in cats]  # extract compares categories lower-cased


@dataclass
class Side:
    """The kept events of one side (device or CPU), in file order."""

    index: np.ndarray  # event's position in traceEvents
    ts: np.ndarray  # ns
    dur: np.ndarray  # ns
    cat: np.ndarray  # int32 code into Vocab.cats
    name: np.ndarray  # int32 code into Vocab.names
    pid: np.ndarray  # int32 code into Vocab.ids
    tid: np.ndarray
    stream: np.ndarray  # int64, NONE when absent
    device: np.ndarray
    corr: np.ndarray
    ext: np.ndarray  # the op's External id (2021 schema, on runtime calls and kernels: `external id`)
    args: dict = field(default_factory=dict)  # position -> Args, events with collective metadata or a sync wait
    shapes: dict = field(default_factory=dict)  # position -> (Input Dims, Input type, Concrete Inputs)

    def __len__(self) -> int:
        return len(self.index)

    def take(self, positions: np.ndarray) -> "Side":
        """The rows at ``positions`` (sorted, distinct), args and shapes renumbered; this side itself
        when they are all its rows (a CPU-only trace keeps every event: no second copy of them)."""
        if len(positions) == len(self):
            return self
        return Side(*(getattr(self, n)[positions] for n in _ARRAYS),
                    args=_renumber(self.args, positions), shapes=_renumber(self.shapes, positions))


def _renumber(rows: dict, positions: np.ndarray) -> dict:
    """``rows`` (position -> item) for the positions kept, numbered by their place in ``positions``."""
    if not rows:
        return {}
    old = np.fromiter(rows, dtype=np.int64, count=len(rows))
    new = np.searchsorted(positions, old)
    found = new < len(positions)
    found[found] = positions[new[found]] == old[found]
    return {n: rows[o] for o, n, ok in zip(old.tolist(), new.tolist(), found.tolist()) if ok}


_ARRAYS = ("index", "ts", "dur", "cat", "name", "pid", "tid", "stream", "device", "corr", "ext")


@dataclass
class Kept:
    """Stage 1's result: the kept device and CPU events, and the document's header."""

    vocab: Vocab
    dev: Side
    cpu: Side
    num_events: int
    doc: object  # the TraceDoc (traceEvents dropped) or Scanned: header fields
    # events of categories the vocabulary does not know, by category (lower case): those kept as device
    # events for their stream / device arg, and the others (vocabulary.found_on_device)
    found: dict = field(default_factory=dict)
    unplaced: dict = field(default_factory=dict)


# -- the reference: msgspec Event structs, one by one ------------------------------------------------

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
        if dur > INT64_MAX:
            raise TraceError(f"event #{index} ({ev.cat} {ev.name!r}): duration {ev.dur} µs is beyond "
                             "64-bit nanoseconds")
        raise TraceError(f"event #{index} ({ev.cat} {ev.name!r}): timestamp {ev.ts} µs is beyond "
                         "64-bit nanoseconds")
    return ts, dur


def to_int(value, what: str, index: int) -> int | None:
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


class _Builder:
    """One side's kept events while the reference reads them."""

    def __init__(self, codes: "_Codes"):
        self.codes = codes
        self.index, self.ts, self.dur = array("q"), array("q"), array("q")
        self.cat, self.name, self.pid, self.tid = array("i"), array("i"), array("i"), array("i")
        self.stream, self.device, self.corr, self.ext = array("q"), array("q"), array("q"), array("q")
        self.args: dict[int, Args] = {}
        self.shapes: dict[int, tuple] = {}

    def __len__(self) -> int:
        return len(self.index)

    def add(self, index: int, ev: Event) -> None:
        ts, dur = _times(index, ev)
        a = ev.args
        stream = device = corr = ext = None
        if a is not None:
            stream = to_int(a.stream, "stream", index)
            device = to_int(a.device, "device", index)
            corr = to_int(a.correlation, "correlation", index)
            ext = to_int(a.external_id if a.external_id is not None else a.external_id_2021, "External id", index)
            if keeps_args(a):
                self.args[len(self.index)] = a
            if len(a.input_dims) and FLOP_OP_RE.match(ev.name or ""):
                self.shapes[len(self.index)] = _shapes(a)
        self.index.append(index)
        self.ts.append(ts)
        self.dur.append(dur)
        self.cat.append(self.codes.cat(ev.cat))
        self.name.append(self.codes.name(ev.name or ""))
        self.pid.append(self.codes.id(ev.pid))
        self.tid.append(self.codes.id(ev.tid))
        self.stream.append(NONE if stream is None else stream)
        self.device.append(NONE if device is None else device)
        self.corr.append(NONE if corr is None else corr)
        self.ext.append(NONE if ext is None else ext)

    def side(self) -> Side:
        return Side(*(np.frombuffer(getattr(self, n), dtype=np.int32 if n in _CODES else np.int64)
                      for n in _ARRAYS), args=self.args, shapes=self.shapes)


_CODES = ("cat", "name", "pid", "tid")


def keeps_args(a: Args) -> bool:
    """Whether an event's args are kept (``Side.args``): collective metadata, or a CUDA sync
    event's wait (the stream and cudaEventRecord it waited on)."""
    return (a.collective_name is not None or a.pg_name is not None or a.in_nelems is not None
            or a.wait_stream is not None or a.wait_event_corr is not None)


def _shapes(a: Args) -> tuple:
    return tuple(bytes(r).decode() or None for r in (a.input_dims, a.input_types, a.concrete_inputs))


class _Codes:
    """Distinct values -> codes, for the reference reader."""

    def __init__(self):
        self.cats: dict = {}
        self.names: dict = {}
        self.ids: dict = {}  # keyed by (type, value): 1 and True, "1" and 1 stay apart

    def cat(self, value) -> int:
        return self.cats.setdefault(value, len(self.cats))

    def name(self, value) -> int:
        return self.names.setdefault(value, len(self.names))

    def id(self, value) -> int:
        return self.ids.setdefault((type(value), value), len(self.ids))

    def vocab(self) -> Vocab:
        return Vocab(list(self.cats), list(self.names), [v for _, v in self.ids])


def read_python(doc: TraceDoc, device_cats: frozenset, keep_python: bool, gpu_trace: bool) -> Kept:
    """The reference stage 1: decode events in batches, keep what extract needs.  ``gpu_trace``:
    only the CPU events needed beside GPU activity are kept while decoding (bounded memory)."""
    raws = doc.traceEvents or []
    codes = _Codes()
    dev, cpu = _Builder(codes), _Builder(codes)
    lower: dict = {}
    unknown: dict = {}  # category -> None (known), False (unknown), True (unknown, found by its args)
    found: dict = {}
    unplaced: dict = {}
    for index, ev in enumerate(iter_events(raws)):
        if ev.ph != "X":
            continue
        cat = lower.get(ev.cat)
        if cat is None:
            cat = lower[ev.cat] = (ev.cat or "").lower()
            unknown[cat] = found_on_device(cat, device_cats) if unknown_category(cat, device_cats) else None
        if cat in device_cats:
            dev.add(index, ev)
            continue
        if unknown[cat] is not None:
            if unknown[cat] and _on_device(index, ev):
                found[cat] = found.get(cat, 0) + 1
                dev.add(index, ev)
                continue
            unplaced[cat] = unplaced.get(cat, 0) + 1
        if index == 0 and gpu_trace and cat != PROFILER_CAT:
            # HTA links a kernel whose correlation has no CPU call to the trace's first
            # event (index_correlation 0): hta_events needs that event's time
            cpu.add(index, ev)
        elif cat == PROFILER_CAT or (cat == PYTHON_CAT and not keep_python):
            continue
        elif cat == GPU_ANNOTATION_CAT and STEP_NAME not in (ev.name or ""):
            continue
        elif (not gpu_trace or needed_on_gpu_trace(cat, ev.name or "", ev.args and ev.args.stream)
              or launcher_on_gpu_trace(cat, ev.name or "")):
            cpu.add(index, ev)  # (GPU-side ProfilerSteps are kept for HTA's filter)
    if gpu_trace and not len(dev):  # the byte scan was fooled: decode again keeping CPU lanes
        return read_python(doc, device_cats, keep_python, gpu_trace=False)
    num_events = len(raws)
    doc.traceEvents = None  # the raw slices (and the file's bytes) are no longer needed
    return Kept(codes.vocab(), dev.side(), cpu.side(), num_events, doc, found, unplaced)


def _on_device(index: int, ev: Event) -> bool:
    """The event carries an int ``stream`` or ``device`` arg (as the compiled scanner reads them)."""
    a = ev.args
    return a is not None and (to_int(a.stream, "stream", index) is not None
                              or to_int(a.device, "device", index) is not None)


def needed_on_gpu_trace(cat: str, name: str, stream) -> bool:
    """CPU events stored beside GPU activity (``cpu_events``): launches, steps, collective ops,
    stream-arg events, FLOP-counted op candidates (with their shapes)."""
    return (cat in RUNTIME_CATS or STEP_NAME in name or cat == PYTHON_CAT
            or name.startswith(COLLECTIVE_OP_PREFIXES) or stream is not None
            or (cat in CPU_OP_CATS and FLOP_OP_RE.match(name) is not None))


def launcher_on_gpu_trace(cat: str, name: str) -> bool:
    """CPU events read beside GPU activity to find each kernel's launching op (``pipeline/read/launchers.py``)
    but not stored: every op, and the optimizer-step annotations."""
    return cat in CPU_OP_CATS or (cat == USER_ANNOTATION_CAT and OPTIMIZER_ANNOTATION_RE.match(name) is not None)


# -- the compiled scanner: columns of every complete event, decisions per distinct value ----------

_EVENT = msgspec.json.Decoder(Event)
RARE_COLLECTIVE, RARE_SHAPES, RARE_SYNC = 1, 2, 4  # _scan.cpp's Rare bits: why an event's text is decoded here


class Scanned:
    """What the compiled scanner read: every complete event as columns, and the header fields of
    a TraceDoc (``distributedInfo``, ``deviceProperties``, ...), so that code reading a document's
    header reads either."""

    def __init__(self, every: Side, vocab: Vocab, num_events: int, header: dict):
        self.every, self.vocab, self.num_events = every, vocab, num_events
        dist = {k: header[k] for k in ("rank", "world_size", "backend", "nccl_version")}
        self.distributedInfo = DistributedInfo(**dist) if any(v is not None for v in dist.values()) else None
        self.deviceProperties = [DeviceProperties(name=n) for n in header["device_names"]]
        self.baseTimeNanoseconds = header["base_time_ns"]
        self.host_name = header["host"]
        # ingest's two byte pre-scans, answered by the scanner from every key as written (_scan.cpp,
        # note_field): some "ts" written with a decimal point; some "cat" one of the device categories
        self.prescans = (header["fractional_ts"], header["device_category"])

    def kept(self, device_cats: frozenset, keep_python: bool, gpu_trace: bool) -> Kept:
        """The kept events; this document keeps its header only (once: every event's columns are
        released to the kept sides, not held beside them through stage 2)."""
        every, self.every = self.every, None
        dev, cpu = select(every, self.vocab, device_cats, keep_python, gpu_trace)
        if gpu_trace and not len(dev):  # as the reference: keep CPU lanes
            dev, cpu = select(every, self.vocab, device_cats, keep_python, gpu_trace=False)
        return Kept(self.vocab, dev, cpu, self.num_events, self, *unknown_categories(every, self.vocab, device_cats))


def padding() -> int:
    """Readable bytes the scanner wants after the JSON to read a buffer in place."""
    return _scan.PADDING if _scan is not None else 0


# A file larger than this is scanned in parts of about this size on the cores' threads (docs/ingest.md,
# "One large file").  Measured on the 174 MB benchmark trace, scan CPU: 1-16 MiB parts alike (0.38-0.49 s),
# 64 MiB 0.6 s, one pass 0.47-0.58 s; below 16 MiB the files of a many-rank batch would be split too,
# where both cores already parse (4 MiB: no gain measured on the 60-trace set).
PART_BYTES = 16 << 20


def scan_threads() -> int:
    """Threads a split scan uses: the cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def scan(data: bytes, buffer: bytearray | None = None, device_categories: Iterable[str] = (),
         part_bytes: int | None = None, threads: int | None = None) -> Scanned | None:
    """Stage 1 through ``_scan``; None when the scanner refuses the file (the caller then decodes
    it with msgspec and runs :func:`read_python`).  ``buffer``: ``data`` is its first bytes and
    :func:`padding` bytes follow (``limits.padded``), so simdjson reads it without a copy.
    ``device_categories``: what ``Scanned.prescans`` looks for.  ``part_bytes``: a larger file is
    scanned in parts of about this size (default PART_BYTES; 0: in one pass) on ``threads`` threads
    (default :func:`scan_threads`); the columns are those of one pass."""
    target = data if buffer is None else buffer
    scanned = _scan.scan(target, len(data), tuple(sorted(device_categories)),
                         PART_BYTES if part_bytes is None else part_bytes, threads or scan_threads())
    if scanned is None:
        return None
    cats = scanned["cats"] + [None]  # code -1 (no category) is the last entry
    names = scanned["names"] + [""]  # a missing name reads as "" (extract's `ev.name or ""`)
    ids = scanned["ids"] + [None]
    vocab = Vocab(cats, names, ids)
    cols = {n: np.frombuffer(scanned[n], dtype=np.int64) for n in ("index", "ts", "dur", "stream", "device")}
    cols["corr"] = np.frombuffer(scanned["correlation"], dtype=np.int64)
    cols["ext"] = np.frombuffer(scanned["external_id"], dtype=np.int64)
    for n, table in (("cat", cats), ("name", names), ("pid", ids), ("tid", ids)):
        codes = np.frombuffer(scanned[n], dtype=np.int32)
        cols[n] = np.where(codes < 0, len(table) - 1, codes).astype(np.int32)
    every = Side(**cols)
    if not _attach_rare(every, scanned["rare"], data, vocab):
        return None
    return Scanned(every, vocab, scanned["num_events"], scanned)


def _attach_rare(every: Side, rare: bytes, data: bytes, vocab: Vocab) -> bool:
    """Collective metadata, sync waits and recorded shapes of the few events that carry them: each
    event's JSON text decoded by msgspec, as the reference decodes it."""
    rows = np.frombuffer(rare, dtype=np.int64).reshape(-1, 4)  # position, start, end, what (_scan.cpp Rare)
    flop = flags_by_code(vocab.names, lambda n: FLOP_OP_RE.match(n) is not None)
    what = rows[:, 3]
    wanted = (what & (RARE_COLLECTIVE | RARE_SYNC)).astype(bool) | ((what & RARE_SHAPES).astype(bool)
                                                                    & flop[every.name[rows[:, 0]]])
    for position, start, end, _ in rows[wanted].tolist():  # shapes are kept for FLOP-counted ops only
        try:
            a = _EVENT.decode(bytes(data[start:end]).rstrip(b" \t\r\n,")).args
        except msgspec.DecodeError:  # not expected after the scan: let the reference decide
            return False
        if keeps_args(a):
            every.args[position] = a
        if len(a.input_dims) and FLOP_OP_RE.match(vocab.names[every.name[position]]):
            every.shapes[position] = _shapes(a)
    return True


def flags_by_code(values: list, test) -> np.ndarray:
    """``test`` of each distinct value (its truth), as a bool array indexed by code."""
    return np.fromiter(map(test, values), dtype=bool, count=len(values))  # numpy takes each result's truth


def select(every: Side, vocab: Vocab, device_cats: frozenset, keep_python: bool,
           gpu_trace: bool) -> tuple[Side, Side]:
    """read_python's keep / drop chain on whole columns: each test is taken once per distinct
    category or name, then indexed by the codes."""
    cat = lambda test: flags_by_code(vocab.lower, test)[every.cat]  # noqa: E731
    name = lambda test: flags_by_code(vocab.names, test)[every.name]  # noqa: E731
    is_dev = cat(lambda c: c in device_cats) | _found(every, vocab, device_cats)
    profiler = cat(lambda c: c == PROFILER_CAT)
    python = cat(lambda c: c == PYTHON_CAT)
    step_name = name(lambda n: STEP_NAME in n)
    needed = (cat(lambda c: c in RUNTIME_CATS) | step_name | python
              | name(lambda n: n.startswith(COLLECTIVE_OP_PREFIXES)) | (every.stream != NONE)
              | cat(lambda c: c in CPU_OP_CATS)  # every op (FLOP-counted ones among them): launchers
              | (cat(lambda c: c == USER_ANNOTATION_CAT) & name(lambda n: OPTIMIZER_ANNOTATION_RE.match(n) is not None)))
    first = (every.index == 0) & gpu_trace & ~profiler
    rest = (~profiler & ~(python & (not keep_python)) & ~(cat(lambda c: c == GPU_ANNOTATION_CAT) & ~step_name)
            & (needed | (not gpu_trace)))
    keep_cpu = ~is_dev & (first | rest)
    return every.take(np.flatnonzero(is_dev)), every.take(np.flatnonzero(keep_cpu))


def _found(every: Side, vocab: Vocab, device_cats: frozenset) -> np.ndarray:
    """Events of a category the vocabulary does not know with an int stream or device arg, that are
    device activity (vocabulary.found_on_device; read_python's test, on whole columns)."""
    on_device = (every.stream != NONE) | (every.device != NONE)
    return flags_by_code(vocab.lower, lambda c: found_on_device(c, device_cats))[every.cat] & on_device


def unknown_categories(every: Side, vocab: Vocab, device_cats: frozenset) -> tuple[dict, dict]:
    """(found, unplaced): the events of categories the vocabulary does not know, counted by
    category (lower case): kept as device events, and not (read_python counts the same)."""
    unknown = flags_by_code(vocab.lower, lambda c: unknown_category(c, device_cats))[every.cat]
    found = _found(every, vocab, device_cats)
    counts = []
    for mask in (found, unknown & ~found):
        codes, n = np.unique(every.cat[mask], return_counts=True)
        by_cat: dict = {}
        for code, count in zip(codes.tolist(), n.tolist()):
            by_cat[vocab.lower[code]] = by_cat.get(vocab.lower[code], 0) + count
        counts.append(by_cat)
    return counts[0], counts[1]
