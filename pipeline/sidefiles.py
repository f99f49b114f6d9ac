"""The collector's per-rank logs beside the traces: step times and power samples.

``rank{r}.steps.jsonl``: one JSON object per optimizer step, ``{"step", "start_ns",
"dur_ns", "tokens", "profiled"}`` (wall clock, every step).  ``rank{r}.power.jsonl``:
``{"ts_ns", "watts"}`` NVML samples during the profiled window.  Each file is
replaced as a whole, in one transaction, when its sha256 changes.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Annotated, Optional

import msgspec

from scaletrace.pipeline import limits

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


def side_files(run_dir: Path) -> list[tuple[Path, int, str]]:
    """(path, rank, kind) of the collector logs in a run directory."""
    found = []
    for path in sorted(run_dir.glob("rank*.jsonl")):
        match = SIDE_RE.match(path.name)
        if match:
            found.append((path, int(match.group(1)), match.group(2)))
    return found


def read(path: Path, kind: str) -> tuple[str, list]:
    """sha256 and the decoded records; ValueError names the bad line, or says the file is not a
    regular file (a FIFO would block for ever, /dev/zero never ends) or is over the size limit."""
    raw = limits.read_regular(path, limits.MAX_SIDE_FILE_BYTES, "the side-file size limit")
    decoder = msgspec.json.Decoder(TABLES[kind][1])
    records = []
    for number, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(decoder.decode(line))
        except msgspec.MsgspecError as exc:
            raise ValueError(f"line {number}: {exc}") from None
    return hashlib.sha256(raw).hexdigest(), records


def write(con, path: Path, run_id: str, rank: int, kind: str, sha: str, records: list) -> None:
    table, struct = TABLES[kind]
    fields = struct.__struct_fields__
    con.execute("BEGIN")
    try:
        con.execute(f"DELETE FROM {table} WHERE run_id = ? AND rank = ?", [run_id, rank])
        if records:
            con.executemany(
                f"INSERT INTO {table} (run_id, rank, {', '.join(fields)}) "
                f"VALUES (?, ?{', ?' * len(fields)})",
                [[run_id, rank, *(getattr(r, f) for f in fields)] for r in records],
            )
        con.execute("INSERT OR REPLACE INTO side_files VALUES (?, ?, ?, ?, ?, ?)",
                    [str(path), run_id, rank, kind, sha, len(records)])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
