"""Which database files an ingest may write: a new or empty one, or one scaletrace made
(README, "Robustness").

An ingest into an unrelated DuckDB file used to add scaletrace's tables to it silently; one
into a file whose tables have other columns, or into a damaged file, ended in a traceback.
Every such case is now one DatabaseError line and leaves the file as it was.
"""

from __future__ import annotations

from functools import lru_cache

import duckdb

from scaletrace.pipeline.common import oneline
from scaletrace.pipeline.store import schema
from scaletrace.pipeline.store.schema import DatabaseError

MAX_NAMED = 6  # tables named in one error line


def open_for_write(db, wait_s: float = schema.LOCK_WAIT_S, on_wait=None, setup: bool = True
                   ) -> duckdb.DuckDBPyConnection:
    """``schema.open_for_write`` once ``db`` is known to be new, empty or scaletrace's; any
    DuckDB error on the way (a truncated file, a full disk) is one DatabaseError line.
    ``setup`` False: a plain connection to a file this ingest has already checked and set up.
    The stored definitions are :func:`set_up_definitions`' (the ingest writes them while it parses)."""
    try:
        if not setup:
            return schema.connect_waiting(db, wait_s=wait_s, on_wait=on_wait)
        con = schema.connect_waiting(db, wait_s=wait_s, on_wait=on_wait)
        try:
            found = check_ours(con, db)
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


@lru_cache(maxsize=1)
def expected_columns() -> dict[str, set[tuple[str, str]]]:
    """(column, type) of every table of pipeline/store/schema.sql (older files may lack the newest columns:
    schema.sql adds them)."""
    con = schema.open_duckdb()
    try:
        con.execute(schema.SCHEMA_SQL.read_text())
        expected: dict[str, set[tuple[str, str]]] = {}
        for table, name, kind in con.execute("SELECT table_name, column_name, data_type FROM duckdb_columns() "
                                             "WHERE database_name = current_database() AND schema_name = 'main'"
                                             ).fetchall():
            expected.setdefault(table, set()).add((name, kind))
        return expected
    finally:
        con.close()


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
