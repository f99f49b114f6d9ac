"""The collector's per-rank logs beside the traces: step times and power samples.

``rank{r}.steps.jsonl``: one JSON object per optimizer step, ``{"step", "start_ns",
"dur_ns", "tokens", "profiled"}`` (every step; ``start_ns`` wall clock, ``dur_ns`` on the device
where the job used one; other keys, such as the collector's ``clock``, are ignored).  ``rank{r}.power.jsonl``:
``{"ts_ns", "watts"}`` NVML samples during the profiled window.  Each file is
replaced as a whole, in one transaction, when its sha256 changes.  A log is decoded in one
msgspec call and inserted as one Arrow table (tests/bench/sidefiles.py: ~1 s for 200,000 steps,
where row-by-row inserts took ~68 s).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import msgspec

from scaletrace.pipeline.common import limits

if TYPE_CHECKING:
    import pyarrow as pa

SIDE_RE = re.compile(r"^rank(\d+)\.(steps|power)\.jsonl$")


# What the queries compute with: a step of 0 ns is a division by zero in the
# report and `project`, one of 2^63 - 1 ns overflows run_summary's arithmetic for every run.
# Times share the traces' bounds (limits.TIME_MIN_NS .. TIME_MAX_NS); a step lasts 1 ns to 2^50 ns
# (13 days); tokens, when given, are 1 to 2^53; watts 0 to 10^6 per device.
StepNumber = Annotated[int, msgspec.Meta(ge=0, le=2**53)]
TimeNs = Annotated[int, msgspec.Meta(ge=limits.TIME_MIN_NS, le=limits.TIME_MAX_NS)]
StepNs = Annotated[int, msgspec.Meta(ge=1, le=2**50)]
Tokens = Annotated[int, msgspec.Meta(ge=1, le=2**53)]
Watts = Annotated[float, msgspec.Meta(ge=0, le=1e6)]


class StepRecord(msgspec.Struct):
    step: StepNumber
    start_ns: TimeNs
    dur_ns: StepNs
    tokens: Optional[Tokens] = None
    profiled: bool = False


class PowerRecord(msgspec.Struct):
    ts_ns: TimeNs
    watts: Watts


TABLES = {"steps": ("step_log", StepRecord), "power": ("power_samples", PowerRecord)}
_DECODERS = {kind: msgspec.json.Decoder(list[struct]) for kind, (_, struct) in TABLES.items()}


def side_files(run_dir: Path) -> list[tuple[Path, int, str]]:
    """(path, rank, kind) of the collector logs in a run directory."""
    found = []
    for path in sorted(run_dir.glob("rank*.jsonl")):
        match = SIDE_RE.match(path.name)
        if match:
            found.append((path, int(match.group(1)), match.group(2)))
    return found


def read(path: Path, kind: str, known_sha: str | None = None) -> tuple[str, pa.Table | None]:
    """sha256 and the records as an Arrow table (the log table's columns less run_id and rank),
    or None for the records when the sha256 is ``known_sha`` (unchanged: not decoded); ValueError
    names the bad line, or says the file is not a regular file (a FIFO would block for ever,
    /dev/zero never ends) or is over the size limit."""
    raw = limits.read_regular(path, limits.MAX_SIDE_FILE_BYTES, "the side-file size limit")
    sha = hashlib.sha256(raw).hexdigest()
    return sha, None if sha == known_sha else decode(raw, kind)


def decode(raw: bytes, kind: str) -> pa.Table:
    """The records of a log's bytes, checked as :class:`StepRecord` / :class:`PowerRecord`.

    Every non-blank line is one record: the lines are decoded as one JSON array, in one call
    (200,000 steps in ~0.2 s), and each must be exactly one of its values.  A file that fails
    is decoded again line by line, so that the error names its first bad line as before."""
    struct = TABLES[kind][1]
    lines = list(filter(bytes.strip, raw.splitlines()))
    try:
        body = b"[" + b",".join(lines) + b"]"
        values = _RAW.decode(body)
        if not _one_value_a_line(values, lines):
            raise ValueError("a line is not one JSON value")  # "{...}, {...}" or a record split over lines
        del values
        records = _DECODERS[kind].decode(body)
    except (msgspec.MsgspecError, ValueError):
        _first_bad_line(raw, struct)
        raise  # not expected: every line decodes alone but not together
    return _table(records, struct)


_RAW = msgspec.json.Decoder(list[msgspec.Raw])


def _one_value_a_line(values: list, lines: list[bytes]) -> bool:
    """Whether the array's values are the lines, one each: same count and the same lengths (the
    values follow each other, so equal lengths mean equal spans), else the same stripped text."""
    if len(values) != len(lines):
        return False
    if list(map(len, values)) == list(map(len, lines)):
        return True
    return all(bytes(v) == line.strip() for v, line in zip(values, lines))  # lines with spaces around


def _first_bad_line(raw: bytes, struct) -> None:
    decoder = msgspec.json.Decoder(struct)
    for number, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            decoder.decode(line)
        except msgspec.MsgspecError as exc:
            raise ValueError(f"line {number}: {exc}") from None


def _table(records: list, struct) -> pa.Table:
    """Columns by field, built from numpy buffers (no per-row inserts)."""
    import numpy as np
    import pyarrow as pa

    from scaletrace.pipeline.read import arrays

    n = len(records)
    columns = {}
    for name in struct.__struct_fields__:
        values = [getattr(r, name) for r in records]
        if name == "tokens":  # optional
            columns[name] = arrays.int64(values)
        elif name == "profiled":
            columns[name] = pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(np.packbits(
                np.fromiter(values, dtype=bool, count=n), bitorder="little"))])
        elif name == "watts":
            columns[name] = arrays.numeric(np.fromiter(values, dtype=np.float64, count=n))
        else:
            columns[name] = arrays.numeric(np.fromiter(values, dtype=np.int64, count=n))
    return pa.table(columns)


def write(con, path: Path, run_id: str, rank: int, kind: str, sha: str, records: pa.Table) -> None:
    """Replace the log's rows (those of ``run_id`` and ``rank``) with ``records``, in one transaction."""
    table, struct = TABLES[kind]
    fields = ", ".join(struct.__struct_fields__)
    con.execute("BEGIN")
    try:
        con.execute(f"DELETE FROM {table} WHERE run_id = ? AND rank = ?", [run_id, rank])
        if len(records):
            con.register("_side_records", records)
            try:
                con.execute(f"INSERT INTO {table} (run_id, rank, {fields}) SELECT ?, ?, {fields} FROM _side_records",
                            [run_id, rank])
            finally:
                con.unregister("_side_records")
        con.execute("INSERT OR REPLACE INTO side_files VALUES (?, ?, ?, ?, ?, ?)",
                    [str(path), run_id, rank, kind, sha, len(records)])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
