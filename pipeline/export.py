"""Parquet export, and a database view over an exported directory.

``export_parquet(db, out)`` writes every table: the event tables partitioned
by run and rank (hive layout, ``device_events/run_id=X/rank=3/*.parquet``),
the others as one file each (``runs.parquet``).  ``open_parquet(dir)`` gives
an in-memory DuckDB whose views read those files, with the package's query
macros and reference tables (queries/definitions.py; the export holds none),
so every query and the report run on it unchanged.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from scaletrace.pipeline.schema import TABLES, DatabaseError, connect_waiting, register_definitions

PARTITIONED = {"device_events": ("run_id", "rank"), "cpu_events": ("run_id", "rank"),
               "collectives": ("run_id", "rank"), "steps": ("run_id",), "step_log": ("run_id",),
               "power_samples": ("run_id",), "interval_unions": ("run_id",), "compute_islands": ("run_id",)}


def _quote(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def export_parquet(db: str | Path, out: str | Path) -> dict[str, int]:
    """Write the tables of ``db`` under ``out``; returns rows per table."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    con = connect_waiting(db, read_only=True)
    counts = {}
    try:
        for table in TABLES:
            rows = con.sql(f"SELECT count(*) FROM {table}").fetchall()[0][0]
            counts[table] = rows
            keys = PARTITIONED.get(table)
            if keys and rows:
                con.execute(f"COPY {table} TO {_quote(out / table)} "
                            f"(FORMAT parquet, PARTITION_BY ({', '.join(keys)}), OVERWRITE_OR_IGNORE)")
            else:
                con.execute(f"COPY {table} TO {_quote(out / (table + '.parquet'))} (FORMAT parquet)")
    finally:
        con.close()
    return counts


def open_parquet(directory: str | Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with a view per exported table, plus the package's macros and reference tables."""
    directory = Path(directory)
    if not (directory / "meta.parquet").is_file():
        raise DatabaseError(f"{directory}: not a scaletrace Parquet export (no meta.parquet); "
                            f"make one with `scaletrace export --parquet {directory}`")
    con = duckdb.connect()
    for table in TABLES:
        single, parted = directory / f"{table}.parquet", directory / table
        if single.is_file():
            source = f"read_parquet({_quote(single)})"
        elif parted.is_dir():
            source = f"read_parquet({_quote(parted / '**' / '*.parquet')}, hive_partitioning = true)"
        else:
            raise DatabaseError(f"{directory}: table {table} missing from the export")
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM {source}")
    register_definitions(con, directory)
    return con
