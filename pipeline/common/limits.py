"""What one input may cost: size limits, reading only regular files, and number checks that
stay cheap on hostile values (README, "Robustness").

Every size an input claims is checked against what is actually there before anything is
allocated or computed for it: a decompressed length against ``max_trace_bytes`` while it is
decompressed, a numeral's exponent before ``int(Decimal)`` (quadratic in the digits), a
ProfilerStep number's digit count before ``int()``, a world size against the ranks present.
Nothing here imports the rest of the pipeline, so every module may use it.
"""

from __future__ import annotations

import os
import re
import stat
import zlib
from decimal import Decimal

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
MIB = 1 << 20

# Side files (step and power logs) and run.json are small: a day of 10 Hz power samples is
# ~35 MB, a million steps of step log ~100 MB.
MAX_SIDE_FILE_BYTES = 128 * MIB
LOCK_WAIT_S = 300.0  # how long an ingest waits for another process holding its database (ingest --wait)
MAX_MANIFEST_BYTES = 16 * MIB
GZIP_CHUNK = 16 * MIB  # decompressed bytes produced per step while checking the limit


class LimitError(ValueError):
    """An input beyond what it may cost, not a regular file, or a number that is not finite."""


def physical_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def default_max_trace_bytes() -> int:
    """A sixteenth of the machine's memory (at least 256 MiB): a parse may take 300 MiB + 8 × the
    decompressed JSON (PARSE_BYTES_PER_JSON_BYTE; docs, "Robustness", measured per event mix), so
    a trace at the limit needs at most ~half of the memory in its worker."""
    memory = physical_memory_bytes() or 8 * 1024 * MIB
    return max(256 * MIB, memory // 16)


SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)i?[bB]?\s*$")
SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """``"3G"``, ``"500M"``, ``"1.5GiB"``, ``"100000"`` -> bytes (binary units)."""
    match = SIZE_RE.match(str(text))
    if not match:
        raise ValueError(f"not a size: {text!r} (give bytes or a number with K, M, G or T)")
    return int(float(match.group(1)) * SIZE_UNITS[match.group(2).lower()])


