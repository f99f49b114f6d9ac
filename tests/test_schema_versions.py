"""Files written by older versions (docs/robustness.md, "Older files"): each earlier schema.sql the
history holds (tests/data/schemas, one file per commit that changed its columns, named by the
commit and numbered in the history's order: the 13th only moved the file) is either brought
up to this version by an ingest, whole, or refused with one line and the command that does it;
options that change the stored rows (--rules, --keep-python) make a stored trace not current; a
dataset part without one of its columns is named on open."""

from __future__ import annotations

import hashlib
import re
import shlex
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import cpu, kernel, write_trace

from scaletrace.pipeline.common.errors import DatabaseError
from scaletrace.pipeline.execute.dataset import ingest_parquet
from scaletrace.pipeline.execute.ingest import ingest
from scaletrace.pipeline.read.classify import DEFAULT_RULES, Rule
from scaletrace.pipeline.read.version import EXTRACT_VERSION
from scaletrace.pipeline.store import migrations, schema
from scaletrace.pipeline.store.db import connect
from scaletrace.pipeline.synth import sweep_specs, write_run

OLD_SCHEMAS = sorted((Path(__file__).parent / "data" / "schemas").glob("*.sql"))
OLDER_EXTRACT = "2-000000000000"  # an extract before this one (the number before wait_stream)
# answers compared between a file brought up to date and one ingested new: breakdowns, kernel
# families (from the launching op), collectives matched by their ordinal, CUDA-sync edges
COMPARED = ("rank_breakdown", "kernel_summary", "collective_skew", "rank_step_breakdown")


def test_schema_change_is_registered():
    """schema.sql's columns are the current version's: a change without a version bump and a
    migrations.MIGRATIONS entry fails here (the message gives the digest to record)."""
    assert sorted(migrations.MIGRATIONS) == list(range(1, int(schema.SCHEMA_VERSION) + 1))
    digest = schema.columns_digest()
    assert migrations.MIGRATIONS[int(schema.SCHEMA_VERSION)].columns_sha256 == digest, (
        f"pipeline/store/schema.sql changed: bump SCHEMA_VERSION and add MIGRATIONS[{int(schema.SCHEMA_VERSION) + 1}] "
        f"= Migration({digest!r}, ...) (docs/schema.md, 'Versions')")
    docs = (Path(__file__).parents[1] / "docs" / "schema.md").read_text()
    assert f"This is schema version **{schema.SCHEMA_VERSION}**" in docs, "docs/schema.md, 'Versions': say the version"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[Path]:
    """Two synthetic runs (1 and 2 ranks): kernels with families, a DP all_reduce per step."""
    root = tmp_path_factory.mktemp("runs")
    return [write_run(root, spec) for spec in sweep_specs([1, 2], steps=2, kernels_per_step=4, gzip=False)]


