"""``scaletrace sql`` reads the database and nothing else (README, "Robustness").

A read-only connection cannot change the database, but ``ATTACH ... (READ_WRITE)``, ``COPY ...
TO`` and the file readers reach every other file.  Two fences: only statements that read are
accepted, and DuckDB's external access is switched off (for a Parquet export, only the export's
directory stays readable) with the configuration then locked, so no statement turns it back on.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from scaletrace.queries import QueryError

READING = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN, duckdb.StatementType.PRAGMA,
           duckdb.StatementType.CALL}


def check_reads(statement) -> None:
    """Refuse a parsed statement (``duckdb.extract_statements``) that is not a query."""
    if statement.type not in READING:
        kind = statement.type.name.replace("_", " ")
        raise QueryError(f"read-only: only queries run here (SELECT, EXPLAIN, ...), not {kind}; "
                         "the sql verb reads the database and nothing else")


def fence(con: duckdb.DuckDBPyConnection, readable_dir: Path | None = None) -> None:
    """No file outside the database (or ``readable_dir``, a Parquet export) from now on."""
    if not con.execute("SELECT current_setting('enable_external_access')").fetchall()[0][0]:
        return  # fenced already (and locked)
    if readable_dir is not None:
        con.execute("SET allowed_directories = [?]", [str(Path(readable_dir).resolve()) + "/"])
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
