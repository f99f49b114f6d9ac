"""A no-op re-ingest leaves a database set up by this version as it is: no DDL, no CREATE MACRO;
a file set up by another version (another digest), or whose stored definitions were replaced,
is set up again."""

from __future__ import annotations

import duckdb

from scaletrace.pipeline.store import schema
from scaletrace.pipeline.execute.ingest import ingest
from scaletrace.pipeline.synth import SynthRun, write_run
from scaletrace.queries import definitions


def _run(tmp_path):
    return write_run(tmp_path / "runs", SynthRun("s", ranks=2, steps=2, step_us=1000, compute_us=300,
                                                 kernels_per_step=3, workload="w"))


def test_set_up_once(tmp_path, monkeypatch):
    run, db = _run(tmp_path), tmp_path / "t.duckdb"
    assert not ingest([run], db=db, workers=1).errors
    calls = []
    real = definitions.register
    monkeypatch.setattr(definitions, "register", lambda con, persist=False: calls.append(persist) or real(con, persist))
    report = ingest([run], db=db, workers=1)
    assert report.count("unchanged") == 2 and not report.errors
    assert calls == []  # nothing rewritten
    monkeypatch.setattr(schema, "setup_digest", lambda: "another version")
    assert not ingest([run], db=db, workers=1).errors
    assert calls == [True]
    with duckdb.connect(str(db)) as con:
        assert con.execute("SELECT value FROM meta WHERE key = 'setup_sha256'").fetchall() == [("another version",)]


def test_a_replaced_stored_macro_is_written_again(tmp_path, monkeypatch):
    run, db = _run(tmp_path), tmp_path / "t.duckdb"
    assert not ingest([run], db=db, workers=1).errors
    with duckdb.connect(str(db)) as con:
        con.execute("CREATE OR REPLACE MACRO window_unions(per_step, run) AS TABLE SELECT 1 AS x")
        con.execute("UPDATE dtype_sizes SET bytes = bytes * 2")
    assert not ingest([run], db=db, workers=1).errors
    with duckdb.connect(str(db)) as con:
        assert definitions.stored_fingerprint(con) == con.execute(
            "SELECT value FROM meta WHERE key = 'definitions_md5'").fetchall()[0][0]
        assert con.execute("SELECT count(*) FROM dtype_sizes WHERE bytes > 16").fetchall()[0][0] == 0
        body = con.execute("SELECT macro_definition FROM duckdb_functions() WHERE function_name = 'window_unions' "
                           "AND database_name = current_database()").fetchall()[0][0]
        assert "1 AS x" not in body