def size_text(nbytes: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= factor:
            return f"{nbytes / factor:.3g} {unit}"
    return f"{nbytes} bytes"


def read_regular(path: str | os.PathLike, max_bytes: int, limit_name: str = "the size limit",
                 pad: int = 0) -> bytes | memoryview:
    """The bytes of a regular file of at most ``max_bytes``.

    Opened without blocking (a FIFO would otherwise wait for a writer for ever) and checked
    with fstat on the open file (no race with a rename): a FIFO, a device such as /dev/zero, a
    socket or a directory is a LimitError, as is a file larger than ``max_bytes``; OSError as
    ``open`` raises it.  ``pad``: a memoryview of the bytes over a buffer (its ``obj``) with
    ``pad`` spaces after them (see :func:`padded`)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise LimitError(f"not a regular file ({file_kind(info.st_mode)})")
        if info.st_size > max_bytes:
            raise LimitError(f"{size_text(info.st_size)}, over {limit_name} of {size_text(max_bytes)}")
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb", buffering=0) as handle:
        if pad:
            buffer = bytearray(info.st_size + pad)
            view, size = memoryview(buffer), 0
            while size < info.st_size:  # a read returns at most ~2 GiB
                got = handle.readinto(view[size:info.st_size])
                if not got:  # the file shrank while read
                    break
                size += got
            del view
            grew = size == info.st_size
            while grew and size <= max_bytes and (more := handle.read(1 << 20)):
                buffer[size:size] = more  # the file grew while read
                size += len(more)
            if size > max_bytes:
                raise LimitError(f"over {limit_name} of {size_text(max_bytes)} (the file grew while read)")
            return padded(buffer, size)
        data = handle.readall()  # one buffer of the fstat size, grown only if the file grew
    if len(data) > max_bytes:
        raise LimitError(f"over {limit_name} of {size_text(max_bytes)} (the file grew while read)")
    return data


def padded(buffer: bytearray, size: int) -> memoryview:
    """The first ``size`` bytes of ``buffer``, whose rest becomes spaces: JSON readers see the bytes,
    and the compiled scanner reads them in place (simdjson wants readable bytes past the end),
    where it would otherwise copy the whole trace.  The buffer is the view's ``obj``."""
    buffer[size:] = b" " * (len(buffer) - size)
    return memoryview(buffer)[:size]


def file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a plain file"


def gunzip(raw: bytes, max_bytes: int, limit_name: str = "the size limit", pad: int = 0) -> bytes | memoryview:
    """Decompress gzip data (all members), refusing as soon as the output passes ``max_bytes``:
    a small .gz of whitespace would otherwise fill the machine's memory.  Raises LimitError
    past the limit, EOFError when truncated, zlib.error when corrupt.

    ISA-L (PyPI ``isal``, ~5x the standard library here) inflates when installed; the bytes are
    the same (DEFLATE has one decoding).  A stream ISA-L refuses is inflated again by the
    standard library, so that a corrupt file's error says what zlib says, wherever it runs.
    ``pad``: as for :func:`read_regular`."""
    if _FAST_ZLIB is not None:
        try:
            return _gunzip(_FAST_ZLIB, raw, max_bytes, limit_name, pad)
        except LimitError:
            raise
        except Exception:  # noqa: BLE001  corrupt or truncated: the standard library's own words
            pass
    return _gunzip(zlib, raw, max_bytes, limit_name, pad)


def _gunzip(inflate, raw: bytes, max_bytes: int, limit_name: str, pad: int) -> bytes | memoryview:
    pieces: list[bytes] = []
    total = 0
    rest = memoryview(raw)
    while True:
        inflater = inflate.decompressobj(16 + zlib.MAX_WBITS)
        data = rest
        while True:
            piece = inflater.decompress(data, GZIP_CHUNK)
            total += len(piece)
            if total > max_bytes:
                raise LimitError(f"decompresses to more than {limit_name} of {size_text(max_bytes)}")
            pieces.append(piece)
            data = inflater.unconsumed_tail
            if inflater.eof or not (data or piece):
                break
        if not inflater.eof:
            raise EOFError("compressed data ended before the end-of-stream marker")
        rest = inflater.unused_data
        if not rest or not rest.strip(b"\x00"):  # gzip allows zero padding after the last member
            if not pad:
                return b"".join(pieces)
            buffer = bytearray(total + pad)  # the one copy join would make, with room for the padding
            at = 0
            for piece in pieces:
                buffer[at:at + len(piece)] = piece
                at += len(piece)
            pieces.clear()
            return padded(buffer, total)
        if rest[:2] != b"\x1f\x8b":
            raise zlib.error("trailing data after the gzip stream is not gzip")


try:
    from isal import isal_zlib as _FAST_ZLIB
except ImportError:  # the standard library inflates
    _FAST_ZLIB = None
GZIP_DECODER = "isal (ISA-L)" if _FAST_ZLIB is not None else "zlib (standard library)"


_NON_BLANK = re.compile(rb"[^ \t\r\n]")


def blank(data: bytes) -> bool:
    """Only JSON whitespace (without copying the data, as ``data.strip()`` would)."""
    return _NON_BLANK.search(data) is None


# ns values beyond int64 whatever their digits: |µs| ≥ 1e17 is ≥ 1e20 ns.
_MAX_ADJUSTED_US = 16
BEYOND_INT64 = INT64_MAX + 1


def ns_from_us(us: Decimal) -> int:
    """µs (a Decimal, every digit kept) as int ns, truncated like ``int()``.

    The exponent is checked first: ``int(Decimal("1e999990"))`` takes tens of seconds (and
    ``1e999999`` overflows the context), so a value beyond 64-bit ns comes back as
    ±BEYOND_INT64 for the caller's range check, at once.  NaN, sNaN and Infinity (msgspec
    accepts them as strings) raise LimitError."""
    if not us.is_finite():
        raise LimitError(f"{us} is not a finite number")
    if us.adjusted() > _MAX_ADJUSTED_US:
        return -BEYOND_INT64 if us.is_signed() else BEYOND_INT64
    return int(us.scaleb(3))


def int_from_digits(digits: str, what: str) -> int:
    """``int(digits)`` for a run of ASCII digits, refusing more than 64 bits before converting
    (Python refuses more than 4,300 digits with a ValueError, and is quadratic below that)."""
    significant = digits.lstrip("0")
    if len(significant) > 19 or (significant and int(significant) > INT64_MAX):
        shown = digits if len(digits) <= 40 else f"of {len(digits):,} digits"
        raise LimitError(f"{what} {shown} is beyond 64 bits")
    return int(significant or "0")


def missing_ranks(present: list[int], world_size: int, shown: int = 8) -> tuple[int, list[int]]:
    """(how many of ranks 0..world_size-1 are not in ``present``, the first ``shown`` of them),
    in time and memory proportional to ``present``, not to the world size a file claims."""
    inside = sorted({r for r in present if 0 <= r < world_size})
    first: list[int] = []
    expected = 0
    for rank in inside + [world_size]:
        while expected < rank and len(first) < shown:
            first.append(expected)
            expected += 1
        if len(first) >= shown:
            break
        expected = rank + 1
    return world_size - len(inside), first


# -- values the queries can compute with ---------------------------------------
# A value that ingests but overflows a query's arithmetic breaks that query for every run of the
# database, so each field the queries multiply, subtract or sum is bounded here, at ingest, where
# its file is refused with one line.  The bounds leave every product and difference the SQL
# computes inside BIGINT (and DECIMAL(38) for FLOPs) with room for sums over many events:
#
# * times (start and end, ns): [TIME_MIN_NS, TIME_MAX_NS]: any difference of two, spans and gaps
#   across ranks too, is below 2^63 (the upper bound is the year 2116 on the Unix epoch);
# * message sizes: below 2^48 elements, so × the widest dtype (16 bytes) and summed over 2^11
#   collectives stays in BIGINT; group size 1 to 2^31 − 1 (the busbw factor divides by it);
# * recorded shapes of FLOP-counted ops (queries/macros/op_flops.sql): every dimension and concrete
#   integer below 2^31 in magnitude, each operand's element count at most 2^48: 2·M·N·K and the
#   attention product stay near 2^81, far inside DECIMAL(38).
TIME_MIN_NS, TIME_MAX_NS = -(2**61), 2**62
ARG_RANGES = {
    "Group size": (1, INT32_MAX),
    "In msg nelems": (0, 2**48),
    "Out msg nelems": (0, 2**48),
}
SHAPE_INT_MAX = INT32_MAX
OPERAND_ELEMENTS_MAX = 2**48


def outside_times(ts, dur):
    """Positions (numpy) of events that start or end outside [TIME_MIN_NS, TIME_MAX_NS]; ``ts`` and
    ``dur`` int64 ns arrays, ``dur`` ≥ 0 (checked before).  No int64 overflow: ``TIME_MAX_NS - ts``
    is computed only where ``ts`` is in range."""
    import numpy as np

    early = (ts < TIME_MIN_NS) | (ts > TIME_MAX_NS)
    late = dur > (TIME_MAX_NS - np.clip(ts, TIME_MIN_NS, TIME_MAX_NS))
    return np.flatnonzero(early | late)


def check_arg(what: str, value: int | None) -> str | None:
    """Why an int arg the queries compute with cannot be used (None: it can)."""
    bounds = ARG_RANGES.get(what)
    if value is None or bounds is None or bounds[0] <= value <= bounds[1]:
        return None
    return f"{what} {value} is outside what the queries compute with ({bounds[0]:,} to {bounds[1]:,})"


_JSON_INT = re.compile(r"(?<![\w.])-?\d+(?![\w.])")  # integers, not the digits of 1.5 or 1e-05


def check_shape_text(dims: str | None, concrete: str | None) -> str | None:
    """Why a FLOP op's recorded ``Input Dims`` / ``Concrete Inputs`` (JSON text) cannot be computed
    with (None: they can).  Called once per distinct text."""
    import json
    import math

    for what, text in (("Input Dims", dims), ("Concrete Inputs", concrete)):
        for number in _JSON_INT.findall(text or ""):  # digits inside strings too: "[1, 1]" lists
            digits = number.lstrip("-").lstrip("0")
            if len(digits) > 12 or abs(int(digits or "0")) > SHAPE_INT_MAX:
                return f"{what} holds {number[:40]}, beyond the {SHAPE_INT_MAX:,} the FLOP counts compute with"
    try:
        operands = json.loads(dims) if dims else []
    except (ValueError, RecursionError):
        return None  # the SQL reads it as NULL shapes
    for operand in operands if isinstance(operands, list) else []:
        if isinstance(operand, list) and all(isinstance(d, int) for d in operand):
            if abs(math.prod(operand)) > OPERAND_ELEMENTS_MAX:
                return (f"Input Dims operand {operand} has more than {OPERAND_ELEMENTS_MAX:,} elements "
                        "(2^48), beyond what the FLOP counts compute with")
    return None


# -- the memory of a parse ----------------------------------------------------------
# A parse worker's resident memory may grow, while one file's JSON is scanned and its tables are
# built, by at most PARSE_HEADROOM + PARSE_BYTES_PER_JSON_BYTE × the JSON beyond what it holds
# once the file is read (docs: Robustness, "Memory", measured per event mix by
# tests/bench/memory_mixes.py).  A watcher thread compares the resident size with that cap every
# WATCH_INTERVAL_S; past it, the data-segment limit (RLIMIT_DATA) is lowered to what is mapped
# now, so the next allocation fails (MemoryError, std::bad_alloc) and the file gets its one line,
# instead of the machine's out-of-memory killer choosing a process.
PARSE_BYTES_PER_JSON_BYTE = 8
PARSE_HEADROOM = 300 * MIB
WATCH_INTERVAL_S = 0.02


class _Watch:
    cap: int | None = None  # resident bytes allowed now (None: no file is being parsed)
    json_bytes = 0
    tripped = False
    soft: int | None = None  # RLIMIT_DATA's soft limit outside a parse
    thread = None
    lock = None


def _resident_and_data() -> tuple[int, int]:
    """(resident bytes, data + stack bytes) of this process (Linux /proc/self/statm)."""
    with open("/proc/self/statm", "rb") as handle:
        fields = handle.read().split()
    page = os.sysconf("SC_PAGE_SIZE")
    return int(fields[1]) * page, int(fields[5]) * page


def watch_parse_memory() -> None:
    """In a parse worker, at its start: watch the memory of each parse (``parse_budget``).
    A no-op where /proc or RLIMIT_DATA is missing (not Linux)."""
    import resource
    import threading

    try:
        _resident_and_data()
        _Watch.soft = resource.getrlimit(resource.RLIMIT_DATA)[0]
    except (OSError, ValueError, AttributeError, IndexError):
        return
    _Watch.lock = threading.Lock()
    _Watch.thread = threading.Thread(target=_watch, name="scaletrace-memory", daemon=True)
    _Watch.thread.start()


def parse_budget(json_bytes: int) -> None:
    """A parse of ``json_bytes`` of JSON starts in this process: its cap is the memory resident
    now (the file's bytes included) + PARSE_HEADROOM + PARSE_BYTES_PER_JSON_BYTE × the JSON.
    Does nothing outside a watched worker."""
    if _Watch.thread is None:
        return
    import resource

    parse_done()
    _Watch.json_bytes = json_bytes
    try:  # the peak resident size (VmHWM) from now on: what a phase holding the GIL reached
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        pass
    resident, data = _resident_and_data()
    _Watch.cap = resident + PARSE_HEADROOM + PARSE_BYTES_PER_JSON_BYTE * json_bytes
    # a backstop against a runaway while the watcher cannot run (a C call that holds the GIL): mapped
    # memory is far more than resident memory (malloc arenas, the address space simdjson reserves,
    # ~6 × the JSON, mostly never touched), so it may grow by 4 × the cap's growth and that
    hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
    backstop = data + 4 * (PARSE_HEADROOM + PARSE_BYTES_PER_JSON_BYTE * json_bytes) + 6 * json_bytes
    if hard == resource.RLIM_INFINITY or backstop < hard:
        _Watch.tripped = None  # the limit is changed: parse_done restores it
        resource.setrlimit(resource.RLIMIT_DATA, (backstop, hard))


def parse_done() -> None:
    """The parse is over (or failed): no cap, and the data-segment limit as it was."""
    if _Watch.thread is None:
        return
    with _Watch.lock:
        _Watch.cap = None
        if _Watch.tripped is not False:
            import resource

            _Watch.tripped = False
            resource.setrlimit(resource.RLIMIT_DATA, (_Watch.soft, resource.getrlimit(resource.RLIMIT_DATA)[1]))


def over_budget() -> str | None:
    """Why the current parse failed, when it went past its cap (its MemoryError is the cap's)."""
    if _Watch.thread is None or _Watch.cap is None:
        return None
    if not _Watch.tripped and _peak_resident() <= _Watch.cap:
        return None
    return (f"parsing it needs more memory than a parse may take ({size_text(PARSE_HEADROOM)} + "
            f"{PARSE_BYTES_PER_JSON_BYTE} × its {size_text(_Watch.json_bytes)} of JSON)")


def _peak_resident() -> int:
    """The peak resident size (VmHWM) since parse_budget reset it; 0 where unknown."""
    try:
        with open("/proc/self/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _watch() -> None:
    import resource
    import time

    while True:
        time.sleep(WATCH_INTERVAL_S)
        if _Watch.cap is None or _Watch.tripped:
            continue
        try:
            resident, data = _resident_and_data()
            with _Watch.lock:
                if _Watch.cap is None or resident <= _Watch.cap or _Watch.tripped:
                    continue
                hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
                limit = data if hard == resource.RLIM_INFINITY else min(data, hard)
                _Watch.tripped = True
                resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
        except (OSError, ValueError):
            return
