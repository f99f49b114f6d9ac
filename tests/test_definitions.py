"""Metric definitions are read from the package on every connection, never from an old database.

The database file keeps copies of the macros and reference tables for the
plain duckdb CLI; scaletrace registers its own as TEMP objects, which shadow
them.  Corrupting the stored copies with plain duckdb, or editing a definition
in the package, shows which one a query uses.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import duckdb
import polars as pl
import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from scaletrace import queries
from scaletrace.cli import main
from scaletrace.pipeline import connect, ingest
from scaletrace.pipeline.store import runsync, schema
from scaletrace.pipeline.store.export import export_parquet
from scaletrace.pipeline.synth import SynthRun, write_run
from scaletrace.queries import definitions
from scaletrace.reports import data as report_data
from scaletrace.reports.findings import findings

# Stored-copy corruptions, written with plain duckdb: exposed comm ×3 and span ×2 in
# window_breakdown (through a copy of the stored body, so whatever version wrote it), device peaks
# ÷10 (MFU ×10), dtype sizes ×3 (bytes and bandwidths ×3).
CORRUPT = [
    "CREATE OR REPLACE MACRO window_breakdown_v0(per_step, run) AS TABLE {window_breakdown}",
    "CREATE OR REPLACE MACRO window_breakdown(per_step, run) AS TABLE SELECT * REPLACE "
    "(2 * span_ns AS span_ns, 3 * exposed_comm_ns AS exposed_comm_ns) FROM window_breakdown_v0(per_step, run)",
    "UPDATE device_peaks SET bf16 = bf16 / 10, fp16 = fp16 / 10, tf32 = tf32 / 10, fp32 = fp32 / 10",
    "UPDATE dtype_sizes SET bytes = bytes * 3",
]
CLI_QUERIES = ("rank_breakdown", "run_summary", "collectives")


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """Two generated runs of one sweep (comm, sizes, a straggler, the device peak table for MFU:
    peak_flops unset) and the hand-written micro traces."""
    tmp = tmp_path_factory.mktemp("defs")
    for n in (2, 4):
        write_run(tmp / "traces", SynthRun(f"x{n}", ranks=n, steps=2, tp=2, tp_comm_us=20, straggler_rank=1,
                                           straggler_delay_us=30, workload="x", peak_flops=None))
    return [tmp / "traces", *sorted(FIXTURES.glob("micro-*"))]


def _ingest(traces, db):
    report = ingest(traces, db=db, workers=1)
    assert not report.errors, [o.line() for o in report.errors]
    return db


def _rows(df: pl.DataFrame) -> list:
    return sorted(tuple(f"{v:.12g}" if isinstance(v, float) else str(v) for v in row) for row in df.rows())


def _answers(db) -> dict:
    """Every query, the CLI's CSV of a few, and the report's tables and findings."""
    with connect(db) as database:
        out = {name: _rows(database.query(name)) for name in queries.names()}
        data = report_data.load(database)
    for name in CLI_QUERIES:
        result = CliRunner().invoke(main, ["query", name, "--db", str(db), "--format", "csv"])
        assert result.exit_code == 0, result.output
        out[f"cli {name}"] = result.stdout
    for table in ("runs", "scaling", "breakdown", "exposed_by_group", "collectives", "bandwidth", "rank_wait"):
        out[f"report {table}"] = _rows(getattr(data, table))
    out["report findings"] = findings(data)
    return out


def _plain(db, sql: str):
    with duckdb.connect(str(db), read_only=True) as con:
        return con.sql(sql).fetchall()


def _corrupt(db) -> None:
    with duckdb.connect(str(db)) as con:
        body = con.sql("SELECT macro_definition FROM duckdb_functions() WHERE function_name = 'window_breakdown' "
                       "AND database_name = current_database()").fetchall()[0][0]
        for sql in CORRUPT:
            con.execute(sql.format(window_breakdown=body))


def test_corrupted_stored_definitions_do_not_reach_scaletrace(traces, tmp_path):
    db = _ingest(traces, tmp_path / "t.duckdb")
    exposed_sql = "SELECT sum(exposed_comm_ns) FROM window_breakdown(false, NULL)"
    clean, exposed = _answers(db), _plain(db, exposed_sql)
    assert exposed[0][0] > 0 and any(r[0] is not None for r in _plain(db, "SELECT bf16 FROM device_peaks"))
    _corrupt(db)
    # plain duckdb now reads the corrupted copies: the corruption is real ...
    assert _plain(db, exposed_sql)[0][0] == 3 * exposed[0][0]
    # ... and scaletrace does not see it: queries, CLI and report unchanged
    corrupted = _answers(db)
    assert corrupted.keys() == clean.keys()
    for key in clean:
        assert corrupted[key] == clean[key], key


def _temp_macros(db: Path) -> int:
    with connect(db) as database:
        return database.sql("SELECT count(*) FROM duckdb_functions() WHERE database_name = 'temp' "
                            "AND function_type = 'table_macro'").item()


def test_a_reader_uses_the_stored_copies_only_while_they_are_this_versions(traces, tmp_path):
    """Opening a file written by this version costs a check, not the ~25 CREATEs of the TEMP copies
    (every open paid them); once a stored copy is replaced, the reader makes its own again."""
    db = _ingest(traces, tmp_path / "t.duckdb")
    assert _temp_macros(db) == 0
    _corrupt(db)
    assert _temp_macros(db) == sum(d.kind == "macro" for d in definitions.load())


def test_the_check_is_asked_once_per_state_of_the_file(traces, tmp_path, monkeypatch):
    """A process opening one file many times checks its stored copies once (schema._definitions_current),
    and again once the file is written; here every stat is trusted at once (runsync.RACY_NS), and the
    write gets a later mtime, as a write a tick later would."""
    db = _ingest(traces, tmp_path / "t.duckdb")
    monkeypatch.setattr(runsync, "RACY_NS", -2**62)
    asked = []
    real = schema.stored_definitions_current
    monkeypatch.setattr(schema, "stored_definitions_current", lambda con: asked.append(1) or real(con))
    assert [_temp_macros(db) for _ in range(3)] == [0, 0, 0] and len(asked) == 1
    _corrupt(db)
    stamp = db.stat().st_mtime_ns + 10**9
    os.utime(db, ns=(stamp, stamp))
    assert _temp_macros(db) == sum(d.kind == "macro" for d in definitions.load()) and len(asked) == 2
    assert _temp_macros(db) > 0 and len(asked) == 2
    (tmp_path / "t.duckdb.wal").write_bytes(b"")  # a write-ahead log (empty: nothing to replay) appears
    assert _temp_macros(db) > 0 and len(asked) == 3  # asked again


def test_every_write_refreshes_the_stored_copies(traces, tmp_path):
    """For the plain duckdb CLI: an ingest (even of unchanged files) rewrites the stored copies."""
    db = _ingest(traces, tmp_path / "t.duckdb")
    sql = "SELECT sum(exposed_comm_ns), sum(span_ns) FROM window_breakdown(false, NULL)"
    before = _plain(db, sql)
    _corrupt(db)
    assert _plain(db, sql) != before
    report = ingest(traces, db=db, workers=1)
    assert report.count("unchanged") > 0 and not report.errors
    assert _plain(db, sql) == before


def test_a_definition_edited_in_the_package_reaches_old_files_and_exports(traces, tmp_path, monkeypatch):
    """A file ingested before a definition changed, and its Parquet export, both answer with the
    package's definition (they used to differ: the file kept the definition it was written with)."""
    db = _ingest(traces, tmp_path / "t.duckdb")
    export_parquet(db, tmp_path / "pq")
    original = {}
    for src in (db, tmp_path / "pq"):
        with connect(src) as database:
            original[src] = database.query("rank_breakdown")
    # the package's window_breakdown edited: exposed comm = cc − compute + 1000 ns
    edited = tmp_path / "macros"
    shutil.copytree(definitions.MACRO_DIR, edited)
    path = edited / "window_breakdown.sql"
    text = path.read_text()
    assert text.count("cc_ns - compute_ns AS exposed_comm_ns") == 1
    path.write_text(text.replace("cc_ns - compute_ns AS exposed_comm_ns", "cc_ns - compute_ns + 1000 AS exposed_comm_ns"))
    monkeypatch.setattr(definitions, "MACRO_DIR", edited)
    for src in (db, tmp_path / "pq"):
        with connect(src) as database:
            now = database.query("rank_breakdown")
        was = original[src]
        has_span = was["span_ns"].is_not_null()
        assert now.filter(has_span)["exposed_comm_ns"].to_list() == \
            [v + 1000 for v in was.filter(has_span)["exposed_comm_ns"].to_list()], src
    with connect(db) as a, connect(tmp_path / "pq") as b:
        assert _rows(a.query("rank_breakdown")) == _rows(b.query("rank_breakdown"))


