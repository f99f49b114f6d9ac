"""Which database files an ingest may write: a new or empty one, or one scaletrace made
(README, "Robustness").

An ingest into an unrelated DuckDB file used to add scaletrace's tables to it silently; one
into a file whose tables have other columns, or into a damaged file, ended in a traceback.
Every such case is now one DatabaseError line and leaves the file as it was.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from scaletrace.pipeline.common import oneline
from scaletrace.pipeline.read.version import EXTRACT_VERSION
from scaletrace.pipeline.store import migrations, schema
from scaletrace.pipeline.store.schema import DatabaseError

MAX_NAMED = 6  # tables named in one error line


def open_for_write(db, wait_s: float = schema.LOCK_WAIT_S, on_wait=None, setup: bool = True, reading=None
                   ) -> duckdb.DuckDBPyConnection:
    """``schema.open_for_write`` once ``db`` is known to be new, empty or scaletrace's; any
    DuckDB error on the way (a truncated file, a full disk) is one DatabaseError line.
    ``setup`` False: a plain connection to a file this ingest has already checked and set up.
    The stored definitions are :func:`set_up_definitions`' (the ingest writes them while it parses).
    ``reading``: the run directories the ingest reads, given when the file is to be brought up to
    this version: refused (:func:`check_whole`) before anything is written when it would hold
    traces stored by an older scaletrace that the ingest does not read again."""
    try:
        if not setup:
            return schema.connect_waiting(db, wait_s=wait_s, on_wait=on_wait)
        con = schema.connect_waiting(db, wait_s=wait_s, on_wait=on_wait)
        try:
            found = check_ours(con, db)
            if reading is not None and "traces" in found.tables:
                check_whole(con, db, reading)
            return schema.open_for_write(db, wait_s, on_wait, con=con, setup=found)  # one open, one read
        except BaseException:
            con.close()
            raise
    except duckdb.Error as exc:
        raise _unusable(db, exc) from None


def set_up_definitions(con: duckdb.DuckDBPyConnection, db) -> None:
    """``schema.set_up_definitions``; a DuckDB error is one DatabaseError line."""
    try:
        schema.set_up_definitions(con)
    except duckdb.Error as exc:
        raise _unusable(db, exc) from None


def _unusable(db, exc: duckdb.Error) -> DatabaseError:
    return DatabaseError(f"{db}: cannot be used as a scaletrace database ({oneline.message(exc)})")


def check_ours(con, db) -> schema.Setup:
    """Refuse a database that holds tables but is not scaletrace's, or whose scaletrace tables
    have columns scaletrace does not write (another tool's, or a damaged file); returns what the
    file holds of the set-up (``schema.read_setup``)."""
    setup = schema.read_setup(con)
    tables = setup.tables
    if not tables:
        return setup
    if "schema_version" not in setup.meta:
        named = ", ".join(sorted(tables)[:MAX_NAMED]) + (", ..." if len(tables) > MAX_NAMED else "")
        raise DatabaseError(f"{db}: not a scaletrace database (it holds other tables: {named}); "
                            "give a new file or one scaletrace wrote")
    refuse_newer(setup, db)
    if setup.by_this_version():
        return setup  # set up by this very schema: its columns are schema.sql's
    expected = expected_columns()
    columns: dict[str, list[tuple[str, str]]] = {}
    for table, name, kind in con.execute(
            "SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE database_name = "
            "current_database() AND schema_name = 'main' ORDER BY table_name, column_index").fetchall():
        columns.setdefault(table, []).append((name, kind))
    for table in sorted(tables & set(expected)):
        foreign = [f"{name} {kind}" for name, kind in columns.get(table, []) if (name, kind) not in expected[table]]
        if foreign:
            raise DatabaseError(f"{db}: not a scaletrace database of this version: table {table} has columns "
                                f"scaletrace does not write ({', '.join(foreign[:MAX_NAMED])})")
    return setup


def expected_columns() -> dict[str, set[tuple[str, str]]]:
    """(column, type) of every table of pipeline/store/schema.sql (older files may lack the newest columns:
    an ingest adds them, ``schema.bring_up_to_date``)."""
    return {table: set(columns) for table, columns in schema.expected_columns().items()}


def missing_columns(con: duckdb.DuckDBPyConnection) -> list[str]:
    """``table.column`` of this version's schema that a file set up by another version lacks (one
    written before a column was added, not ingested into since); [] for a file of this version."""
    if schema.read_setup(con).by_this_version():
        return []
    present = set(con.execute(
        "SELECT table_name, column_name FROM duckdb_columns() WHERE database_name = current_database() "
        "AND schema_name = 'main'").fetchall())
    return [f"{table}.{name}" for table, columns in sorted(expected_columns().items())
            for name, _ in sorted(columns) if (table, name) not in present]


# --- schema versions (pipeline/store/migrations.py): what makes a stored file whole and current

def refuse_newer(setup: schema.Setup, where) -> None:
    """One line for a file written by a newer scaletrace (a schema version this one does not know)."""
    version = migrations.version_of(setup.meta)
    if version is not None and version > int(schema.SCHEMA_VERSION):
        raise DatabaseError(f"{where}: written by a newer scaletrace (schema version {version}; this one knows up "
                            f"to {schema.SCHEMA_VERSION}); open it with that version, or ingest its traces into a new "
                            "file")


def stale_traces(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str | None, int]]:
    """(run id, its run directory, how many) of the stored traces whose rows another extract made
    (``traces.extract_version``: an older one, or none in a file from before it was recorded)."""
    counts: dict[tuple[str, str | None], int] = {}
    for _, run_id, source in _stale(con):
        counts[run_id, source] = counts.get((run_id, source), 0) + 1
    return [(run_id, source, n) for (run_id, source), n in sorted(counts.items(), key=lambda item: item[0][0])]


def _stale(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str, str | None]]:
    """(path, run id, run directory) of each stale trace: one query."""
    columns = {name for (name,) in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE table_name = 'traces' AND schema_name = 'main' "
        "AND database_name = current_database()").fetchall()}
    made_by = "split_part(coalesce(t.extract_version, ''), '+', 1)" if "extract_version" in columns else "''"
    return con.execute(
        f"SELECT t.path, t.run_id, r.source_dir FROM traces t LEFT JOIN runs r USING (run_id) "
        f"WHERE {made_by} <> $1 ORDER BY t.path", [EXTRACT_VERSION]).fetchall()


def check_whole(con: duckdb.DuckDBPyConnection, db, run_dirs, kind: str = "db") -> None:
    """Before an ingest writes anything: refuse one that would leave traces made by an older
    extract beside this version's rows (``run_dirs``: the run directories it reads; a stale trace
    in one of them is read again, or dropped when its file is gone)."""
    reading = {str(d) for d in run_dirs}
    left = sorted({(run_id, source) for path, run_id, source in _stale(con) if str(Path(path).parent) not in reading})
    if not left:
        return
    runs = [run_id for run_id, _ in left]
    were, them = ("was", "it") if len(runs) == 1 else ("were", "them")
    raise DatabaseError(f"{db}: {_runs(runs)} {were} stored by an older scaletrace, and this ingest does not read "
                        f"{them} again (the file would hold rows of two versions); read {them} first: "
                        f"{rebuild_command(sorted({s for _, s in left if s}), db, kind)}")


def check_readable(con: duckdb.DuckDBPyConnection, where, kind: str = "db") -> None:
    """Refuse, in one line with the command that brings it up to date, a file this version cannot
    answer from as it is: written by a newer scaletrace, lacking columns (an older one's, not
    ingested into since), with rows of an older version to be given values, or holding stale
    traces (``stale_traces``).  ``kind``: ``db``, ``dataset`` (an ingest dataset) or ``export``."""
    setup = schema.read_setup(con)
    refuse_newer(setup, where)
    version = migrations.version_of(setup.meta) or 1
    try:
        stale = stale_traces(con)
    except duckdb.Error:  # a file without what this reads (traces.path, runs.source_dir): its columns say
        stale = []
    if stale:
        traces = sum(n for _, _, n in stale)
        were, them = ("was", "its") if traces == 1 else ("were", "their")
        raise DatabaseError(f"{where}: {traces} trace{'s' * (traces != 1)} of {_runs([r for r, _, _ in stale])} {were} "
                            f"read by an older scaletrace ({them} rows lack what this version reads); read them again: "
                            f"{rebuild_command(sorted({s for _, s, _ in stale if s}), where, kind)}")
    missing = missing_columns(con) if kind == "db" else []
    if missing or migrations.data_sql(version, int(schema.SCHEMA_VERSION)):
        lacks = f", without {_listed(missing)}" if missing else ""
        try:
            dirs = sorted({s for (s,) in con.execute("SELECT source_dir FROM runs WHERE source_dir IS NOT NULL")
                           .fetchall()})
        except duckdb.Error:
            dirs = []
        raise DatabaseError(f"{where}: written by an older scaletrace (schema version {version}){lacks}; bring it up "
                            f"to date with {rebuild_command(dirs, where, kind)}")


MAX_DIRS = 6  # run directories named in a command; more: the folder that holds them all


def rebuild_command(dirs: list[str], where, kind: str) -> str:
    """The command that reads ``dirs`` (run directories) into the file ``where`` again, quoted for a
    shell; an export is rebuilt through a database.  Where a directory is gone, says so."""
    import os
    import shlex

    gone = [d for d in dirs if not os.path.isdir(d)]
    shown = dirs
    if len(dirs) > MAX_DIRS:
        parent = os.path.commonpath(dirs)
        shown = [parent] if parent not in ("", os.sep) else dirs[:MAX_DIRS]
    paths = " ".join(shlex.quote(d) for d in shown) if shown else "RUN_DIR ..."
    target = shlex.quote(str(where))
    if kind == "dataset":
        command = f"`scaletrace ingest {paths} --parquet {target}`"
    elif kind == "export":  # through a database of its own beside it
        db = shlex.quote(f"{str(where).rstrip(os.sep)}.duckdb")
        command = f"`scaletrace ingest {paths} --db {db} && scaletrace export --db {db} --parquet {target}`"
    else:
        command = f"`scaletrace ingest {paths} --db {target}`"
    if gone:
        command += (f" ({_listed(gone)} no longer there: their traces cannot be read again; ingest the traces "
                    "you still have into a new file)")
    return command


def _runs(run_ids: list[str]) -> str:
    return f"run{'s' * (len(run_ids) != 1)} {_listed(run_ids)}"


def _listed(items: list) -> str:
    return ", ".join(map(str, items[:MAX_NAMED])) + (f" and {len(items) - MAX_NAMED} more" if len(items) > MAX_NAMED
                                                     else "")
