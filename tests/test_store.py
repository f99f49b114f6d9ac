"""Typed seams between the stages: what a worker returns, what the store writes, which tables."""

from __future__ import annotations

from dataclasses import fields

import duckdb
from conftest import FIXTURES

from scaletrace.pipeline.store import export, schema
from scaletrace.pipeline.read.classify import DEFAULT_RULES
from scaletrace.pipeline.read.extract import Extracted, TraceMeta
from scaletrace.pipeline.execute.ingest import ParsedFile, parse_file
from scaletrace.pipeline.store.write import TraceRow


def _columns() -> dict[str, list[str]]:
    con = duckdb.connect()
    con.execute(schema.SCHEMA_SQL.read_text())
    tables = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY table_name").fetchall()]
    return {t: [r[0] for r in con.execute(f"DESCRIBE {t}").fetchall()] for t in tables}


def test_the_table_list_is_the_ddl():
    ddl = _columns()
    assert set(schema.TABLES) == set(ddl)
    assert set(export.TABLES) == set(ddl) and set(export.PARTITIONED) <= set(ddl)


def test_trace_row_is_the_traces_table():
    """The store sets trace_id, status and ingested_at; every other column is a named field."""
    assert [f.name for f in fields(TraceRow)] == [c for c in _columns()["traces"]
                                                  if c not in ("trace_id", "status", "ingested_at")]


def test_extracted_tables_are_the_per_trace_tables():
    """Every table keyed by trace_id (other than traces) is one Extracted field of the same name,
    with the table's columns after trace_id, run_id and rank."""
    per_trace = {t: cols for t, cols in _columns().items() if "trace_id" in cols and t != "traces"}
    assert Extracted.TABLES == tuple(f.name for f in fields(Extracted) if f.name != "meta")
    assert set(Extracted.TABLES) == set(per_trace)
    parsed = parse_file(str(FIXTURES / "micro-2rank" / "rank0.json"), None, DEFAULT_RULES, False)
    assert isinstance(parsed, ParsedFile) and parsed.error is None and isinstance(parsed.extracted.meta, TraceMeta)
    for table in Extracted.TABLES:
        assert getattr(parsed.extracted, table).column_names == per_trace[table][3:], table


def test_parse_file_says_what_it_returns(tmp_path):
    path = FIXTURES / "micro-2rank" / "rank0.json"
    parsed = parse_file(str(path), None, DEFAULT_RULES, False)
    assert parsed.file_bytes == path.stat().st_size == parsed.json_bytes  # not gzipped
    again = parse_file(str(path), parsed.sha256, DEFAULT_RULES, False)
    assert (again.extracted, again.error) == (None, None)  # unchanged: skipped
    missing = parse_file(str(tmp_path / "nope.json"), None, DEFAULT_RULES, False)
    assert missing.sha256 is None and missing.error.startswith("cannot read file")


def test_a_repeated_query_is_answered_from_the_first_result(fixtures_db, monkeypatch):
    import polars as pl

    from scaletrace.pipeline import connect
    from scaletrace.pipeline.store import db as dbmodule

    ran = []
    real_run = dbmodule.Database._run
    monkeypatch.setattr(dbmodule.Database, "_run", lambda self, sql, params, **kw: ran.append(sql) or
                        real_run(self, sql, params, **kw))
    with connect(fixtures_db) as database:
        first = database.query("kernel_summary")
        n = len(ran)
        first = first.with_columns(pl.lit(0).alias("total_ns"))  # a caller's change stays the caller's
        again = database.query("kernel_summary")
        assert len(ran) == n  # no SQL ran for the repeat
        assert again.equals(database.query("kernel_summary")) and not again.equals(first)
        other = database.query("kernel_summary", run_id=again["run_id"][0])  # other parameters: asked anew
        assert len(ran) > n and other.height <= again.height
    with connect(fixtures_db) as database:  # a new Database asks anew
        database.query("kernel_summary")
        assert len(ran) > n + 1


def test_a_database_of_an_older_schema_is_one_line_naming_what_it_lacks_and_the_fix(fixtures_db, tmp_path):
    from conftest import copy_db

    from scaletrace.pipeline import connect, ingest
    from scaletrace.pipeline.store.schema import DatabaseError

    old = copy_db(fixtures_db, tmp_path / "old.duckdb")
    con = duckdb.connect(str(old))  # as a version before the column was added left it
    con.execute("ALTER TABLE device_events DROP COLUMN wait_stream")
    con.execute("UPDATE meta SET value = 'an older setup' WHERE key = 'setup_sha256'")
    con.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    con.close()
    try:
        connect(old)
    except DatabaseError as exc:
        message = str(exc)
    else:
        raise AssertionError("an older file opened as if current")
    assert message.startswith(f"{old}: written by an older scaletrace (schema version 1), without "
                              "device_events.wait_stream; bring it up to date with `scaletrace ingest /")
    assert message.endswith(f" --db {old}`") and "\n" not in message  # the run directories it holds, by name
    report = ingest(sorted(FIXTURES.glob("micro-*")), db=old, workers=1)  # the fix it names works
    assert not report.errors, [o.line() for o in report.errors]
    with connect(old) as database:
        assert database.query("kernel_summary").height > 0