def test_reading_leaves_the_file_untouched(traces, tmp_path):
    """Registration needs no write access: the read-only connection changes nothing in the file."""
    db = _ingest(traces, tmp_path / "t.duckdb")
    before = db.read_bytes()
    with connect(db) as database:
        database.query("run_summary")
    assert db.read_bytes() == before


def _write_defs(root, files: dict[str, str]):
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


HEAD = "-- name: {name}\n-- description: d\n-- grain: g\n"
GOOD_TABLE = {"reference/t.sql": HEAD.format(name="t") + "SELECT 1 AS x\n"}


@pytest.mark.parametrize("files, error", [
    ({"macros/a.sql": HEAD.format(name="a") + "-- depends: t, gone\nSELECT * FROM t\n"},
     r"depends on gone, which no file"),
    ({"macros/a.sql": HEAD.format(name="a") + "-- param: run VARCHAR r\nSELECT * FROM t\n"},
     r"declared dependencies \[\] differ from the definitions it uses \['t'\]"),
    ({"macros/a.sql": HEAD.format(name="a") + "-- depends: b, t\nSELECT * FROM b(), t\n",
      "macros/b.sql": HEAD.format(name="b") + "-- depends: a\nSELECT * FROM a()\n"},
     r"cycle: (a -> b -> a|b -> a -> b)"),
    ({"macros/a.sql": HEAD.format(name="a") + "CREATE MACRO a() AS TABLE SELECT 1\n"},
     r"one SELECT after the header"),
    ({"macros/a.sql": HEAD.format(name="a") + "SELECT 1 AS x; DROP TABLE t\n"}, r"one SELECT after the header"),
    ({"macros/a.sql": HEAD.format(name="a") + "SELECT ';' AS x FROM t /* ; */; DELETE FROM t\n"},
     r"one SELECT after the header"),
    ({"macros/a.sql": HEAD.format(name="b") + "SELECT 1\n"}, r"header needs '-- name: a'"),
    ({"macros/t.sql": HEAD.format(name="t") + "SELECT 2 AS x\n"}, r"'t' is also defined by"),
    ({"reference/u.sql": HEAD.format(name="u") + "-- param: run VARCHAR r\nSELECT 1\n"}, r"takes no parameters"),
])
def test_the_loader_refuses_bad_definitions(files, error, tmp_path, monkeypatch):
    _write_defs(tmp_path, {**GOOD_TABLE, **files})
    monkeypatch.setattr(definitions, "MACRO_DIR", tmp_path / "macros")
    monkeypatch.setattr(definitions, "REFERENCE_DIR", tmp_path / "reference")
    with pytest.raises(queries.QueryError, match=error):
        definitions.load()


