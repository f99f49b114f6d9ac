"""Step and power logs are decoded in one call and inserted as one Arrow table; the checks and
the one line naming the first bad line are those of a line-by-line read."""

from __future__ import annotations

import json

import duckdb
import pytest

from scaletrace.pipeline.store import schema
from scaletrace.pipeline.read import sidefiles

START = 1_700_000_000_000_000_000


def _steps(n: int) -> list[dict]:
    rows = []
    for i in range(n):
        row = {"step": i, "start_ns": START + i * 1_000_000, "dur_ns": 999_000 + i % 7}
        if i % 3:
            row["tokens"] = 4096 * (1 + i % 5)
        if i % 4 == 0:
            row["profiled"] = bool(i % 8)
        rows.append(row)
    return rows


def _text(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def test_rows_are_the_lines(tmp_path):
    """Every field of every line, as json.loads reads it (the reference), lands in step_log;
    blank lines and lines with spaces around them are fine."""
    rows = _steps(1000)
    raw = _text(rows[:500]) + b"\n   \n" + b"".join(b"  " + json.dumps(r).encode() + b" \r\n" for r in rows[500:])
    path = tmp_path / "rank3.steps.jsonl"
    path.write_bytes(raw)
    con = duckdb.connect(str(tmp_path / "t.duckdb"))
    con.execute(schema.SCHEMA_SQL.read_text())
    sha, records = sidefiles.read(path, "steps")
    sidefiles.write(con, path, "r", 3, "steps", sha, records)
    stored = con.execute("SELECT step, start_ns, dur_ns, tokens, profiled FROM step_log "
                         "WHERE run_id = 'r' AND rank = 3 ORDER BY step").fetchall()
    expected = [(r["step"], r["start_ns"], r["dur_ns"], r.get("tokens"), r.get("profiled", False)) for r in rows]
    assert stored == expected
    assert con.execute("SELECT rows FROM side_files").fetchall() == [(1000,)]


def test_power_samples(tmp_path):
    path = tmp_path / "rank0.power.jsonl"
    samples = [{"ts_ns": START + i, "watts": 250 + i / 3} for i in range(100)] + [{"ts_ns": START + 100, "watts": 7}]
    path.write_bytes(_text(samples))
    table = sidefiles.read(path, "power")[1]
    assert table.column("watts").to_pylist() == [s["watts"] for s in samples]
    assert table.column("ts_ns").to_pylist() == [s["ts_ns"] for s in samples]


@pytest.mark.parametrize("bad, reason", [
    ('{"step": 1, "start_ns": 5, "dur_ns": 0}', "Expected `int` >= 1 - at `$.dur_ns`"),
    ('{"step": 1, "start_ns": 5, "dur_ns": 3}, {"step": 2, "start_ns": 9, "dur_ns": 3}', "trailing characters"),
    ('{"step": 1, "start_ns": 5,', "truncated"),
    ('[1, 2]', "Expected `object`, got `array`"),
])
def test_the_first_bad_line_is_named(tmp_path, bad, reason):
    """One line: the line number of the first bad line and msgspec's reason, whatever the line's
    neighbours (a record split over two lines or two records on one line decode as an array too)."""
    rows = _steps(40)
    lines = [json.dumps(r) for r in rows]
    lines.insert(17, bad)
    if bad.endswith(","):
        lines.insert(18, '"dur_ns": 3}')  # the rest of the record on the next line: a valid array when joined
    path = tmp_path / "rank0.steps.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError) as exc:
        sidefiles.read(path, "steps")
    assert str(exc.value).startswith("line 18: ") and reason in str(exc.value), str(exc.value)


def test_split_and_doubled_records_that_balance_are_refused(tmp_path):
    """A record split over two lines and two records on another line give as many values as lines:
    still refused, at the first of those lines."""
    rows = [json.dumps(r) for r in _steps(10)]
    lines = rows[:3] + ['{"step": 90, "start_ns": 5,', '"dur_ns": 3}', rows[3] + ", " + rows[4]] + rows[5:]
    path = tmp_path / "rank0.steps.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match="^line 4: "):
        sidefiles.read(path, "steps")
