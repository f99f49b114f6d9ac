"""A re-ingest skips a stored file whose stat is what it was when the file was read, without
reading it (pipeline/store/runsync.py, ``stat_key``); any other file is hashed, so an edit is
never missed: one that keeps the size and puts the mtime back changes the ctime, and one made
within the racy window after the read is hashed on the next ingest."""

from __future__ import annotations

import errno
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import duckdb
import pytest

from scaletrace.pipeline.common import limits
from scaletrace.pipeline.execute import workers
from scaletrace.pipeline.store import runsync
from scaletrace.pipeline.synth import SynthRun, write_run

ing = importlib.import_module("scaletrace.pipeline.execute.ingest")  # the package exports a function of that name


def _run(tmp_path):
    return write_run(tmp_path / "runs", SynthRun("s", ranks=2, steps=2, step_us=1000, compute_us=300,
                                                 kernels_per_step=3, workload="w"))


def _keys(db) -> dict[str, str | None]:
    with duckdb.connect(str(db), read_only=True) as con:
        return dict(con.execute("SELECT path, stat_key FROM traces").fetchall())


def _statuses(report) -> list[str]:
    return [o.status for o in report.outcomes if o.path.endswith(".json")]


def _no_reads(monkeypatch) -> None:
    """Any read of a trace file fails (the forked workers inherit it), and no worker pool starts."""
    read_regular = limits.read_regular

    def refuse(path, *args, **kwargs):
        if os.path.basename(path).startswith("rank"):  # run.json is read on every ingest
            raise OSError(errno.EACCES, "read refused by the test", str(path))
        return read_regular(path, *args, **kwargs)

    def no_pool(*args, **kwargs):
        raise AssertionError("a worker pool was started for unchanged files")

    monkeypatch.setattr(limits, "read_regular", refuse)
    monkeypatch.setattr(workers, "in_order", no_pool)


def test_an_unchanged_file_is_not_read(tmp_path, monkeypatch):
    run, db = _run(tmp_path), tmp_path / "t.duckdb"
    monkeypatch.setattr(runsync, "RACY_NS", 0)  # the files were written just now: trust their stat at once
    assert _statuses(ing.ingest([run], db=db, workers=1)) == ["ok", "ok"]
    assert all(_keys(db).values())
    _no_reads(monkeypatch)
    report = ing.ingest([run], db=db, workers=1)
    assert _statuses(report) == ["unchanged", "unchanged"] and not report.errors


# a fresh interpreter ingests ``argv[1]`` into ``argv[2]`` (the files were written just now: their stat
# is trusted at once) and prints which of the parser's modules it loaded
DRIVER = r"""
import json, sys
from scaletrace.pipeline.store import runsync
runsync.RACY_NS = 0
from scaletrace.pipeline.execute.ingest import ingest
report = ingest([sys.argv[1]], db=sys.argv[2], workers=1)
heavy = ("numpy", "pyarrow", "polars", "scaletrace.pipeline.read.extract", "concurrent.futures.process")
print(json.dumps({"statuses": sorted({o.status for o in report.outcomes}), "loaded": [m for m in heavy if m in sys.modules]}))
"""