def test_dependencies_are_created_first(tmp_path, monkeypatch):
    """File order is alphabetical; creation order follows `depends` (DuckDB binds at creation)."""
    _write_defs(tmp_path, {**GOOD_TABLE,
                           "macros/a.sql": HEAD.format(name="a") + "-- param: k BIGINT k\n-- depends: b\n"
                                                                     "SELECT x + k AS y FROM b()\n",
                           "macros/b.sql": HEAD.format(name="b") + "-- depends: t\nSELECT x FROM t\n"})
    monkeypatch.setattr(definitions, "MACRO_DIR", tmp_path / "macros")
    monkeypatch.setattr(definitions, "REFERENCE_DIR", tmp_path / "reference")
    assert [d.name for d in definitions.load()] == ["t", "b", "a"]
    con = duckdb.connect()
    definitions.register(con)
    assert con.sql("SELECT y FROM a(41)").fetchall() == [(42,)]


@pytest.mark.parametrize("body, one", [
    ("SELECT 1", True), ("WITH a AS (SELECT 1 AS x) SELECT * FROM a", True), ("FROM t", True),
    ("SELECT ';' AS x, \"a;b\" FROM t -- ;\n/* ; */", True), ("SELECT 'it''s;' AS x", True),
    ("SELECT 1; DROP TABLE t", False), ("DELETE FROM t", False), ("SELECT 'a'';'; SELECT 2", False),
    ("CREATE MACRO m() AS TABLE SELECT 1", False),
])
def test_the_loaders_lexical_check_finds_one_query(body, one):
    """The loader's cheap check agrees with DuckDB's parser on each case (one statement, a SELECT)."""
    statements = duckdb.extract_statements(body)
    assert (len(statements) == 1 and statements[0].type == duckdb.StatementType.SELECT) == one
    assert definitions.one_query(body) == one


