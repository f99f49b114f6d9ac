"""A new database is a copy of the template (pipeline/store/template.py): the same file, table by
table and definition by definition, as one set up in place; a damaged template is never
copied; a file that appears meanwhile is never replaced; an unwritable cache only means the
set-up runs in place."""

from __future__ import annotations

import hashlib
import os

import duckdb
import pytest

from scaletrace.pipeline.execute.ingest import ingest
from scaletrace.pipeline.common import cachefiles
from scaletrace.pipeline.store import runsync, template
from scaletrace.pipeline.synth import SynthRun, write_run
from scaletrace.queries import definitions


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("SCALETRACE_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def run(tmp_path):
    return write_run(tmp_path / "runs", SynthRun("s", ranks=2, steps=2, step_us=1000, compute_us=300,
                                                 kernels_per_step=3, workload="w"))


def _registered(monkeypatch) -> list:
    """Each definitions.register call's ``persist`` from now on."""
    calls = []
    real = definitions.register
    monkeypatch.setattr(definitions, "register", lambda con, persist=False: calls.append(persist) or real(con, persist))
    return calls


def _contents(db) -> dict:
    """What a set-up and an ingest leave in ``db``: every column, the stored macros and their
    fingerprint, and each table's rows (without the times they were written)."""
    with duckdb.connect(str(db), read_only=True) as con:
        columns = con.execute("SELECT table_name, column_name, data_type FROM duckdb_columns() "
                              "WHERE database_name = current_database() AND schema_name = 'main' ORDER BY ALL").fetchall()
        kept: dict[str, list[str]] = {}
        for table, column, kind in columns:
            if not kind.startswith("TIMESTAMP"):
                kept.setdefault(table, []).append(f'"{column}"')
        return {
            "columns": columns,
            "macros": con.execute("SELECT function_name, parameters FROM duckdb_functions() WHERE "
                                  "database_name = current_database() AND function_type = 'table_macro' "
                                  "ORDER BY ALL").fetchall(),
            "fingerprint": definitions.stored_fingerprint(con),
            "rows": {t: sorted(map(repr, con.execute(f"SELECT {', '.join(c)} FROM {t}").fetchall()))
                     for t, c in kept.items()},
        }


def test_a_copy_is_the_file_a_set_up_in_place_writes(tmp_path, cache, run, monkeypatch):
    in_place, copied = tmp_path / "in_place.duckdb", tmp_path / "copied.duckdb"
    monkeypatch.setenv("SCALETRACE_CACHE_DIR", str(tmp_path / "not-a-folder"))
    (tmp_path / "not-a-folder").write_text("a file where the cache folder would be")
    # the files were just written: whether an ingest trusts their stat (traces.stat_key, NULL within
    # runsync.RACY_NS of a write) would depend on how long the ingests below take; trust it in all three
    monkeypatch.setattr(runsync, "RACY_NS", -2**62)
    calls = _registered(monkeypatch)
    assert not ingest([run], db=in_place, workers=1).errors
    assert calls == [True]  # set up in place: the cache cannot be written
    monkeypatch.setenv("SCALETRACE_CACHE_DIR", str(cache))
    assert not ingest([run], db=tmp_path / "first.duckdb", workers=1).errors
    assert calls == [True, True]  # the template's own set-up
    assert not ingest([run], db=copied, workers=1).errors
    assert calls == [True, True]  # a copy: no DDL, no CREATE MACRO
    assert _contents(copied) == _contents(in_place)
    with duckdb.connect(str(copied), read_only=True) as con:  # the stat keys were compared, not NULLs
        assert con.execute("SELECT count(*) FROM traces WHERE stat_key IS NULL").fetchall() == [(0,)]
    with duckdb.connect(str(copied), read_only=True) as con:  # the stored macros answer (the plain duckdb CLI's way)
        assert con.execute("SELECT count(DISTINCT trace_id) FROM window_breakdown(false, NULL)").fetchall() == [(2,)]
    assert [p.suffix for p in cache.iterdir()] == [".duckdb"]  # one template, nothing staged left


def test_a_damaged_template_is_built_again(tmp_path, cache, run, monkeypatch):
    assert template.place(tmp_path / "a.duckdb")
    (built,) = cache.glob("*.duckdb")
    data = bytearray(built.read_bytes())
    data[len(data) // 2] ^= 0xFF
    built.write_bytes(bytes(data))
    calls = _registered(monkeypatch)
    db = tmp_path / "b.duckdb"
    assert not ingest([run], db=db, workers=1).errors
    assert calls == [True]  # the template set up again, then copied
    assert _contents(db)["fingerprint"] == _contents(tmp_path / "a.duckdb")["fingerprint"]
    (rebuilt,) = cache.glob("*.duckdb")
    assert hashlib.sha256(rebuilt.read_bytes()).hexdigest()[:32] == rebuilt.stem.rsplit(".", 1)[-1]


def test_a_file_created_meanwhile_is_never_replaced(tmp_path, cache, monkeypatch):
    db = tmp_path / "raced.duckdb"
    real = template._template

    def another_process_wins():
        data = real()
        db.write_bytes(b"written by another process")
        return data

    monkeypatch.setattr(template, "_template", another_process_wins)
    assert not template.place(db)
    assert db.read_bytes() == b"written by another process"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "raced.duckdb"]  # no staged copy left


def test_existing_files_and_logs_are_left_alone(tmp_path, cache):
    empty = tmp_path / "empty.duckdb"
    empty.write_bytes(b"")
    assert not template.place(empty) and empty.read_bytes() == b""
    orphan = tmp_path / "wal-only.duckdb"
    (tmp_path / "wal-only.duckdb.wal").write_bytes(b"a log with no file")
    assert not template.place(orphan) and not orphan.exists()
    assert not template.place(":memory:")
    assert not template.place(tmp_path / "no-such-folder" / "x.duckdb")


def test_the_copy_has_the_mode_of_a_new_file(tmp_path, cache):
    old = os.umask(0o027)
    try:
        assert template.place(tmp_path / "a.duckdb")
    finally:
        os.umask(old)
    assert (tmp_path / "a.duckdb").stat().st_mode & 0o777 == 0o666 & ~0o027


def test_the_newest_templates_are_kept(tmp_path, cache):
    cache.mkdir()
    for age in range(6):
        old = cache / f"{age:016x}.{'0' * 32}.duckdb"
        old.write_bytes(b"an older version's template")
        os.utime(old, (1_000_000 + age, 1_000_000 + age))
    assert template.place(tmp_path / "a.duckdb")
    kept = sorted(p.name for p in cache.glob("*.duckdb"))
    assert len(kept) == cachefiles.KEEP
    assert f"{5:016x}.{'0' * 32}.duckdb" in kept and f"{0:016x}.{'0' * 32}.duckdb" not in kept
