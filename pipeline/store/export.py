"""Parquet export, and a database over a Parquet directory (an export or an ingest dataset).

``export_parquet(db, out)`` writes every table: the event tables partitioned
by run and rank (hive layout, ``device_events/run_id=X/rank=3/*.parquet``),
the others as one file each (``runs.parquet``).  ``open_parquet(dir)`` gives
an in-memory DuckDB over those files (or a dataset's parts, pipeline/execute/dataset.py),
with the package's query macros and reference tables (queries/definitions.py;
the files hold none), so every query and the report run on it unchanged.
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb

from scaletrace.pipeline.common.limits import physical_memory_bytes
from scaletrace.pipeline.store.schema import (PER_TRACE_TABLES, SCHEMA_SQL, TABLES, DatabaseError, connect_waiting,
                                              open_duckdb, register_definitions)

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
    """An in-memory DuckDB with each table of an export or an ingest dataset (pipeline/execute/dataset.py),
    plus the package's macros and reference tables: the small tables, and the event tables when
    they fit (``IN_MEMORY_FRACTION``), loaded once; larger event tables as views over the files.

    Each has the schema's columns, in its order and of its types (hive partition values come
    back as text).  The per-trace tables keep only rows whose trace has a record in ``traces``: a
    dataset's parts being written, or left by a task that died, are not read.  A table with no
    files is the schema's empty table."""
    directory = Path(directory)
    if not (directory / "meta.parquet").is_file():
        raise DatabaseError(f"{directory}: not a scaletrace Parquet export or dataset (no meta.parquet); "
                            f"make one with `scaletrace export --parquet {directory}` or "
                            f"`scaletrace ingest PATH --parquet {directory}`")
    con = open_duckdb()
    con.execute("SET parquet_metadata_cache = true")  # a dataset has a part per trace: read each footer once
    con.execute(SCHEMA_SQL.read_text())  # the empty typed tables: column order and types of every view
    in_memory = _event_bytes(directory) <= (physical_memory_bytes() or 8 << 30) // IN_MEMORY_FRACTION
    dataset = (directory / "traces").is_dir() and not (directory / "traces.parquet").exists()
    for table in TABLES:
        files = _files(directory, table, dataset)
        if not files:
            continue
        columns = con.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = ? "
                              "ORDER BY column_index", [table]).fetchall()
        select = ", ".join(f'CAST("{name}" AS {typ}) AS "{name}"' for name, typ in columns)
        # a dataset's part is read only where its trace's commit record puts it: a copy elsewhere
        # (cp -a, a restored folder) is never a second reading of the same trace
        where = (" WHERE (CAST(trace_id AS BIGINT), CAST(run_id AS VARCHAR), TRY_CAST(rank AS INTEGER)) IN "
                 "(SELECT (trace_id, run_id, CAST(rank AS INTEGER)) FROM traces)" if dataset else
                 " WHERE trace_id IN (SELECT trace_id FROM traces)") if table in PER_TRACE_TABLES else ""
        # the small tables (a row per run, trace, side-file record) are read once, the event
        # tables too when they fit in memory: each query would read every part again
        kind = "VIEW" if table in PER_TRACE_TABLES and not in_memory else "TABLE"
        if kind == "VIEW":  # read at query time: leave out now what is plainly damaged (no magic)
            files = [f for f in files if whole_parquet(f) or damaged(f, ValueError("not a whole Parquet file"))]
            if not files:
                continue
        _create(con, kind, table, select, files, PARTITIONED.get(table, ()) if not files[0].parent == directory
                else (), where)
    register_definitions(con, directory)
    return con


def whole_parquet(path: Path) -> bool:
    """Whether ``path`` looks like a whole Parquet file: a regular file that starts and ends with
    the format's magic (a truncated or 0-byte part fails; cheap: 8 bytes read)."""
    import os

    try:
        with open(path, "rb") as handle:
            head = handle.read(4)
            handle.seek(-4, os.SEEK_END)
            return head == b"PAR1" and handle.read(4) == b"PAR1"
    except OSError:
        return False


def damaged(path: Path, exc: BaseException) -> None:
    """One line on stderr for a file of the dataset that cannot be read; readers answer from the
    rest."""
    import sys

    from scaletrace.pipeline.common.oneline import message, one_line

    sys.stderr.write(f"warning: {path}: damaged Parquet file, read without it ({one_line(message(exc), 300)})\n")


def _create(con, kind: str, table: str, select: str, files: list[Path], keys: tuple, where: str) -> None:
    """Replace the schema's empty ``table`` by a table (or view) over ``files``; when one is damaged
    (truncated, garbage, 0 bytes, a partition value that is not its column's type), each is
    checked and the damaged ones are named and left out (all damaged: the empty table stays)."""
    if _replace(con, kind, table, f"SELECT {select} FROM {_read(files, keys)}{where}"):
        return
    good = []
    for path in files:
        try:
            con.execute(f"CREATE TEMP TABLE _checked AS SELECT {select} FROM {_read([path], keys)}")
            good.append(path)
        except duckdb.Error as exc:
            damaged(path, exc)
        finally:
            con.execute("DROP TABLE IF EXISTS _checked")
    if good:
        _replace(con, kind, table, f"SELECT {select} FROM {_read(good, keys)}{where}")


def _replace(con, kind: str, table: str, query: str) -> bool:
    con.execute("BEGIN")
    try:
        con.execute(f"DROP TABLE {table}")
        con.execute(f"CREATE {kind} {table} AS {query}")
        if kind == "VIEW":
            con.execute(f"SELECT * FROM {table} LIMIT 0").fetchall()
        con.execute("COMMIT")
        return True
    except duckdb.Error:
        con.execute("ROLLBACK")
        return False


# The event tables are loaded into memory when their Parquet files take at most this fraction
# of the machine's memory (DuckDB holds them in a few times their compressed size).
IN_MEMORY_FRACTION = 64


def _event_bytes(directory: Path) -> int:
    total = 0
    for table in PER_TRACE_TABLES:
        single, parted = directory / f"{table}.parquet", directory / table
        files = [single] if single.is_file() else parted.rglob("*.parquet") if parted.is_dir() else []
        total += sum(f.stat().st_size for f in files)
    return total


# The names a dataset's writers give (pipeline/execute/dataset.py): parts are named by trace id, records by
# a 32-digit key; anything else under the folders (a conflict copy `x (1).parquet`) is not read.
_PART_NAME = re.compile(r"^\d+\.parquet$")
_RECORD_NAME = re.compile(r"^[0-9a-f]{32}\.parquet$")


def _files(directory: Path, table: str, dataset: bool) -> list[Path]:
    """The Parquet files of a table: one file (an export), the parts of a folder, or none."""
    single, parted = directory / f"{table}.parquet", directory / table
    if single.is_file():
        return [single]
    if not parted.is_dir():
        return []
    files = sorted(p for p in parted.rglob("*.parquet") if p.is_file())  # a folder named x.parquet is not one
    if dataset and table in PER_TRACE_TABLES:
        files = [p for p in files if _PART_NAME.match(p.name)]
    elif dataset and table in ("traces", "runs", "side_files"):
        files = [p for p in files if _RECORD_NAME.match(p.name)]
    return files


def _read(files: list[Path], keys: tuple) -> str:
    hive = f", hive_partitioning = true, hive_types = {{{', '.join(f'{k!r}: VARCHAR' for k in keys)}}}" if keys else ""
    return f"read_parquet([{', '.join(_quote(f) for f in files)}]{hive}, union_by_name = true)"