@pytest.mark.parametrize("definition", [d.name for d in definitions.load()])
def test_every_definition_is_one_select_to_duckdbs_parser(definition):
    """What the loader checks lexically, DuckDB's own parser confirms for every shipped file."""
    statements = duckdb.extract_statements(next(d for d in definitions.load() if d.name == definition).body)
    assert len(statements) == 1 and statements[0].type == duckdb.StatementType.SELECT


@pytest.mark.parametrize("definition", [d.name for d in definitions.load()])
def test_every_definition_documents_itself(definition):
    d = next(d for d in definitions.load() if d.name == definition)
    assert d.description and d.grain
    header = d.path.read_text().split(d.body)[0]
    assert "Units:" in header, f"{d.path}: the header should state the units"


def test_the_report_reads_only_query_files():
    """reports/ holds no SQL: every number it shows comes from a query file (one definition each)."""
    for path in sorted(Path(report_data.__file__).parent.glob("*.py")):
        text = path.read_text()
        assert ".sql(" not in text and ".execute(" not in text and not re.search(r"\b(SELECT|FROM|WITH)\s", text), path


def test_a_shared_per_run_macro_answers_each_run_as_computed_alone(traces, tmp_path):
    """definitions.SHARED_PER_RUN: a macro computed once for every run gives each run what it gives
    that run alone, and a connection then answers from the shared table."""
    db = _ingest(traces, tmp_path / "shared.duckdb")
    with connect(db) as database:
        runs = database.sql("SELECT run_id FROM runs ORDER BY 1")["run_id"].to_list()
        assert len(runs) > 2
        alone = {(name, run): _rows(database.sql(f"SELECT * FROM {name}($run)", {"run": run}))
                 for name in definitions.SHARED_PER_RUN for run in runs}
        for name in definitions.SHARED_PER_RUN:
            every = database.sql(f"SELECT * FROM {name}(NULL)")
            for run in runs:
                assert _rows(every.filter(pl.col("run_id") == run)) == alone[name, run], (name, run)
        database.query("run_summary", run_id=runs[0])  # one run's question computes that run only
        assert not database.sql("SELECT * FROM duckdb_tables() WHERE table_name LIKE '%\\_\\_all' ESCAPE '\\'").height
        summary = database.query("run_summary")  # every run's: shared from now on
        for name in definitions.SHARED_PER_RUN:
            assert database.sql(f"SELECT count(*) AS n FROM {name}__all")["n"][0] == len(runs)
            for run in runs:
                assert _rows(database.sql(f"SELECT * FROM {name}($run)", {"run": run})) == alone[name, run]
    with connect(db) as fresh:  # unshared, the same answer
        assert _rows(summary) == \
            _rows(fresh._run(queries.load("run_summary").sql, {"run_id": None}))
