"""Typed decoding of Chrome / Kineto trace JSON with msgspec.

Only the fields scaletrace uses are decoded; everything else is skipped by
the parser without building Python objects.  Timestamps are decoded as
``Decimal`` so that fractional-µs (ns resolution) stamps keep every digit:
a double cannot hold 1712195495505582.988 exactly (its step there is 0.25 µs).
"""

from __future__ import annotations

import codecs
import re
import gzip
import zlib
from decimal import Decimal
from typing import Optional, Union

import msgspec

from scaletrace.pipeline.common import limits

Num = Optional[Decimal]
IntOrStr = Union[int, str, None]

INT64_MAX = 2**63 - 1


class TraceError(Exception):
    """A trace file that cannot be ingested; the message names the reason."""


class Args(msgspec.Struct, rename={
    "external_id": "External id",
    "external_id_2021": "external id",  # the 2021 schema's runtime calls and kernels: the op's External id
    "collective_name": "Collective name",
    "in_nelems": "In msg nelems",
    "out_nelems": "Out msg nelems",
    "group_size": "Group size",
    "pg_name": "Process Group Name",
    "pg_desc": "Process Group Description",
    "seq": "Seq",
    "input_dims": "Input Dims",
    "input_types": "Input type",
    "concrete_inputs": "Concrete Inputs",
    "wait_stream": "wait_on_stream",
    "wait_event_corr": "wait_on_cuda_event_record_corr_id",
}):
    correlation: IntOrStr = None
    external_id: IntOrStr = None
    external_id_2021: IntOrStr = None
    stream: IntOrStr = None
    device: IntOrStr = None
    collective_name: Optional[str] = None
    in_nelems: IntOrStr = None
    out_nelems: IntOrStr = None
    group_size: IntOrStr = None
    dtype: Optional[str] = None
    pg_name: IntOrStr = None
    pg_desc: Optional[str] = None
    seq: IntOrStr = None
    # CUDA sync events (Kineto `cuda_sync`, with enable_cuda_sync_events): the stream the waited-for
    # CUDA event was recorded on and the correlation id of its cudaEventRecord call
    wait_stream: IntOrStr = None
    wait_event_corr: IntOrStr = None
    # recorded shapes (record_shapes=True) of FLOP-counted ops: kept as the raw JSON text,
    # parsed in SQL at read time (queries/macros/op_flops.sql); empty when absent
    input_dims: msgspec.Raw = msgspec.Raw()
    input_types: msgspec.Raw = msgspec.Raw()
    concrete_inputs: msgspec.Raw = msgspec.Raw()


class Event(msgspec.Struct):
    ph: str = ""
    cat: Optional[str] = None
    name: Optional[str] = None
    pid: IntOrStr = None
    tid: IntOrStr = None
    ts: Num = None
    dur: Num = None
    args: Optional[Args] = None


class DeviceProperties(msgspec.Struct):
    name: Optional[str] = None


class DistributedInfo(msgspec.Struct):
    rank: Optional[int] = None
    world_size: Optional[int] = None
    backend: Optional[str] = None
    nccl_version: Optional[str] = None


class TraceDoc(msgspec.Struct):
    # Raw slices of the input: events are decoded in batches later (iter_events), so a
    # 1 GB trace never holds every decoded event at once.
    traceEvents: Optional[list[msgspec.Raw]] = None
    distributedInfo: Optional[DistributedInfo] = None
    deviceProperties: Optional[list[DeviceProperties]] = None
    baseTimeNanoseconds: Optional[int] = None
    host_name: Optional[str] = None


_DECODER = msgspec.json.Decoder(Union[TraceDoc, list[msgspec.Raw]])
_BATCH_DECODER = msgspec.json.Decoder(list[Event])
_EVENT_PATH = re.compile(r"\$\[(\d+)\]")
BATCH = 20_000
# msgspec stops at Python's recursion limit (RecursionError); the compiled scanner stops at 256
# levels and hands the file here (_scan.cpp MAX_DEPTH), so either way the file is this one line.
TOO_DEEP = "JSON nested too deeply (beyond Python's recursion limit): not a Kineto trace"


def unpack(raw: bytes, max_bytes: int | None = None, limit_name: str = "the size limit",
           check_utf8: bool = True, pad: int = 0) -> bytes:
    """A file's bytes, gunzipped when they are gzip (refused past ``max_bytes`` decompressed),
    checked to be UTF-8 (``check_utf8=False``: the caller checks, see ``extract.scan_or_decode``).
    ``pad``: gunzipped bytes come padded (``limits.padded``), as ``raw`` should then be."""
    if not raw:
        raise TraceError("empty file (0 bytes)")
    data = raw
    if raw[:2] == b"\x1f\x8b":
        try:
            data = limits.gunzip(raw, max_bytes or limits.default_max_trace_bytes(), limit_name, pad)
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise TraceError(f"truncated or corrupt gzip ({exc})") from None
        except limits.LimitError as exc:
            raise TraceError(str(exc)) from None
        if limits.blank(data):
            raise TraceError("empty trace (gzip of no JSON)")
    elif limits.blank(raw):
        raise TraceError("empty file (only whitespace)")
    if check_utf8:
        check_utf8_text(data)
    return data


def check_utf8_text(data: bytes, chunk: int = 1 << 24) -> None:
    # Incremental, so a 1 GB trace is not copied into a 1 GB str.
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(data)
    try:
        for start in range(0, len(data), chunk):
            decoder.decode(view[start:start + chunk])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        raise TraceError(f"invalid UTF-8 at byte {exc.start}: {exc.reason}") from None


def decode(data: bytes) -> TraceDoc:
    """Decode trace bytes (object or bare-array form) into a :class:`TraceDoc`."""
    try:
        doc = _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise TraceError(f"not a Chrome/Kineto trace: {exc}") from None
    except msgspec.DecodeError as exc:
        raise TraceError(f"malformed or truncated JSON: {exc}") from None
    except RecursionError:
        raise TraceError(TOO_DEEP) from None
    if isinstance(doc, list):
        return TraceDoc(traceEvents=doc)
    if doc.traceEvents is None:
        raise TraceError("not a Chrome/Kineto trace: no traceEvents array")
    return doc


def iter_events(raws: list[msgspec.Raw], batch: int = BATCH):
    """Decode the events in batches of ``batch``; errors name the event's index in the file."""
    for offset in range(0, len(raws), batch):
        chunk = raws[offset:offset + batch]
        try:
            events = _BATCH_DECODER.decode(b"[" + b",".join(chunk) + b"]")
        except msgspec.ValidationError as exc:
            text = _EVENT_PATH.sub(lambda m: f"$.traceEvents[{offset + int(m.group(1))}]", str(exc), count=1)
            raise TraceError(f"not a Chrome/Kineto trace: {text}") from None
        except RecursionError:
            raise TraceError(TOO_DEEP) from None
        yield from events