def test_a_no_op_ingest_never_loads_the_parser(tmp_path):
    """Nothing to parse: neither numpy, pyarrow nor the parser is imported, and no pool is made (the
    no-op's fixed cost); the first ingest, which parses, loads them all."""
    run, db = _run(tmp_path), tmp_path / "t.duckdb"

    def ingest_in_a_new_process() -> dict:
        out = subprocess.run([sys.executable, "-c", DRIVER, str(run), str(db)], capture_output=True,
                             text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    first = ingest_in_a_new_process()
    assert "ok" in first["statuses"] and len(first["loaded"]) == 4, first  # polars: never by an ingest
    assert "polars" not in first["loaded"]
    again = ingest_in_a_new_process()
    assert again == {"statuses": ["unchanged"], "loaded": []}


def test_an_edit_that_keeps_size_and_mtime_is_parsed_again(tmp_path, monkeypatch):
    """``touch -d`` puts the mtime back, but no call sets the ctime: the stat differs, the file is hashed."""
    run, db = _run(tmp_path), tmp_path / "t.duckdb"
    monkeypatch.setattr(runsync, "RACY_NS", 0)
    assert _statuses(ing.ingest([run], db=db, workers=1)) == ["ok", "ok"]
    path = run / "rank1.json"
    before = path.stat()
    text = path.read_text()
    edited = text.replace('"rank": 1', '"rank": 3') if '"rank": 1' in text else text.replace('"rank":1', '"rank":3')
    assert edited != text and len(edited) == len(text)
    time.sleep(0.01)  # past the timestamp clock's tick: the ctime moves on
    path.write_text(edited)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    report = ing.ingest([run], db=db, workers=1)
    assert _statuses(report) == ["unchanged", "ok"] and report.outcomes[1].rank == 3


def test_a_same_size_edit_within_the_same_second_is_caught(tmp_path):
    """The racy case: the first ingest reads the files less than RACY_NS after they were written,
    so it stores no stat for them; an edit of the same size with the mtime put back, at once, is
    parsed again (it would be missed by a key of size and mtime trusted at once)."""
    run, db = _run(tmp_path), tmp_path / "t.duckdb"
    written_ns = max((run / f"rank{r}.json").stat().st_ctime_ns for r in (0, 1))
    assert _statuses(ing.ingest([run], db=db, workers=1)) == ["ok", "ok"]
    if time.time_ns() - written_ns < runsync.RACY_NS:  # each stat was taken within the window
        assert set(_keys(db).values()) == {None}
    path = run / "rank0.json"
    before = path.stat()
    text = path.read_text()
    edited = text.replace('"rank": 0', '"rank": 4') if '"rank": 0' in text else text.replace('"rank":0', '"rank":4')
    assert edited != text and len(edited) == len(text)
    path.write_text(edited)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    report = ing.ingest([run], db=db, workers=1)
    assert _statuses(report) == ["ok", "unchanged"] and report.outcomes[0].rank == 4


def test_a_hashed_unchanged_file_gets_its_stat(tmp_path, monkeypatch):
    """A file stored without a stat (racy when read) is hashed on the next ingest; unchanged, its
    stat is stored then, and the ingest after that does not read it."""
    run, db = _run(tmp_path), tmp_path / "t.duckdb"
    monkeypatch.setattr(runsync, "RACY_NS", 10**18)  # every stat racy: none stored
    assert _statuses(ing.ingest([run], db=db, workers=1)) == ["ok", "ok"]
    assert set(_keys(db).values()) == {None}
    monkeypatch.setattr(runsync, "RACY_NS", 0)
    assert _statuses(ing.ingest([run], db=db, workers=1)) == ["unchanged", "unchanged"]
    assert all(_keys(db).values())
    _no_reads(monkeypatch)
    assert _statuses(ing.ingest([run], db=db, workers=1)) == ["unchanged", "unchanged"]


RACY = runsync.RACY_NS
TAKEN = 100 * RACY  # the wall clock when the stat was taken


@pytest.mark.parametrize("mtime, ctime, trusted", [
    (TAKEN - RACY - 1, TAKEN - RACY - 1, True),  # last changed more than the window before the stat
    (TAKEN - RACY, TAKEN - RACY - 1, False),  # mtime just inside the window
    (TAKEN - RACY - 1, TAKEN - RACY, False),  # an old mtime (touch -d) but a recent change: ctime decides
    (TAKEN + 1, TAKEN + 1, False),  # changed after the clock was read (or stamped by a clock ahead)
])
def test_stat_key_is_none_inside_the_racy_window(mtime, ctime, trusted):
    info = SimpleNamespace(st_size=10, st_mtime_ns=mtime, st_ctime_ns=ctime, st_ino=7, st_dev=3)
    key = runsync.stat_key(info, TAKEN)
    assert (key is not None) == trusted
    if trusted:  # every field is in the key: a change of any one is a different key
        for field in ("st_size", "st_mtime_ns", "st_ctime_ns", "st_ino", "st_dev"):
            other = SimpleNamespace(**{**vars(info), field: getattr(info, field) - 1})
            assert runsync.stat_key(other, TAKEN) != key