@pytest.fixture(scope="module")
def current(runs, tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("current") / "current.duckdb"
    report = ingest(runs, db, workers=1)
    assert report.count("ok") == 3
    return db


def answers(db: Path) -> dict:
    with connect(db) as con:
        return {name: con.query(name).sort(con.query(name).columns).rows() for name in COMPARED}


@pytest.fixture(scope="module")
def current_answers(current) -> dict:
    return answers(current)


VOLATILE = {"trace_id", "ingested_at", "updated_at", "stat_key", "logged_at"}  # ids and times of the ingest


def rows(db: Path) -> dict[str, list]:
    """Every stored row but the ingest log's, without ids and times: two files of the same traces hold the same."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        found = {}
        for table in schema.TABLES:
            if table in ("meta", "ingest_log"):
                continue
            columns = [c for c, _ in schema.expected_columns()[table] if c not in VOLATILE]
            listed = ", ".join(f'"{c}"' for c in columns)
            found[table] = sorted(map(repr, con.execute(f"SELECT {listed} FROM {table}").fetchall()))
        return found
    finally:
        con.close()


def old_file(text: str, current: Path, dst: Path, extract_version: str | None) -> Path:
    """A file as the version of ``text`` wrote it: its tables, its meta row, and the rows of
    ``current`` in the columns it had (traces marked with ``extract_version`` where it had that column)."""
    con = duckdb.connect(str(dst))
    con.execute(text)
    con.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    con.execute(f"ATTACH '{current}' AS cur (READ_ONLY)")
    old = {}
    for table, column in con.execute("SELECT table_name, column_name FROM duckdb_columns() WHERE database_name = "
                                     "current_database() AND schema_name = 'main'").fetchall():
        old.setdefault(table, []).append(column)
    for table, columns in old.items():
        if table != "meta":
            listed = ", ".join(f'"{c}"' for c in columns)
            con.execute(f"INSERT INTO {table} ({listed}) SELECT {listed} FROM cur.{table}")
    if "extract_version" in old["traces"]:
        con.execute("UPDATE traces SET extract_version = ?", [extract_version])
    con.close()
    return dst


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def command_in(message: str) -> list[str]:
    """The `scaletrace ingest ...` command a one-line refusal gives, as arguments."""
    found = re.search(r"`scaletrace (ingest [^`]*)`", message)
    assert found, message
    return shlex.split(found.group(1))[1:]


def run_command(args: list[str]):
    """The ingest a refusal advises, through the Python API (the CLI is a few lines over it)."""
    db = args[args.index("--db") + 1] if "--db" in args else None
    dataset = args[args.index("--parquet") + 1] if "--parquet" in args else None
    paths = [a for i, a in enumerate(args) if not a.startswith("--") and args[i - 1] not in ("--db", "--parquet")]
    if dataset:
        return ingest_parquet(paths, dataset, workers=1)
    return ingest(paths, db, workers=1)


@pytest.mark.parametrize("old_schema", OLD_SCHEMAS, ids=lambda p: p.stem)
def test_older_database_is_refused_then_brought_up_to_date(old_schema, runs, current, tmp_path):
    """Every schema.sql of the history: a reader refuses the file with one line and the ingest
    command; an ingest of one run only is refused before anything is written (the other run's rows
    would stay an older version's); the command given then brings it whole to this version, every
    trace read again, with the answers of a new file."""
    last = old_schema == OLD_SCHEMAS[-1]  # the last counted as "1": written with this extract
    db = old_file(old_schema.read_text(), current, tmp_path / "old.duckdb", EXTRACT_VERSION if last else OLDER_EXTRACT)
    if last:
        with connect(db) as con:  # its rows are this version's: read as it is
            assert con.query("rank_breakdown").height == 3
        report = ingest(runs[:1], db, workers=1)
        assert report.count("unchanged") == 1 and report.count("error") == 0
    else:
        with pytest.raises(DatabaseError) as refused:
            connect(db)
        message = str(refused.value)
        assert "\n" not in message and str(runs[0]) in message and str(runs[1]) in message
        before = sha(db)
        with pytest.raises(DatabaseError) as partial:
            ingest(runs[:1], db, workers=1)  # run 1 alone: run 2 would keep the old rows
        assert "synth-2" in str(partial.value) and "\n" not in str(partial.value)
        assert sha(db) == before and not Path(f"{db}.wal").exists()
        report = run_command(command_in(message))
        assert report.count("ok") == 3 and report.count("error") == 0, [o.message for o in report.outcomes]
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == schema.SCHEMA_VERSION
    con.close()
    assert rows(db) == rows(current)  # every row a new file holds, so every answer
    connect(db).close()  # and readers take it


def columns_and_meta(db: Path) -> tuple:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return (sorted(con.execute("SELECT table_name, column_name FROM duckdb_columns() WHERE database_name = "
                                   "current_database() AND schema_name = 'main'").fetchall()),
                sorted(con.execute("SELECT * FROM meta").fetchall()))
    finally:
        con.close()


def test_a_migration_that_fails_leaves_the_file_as_it_was(runs, current, tmp_path, monkeypatch):
    """The tables, the columns, the older rows' values and the version are one transaction: a
    statement that fails half-way (here the last) leaves the file of its old version, not between."""
    db = old_file(OLD_SCHEMAS[5].read_text(), current, tmp_path / "old.duckdb", OLDER_EXTRACT)  # before ordinal
    before = columns_and_meta(db)
    monkeypatch.setattr(migrations, "data_sql", lambda since, until: ["SELECT error('a failing migration')"])
    with pytest.raises(DatabaseError, match="a failing migration"):
        ingest(runs, db, workers=1)
    assert columns_and_meta(db) == before


@pytest.mark.parametrize("kind", ["db", "dataset"])
def test_a_trace_this_version_cannot_read_again_loses_its_older_rows(kind, tmp_path):
    """A stale trace whose re-read fails (here: its file was damaged since) is that file's error, and
    its older rows go with a note: the file holds one version's rows and readers take it (kept, the
    file would be refused for ever)."""
    runs = [write_run(tmp_path / "runs", spec) for spec in sweep_specs([1, 2], steps=1, kernels_per_step=2, gzip=False)]
    if kind == "db":
        target = tmp_path / "old.duckdb"
        ingest(runs, target, workers=1)
        con = duckdb.connect(str(target))
        con.execute("UPDATE traces SET extract_version = ?", [OLDER_EXTRACT])  # as an older version stored them
        con.close()
    else:
        target = tmp_path / "old-ds"
        ingest_parquet(runs, target, workers=1)
        for record in (target / "traces").glob("*.parquet"):
            rewrite(record, extract_version=OLDER_EXTRACT)
    damaged = sorted(runs[1].glob("rank*.json"))[1]
    damaged.write_text("{ not json")
    report = (ingest if kind == "db" else ingest_parquet)(runs, target, workers=1)
    assert [o.path for o in report.errors] == [str(damaged)] and report.count("ok") == 2
    assert [o.path for o in report.outcomes if o.status == "note" and "older version" in o.message] == [str(damaged)]
    with connect(target) as con:
        assert con.sql("SELECT count(*) FROM traces").item() == 2  # 3 traces, the damaged one's rows gone


def test_newer_database_is_refused(current, tmp_path):
    db = tmp_path / "newer.duckdb"
    db.write_bytes(current.read_bytes())
    con = duckdb.connect(str(db))
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(int(schema.SCHEMA_VERSION) + 1)])
    con.close()
    for attempt in (lambda: connect(db), lambda: ingest([], db, workers=1)):
        with pytest.raises(DatabaseError, match="newer scaletrace"):
            attempt()


def test_newer_dataset_is_refused(dataset, runs, tmp_path):
    newer = copy_tree(dataset, tmp_path / "newer")
    pq.write_table(pa.table({"key": ["schema_version", "layout"],
                             "value": [str(int(schema.SCHEMA_VERSION) + 1), "dataset"]}), newer / "meta.parquet")
    for attempt in (lambda: connect(newer), lambda: ingest_parquet(runs, newer, workers=1)):
        with pytest.raises(DatabaseError, match="newer scaletrace"):
            attempt()


@pytest.fixture(scope="module")
def dataset(runs, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dataset") / "ds"
    assert ingest_parquet(runs, out, workers=1).count("ok") == 3
    return out


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


def copy_tree(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def rewrite(part: Path, drop: tuple[str, ...] = (), **values) -> None:
    table = pq.read_table(part)
    table = table.drop_columns([c for c in drop if c in table.column_names])
    for column, value in values.items():
        table = table.set_column(table.column_names.index(column), column,
                                 pa.array([value] * table.num_rows, table.schema.field(column).type))
    pq.write_table(table, part)


def test_dataset_from_before_wait_stream(dataset, runs, current_answers, tmp_path):
    """A dataset whose device_events parts lack wait_stream and wait_event_corr, its traces read by
    the extract before: one line with the command (it read as "damaged", 0 events, exit 0); the
    command reads every trace again and the answers are a new file's."""
    old = copy_tree(dataset, tmp_path / "old-ds")
    for part in (old / "device_events").rglob("*.parquet"):
        rewrite(part, drop=("wait_stream", "wait_event_corr"))
    for record in (old / "traces").glob("*.parquet"):
        rewrite(record, extract_version=OLDER_EXTRACT)
    pq.write_table(pa.table({"key": ["schema_version", "layout"], "value": ["1", "dataset"]}),
                   old / "meta.parquet")  # what every dataset before the version was counted says
    with pytest.raises(DatabaseError) as refused:
        connect(old)
    message = str(refused.value)
    assert "\n" not in message and "--parquet" in message and str(runs[1]) in message
    before = snapshot(old)
    with pytest.raises(DatabaseError, match="synth-2"):
        ingest_parquet(runs[:1], old, workers=1)  # run 2 would keep the older rows: nothing written
    assert snapshot(old) == before
    report = run_command(command_in(message))
    assert report.count("ok") == 3 and report.count("error") == 0
    assert answers(old) == current_answers
    assert dict(zip(*pq.read_table(old / "meta.parquet").to_pydict().values()))["schema_version"] == \
        schema.SCHEMA_VERSION


def test_dataset_part_without_a_column_is_named(dataset, tmp_path):
    """A hand-edited part without dur_ns: one line naming the part and the column (report,
    critical_path and explain raised TypeError on it)."""
    edited = copy_tree(dataset, tmp_path / "edited")
    part = sorted((edited / "device_events").rglob("*.parquet"))[0]
    rewrite(part, drop=("dur_ns",))
    with pytest.raises(DatabaseError) as refused:
        connect(edited)
    assert str(part) in str(refused.value) and "dur_ns" in str(refused.value) and "\n" not in str(refused.value)
    from click.testing import CliRunner

    from scaletrace.cli import main

    for command in (["explain"], ["report", "-o", str(tmp_path / "r.html")], ["query", "critical_path"]):
        result = CliRunner().invoke(main, [*command, "--db", str(edited)])
        assert result.exit_code == 1 and "dur_ns" in result.stderr and "Traceback" not in result.output, command


def test_a_pending_migration_is_refused_by_readers_and_run_by_an_ingest(runs, current, tmp_path, monkeypatch):
    """A version whose older rows need values (``Migration.sql``): readers refuse the file until an
    ingest has run the statements (with the columns and the version, one transaction)."""
    db = old_file(OLD_SCHEMAS[-1].read_text(), current, tmp_path / "old.duckdb", EXTRACT_VERSION)
    monkeypatch.setattr(migrations, "data_sql",
                        lambda since, until: ["INSERT INTO meta VALUES ('migrated', 'yes')"] if since < until else [])
    with pytest.raises(DatabaseError, match=r"schema version 1\).*scaletrace ingest"):
        connect(db)
    assert ingest(runs, db, workers=1).count("unchanged") == 3
    with connect(db) as con:
        assert con.sql("SELECT value FROM meta WHERE key = 'migrated'").item() == "yes"


def kinds(db: Path) -> dict[str, int]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return dict(con.execute("SELECT kind, count(*) FROM device_events GROUP BY kind").fetchall())
    finally:
        con.close()


def test_rules_are_part_of_a_stored_traces_identity(runs, tmp_path):
    """Re-ingesting with --rules reads the traces again with them (it said "unchanged" and kept the
    old kinds); the same rules again are unchanged; the defaults again read them back."""
    db = tmp_path / "rules.duckdb"
    ingest(runs[:1], db, workers=1)
    default = kinds(db)
    con = duckdb.connect(str(db), read_only=True)
    gemms = con.execute("SELECT count(*) FROM device_events WHERE kind = 'compute' "
                        "AND name ILIKE '%gemm%'").fetchone()[0]
    con.close()
    assert gemms > 0
    rules = (Rule("gpu", "name", "contains", "gemm", "memory"),) + DEFAULT_RULES  # first match wins
    report = ingest(runs[:1], db, workers=1, rules=rules)
    assert report.count("ok") == 1
    assert kinds(db) == {**default, "compute": default["compute"] - gemms, "memory": default.get("memory", 0) + gemms}
    assert ingest(runs[:1], db, workers=1, rules=rules).count("unchanged") == 1
    with connect(db) as reader:  # a file ingested with --rules is current, not an older version's
        assert reader.query("rank_breakdown").height == 1
    assert ingest(runs[:1], db, workers=1).count("ok") == 1
    assert kinds(db) == default


def test_keep_python_is_part_of_a_stored_traces_identity(tmp_path):
    """--keep-python keeps python_function events: a re-ingest with it reads the trace again."""
    run = tmp_path / "py"
    run.mkdir()
    write_trace(run / "rank0.json", [cpu("ProfilerStep#1", 0, 100, cat="user_annotation"),
                                     cpu("train.py(10): step", 5, 50, cat="python_function"),
                                     kernel("gemm_kernel", 10, 20)], rank=0)
    db = tmp_path / "py.duckdb"

    def python_rows() -> int:
        con = duckdb.connect(str(db), read_only=True)
        try:
            return con.execute("SELECT count(*) FROM cpu_events WHERE cat = 'python_function'").fetchone()[0]
        finally:
            con.close()

    ingest([run], db, workers=1)
    assert python_rows() == 0
    assert ingest([run], db, workers=1, keep_python=True).count("ok") == 1
    assert python_rows() == 1
