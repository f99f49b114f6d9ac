"""Parquet export, and a database over a Parquet directory (an export or an ingest dataset).

``export_parquet(db, out)`` writes every table: the event tables partitioned
by run and rank (hive layout, ``device_events/run_id=X/rank=3/*.parquet``),
the others as one file each (``runs.parquet``).  ``open_parquet(dir)`` gives
an in-memory DuckDB over those files (or a dataset's parts, pipeline/execute/dataset.py),
with the package's query macros and reference tables (queries/definitions.py;
the files hold none), so every query and the report run on it unchanged.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import uuid
from pathlib import Path

import duckdb

from scaletrace.pipeline.common.limits import physical_memory_bytes
from scaletrace.pipeline.common.paths import Input, Output, OverwriteError, glob_literal, refuse_overlap, sql_path
from scaletrace.pipeline.store.schema import (PER_TRACE_TABLES, SCHEMA_SQL, TABLES, DatabaseError, connect_waiting,
                                              open_duckdb, register_definitions)

PARTITIONED = {"device_events": ("run_id", "rank"), "cpu_events": ("run_id", "rank"),
               "collectives": ("run_id", "rank"), "steps": ("run_id",), "step_log": ("run_id",),
               "power_samples": ("run_id",), "interval_unions": ("run_id",), "compute_islands": ("run_id",)}


# A partition folder is `run_id=VALUE`, VALUE percent-encoded (3 characters a byte outside ASCII's
# unreserved set), and a file name holds at most 255 bytes: a run id longer than this many UTF-8 bytes
# names its folders by its first characters and a hash (readers map the folder back to the run id,
# which the runs and traces tables hold whole).  60 bytes: at most 180 encoded; 12 characters of
# up to 4 bytes and the hash: at most 161.
HIVE_VALUE_MAX_BYTES = 60
HIVE_PREFIX_CHARS = 12


def hive_value(run_id: str) -> str:
    """The run id as its partition folders name it (decoded): itself, or when longer than
    HIVE_VALUE_MAX_BYTES its first characters, ``~`` and 16 hex digits of its sha256."""
    if len(run_id.encode()) <= HIVE_VALUE_MAX_BYTES:
        return run_id
    return run_id[:HIVE_PREFIX_CHARS] + "~" + hashlib.sha256(run_id.encode()).hexdigest()[:16]


def _hive_value_sql(column: str) -> str:
    """``hive_value`` in DuckDB's SQL (strlen counts bytes, left characters, as Python's slice)."""
    return (f"CASE WHEN strlen({column}) <= {HIVE_VALUE_MAX_BYTES} THEN {column} ELSE "
            f"left({column}, {HIVE_PREFIX_CHARS}) || '~' || left(sha256({column}), 16) END")


def hive_run_ids(run_ids) -> dict[str, str]:
    """{folder value: run id} of the run ids whose folders do not name them whole."""
    return {hive_value(r): r for r in run_ids if r is not None and hive_value(r) != r}


def _quote(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def export_parquet(db: str | Path, out: str | Path) -> dict[str, int]:
    """Write the tables of ``db`` under ``out``; returns rows per table.

    The export is written into a hidden sibling of ``out`` and then put in its place by a rename
    (an existing export at ``out`` is exchanged with it in one step where the system can, and then
    deleted): a reader sees the old export or the new one, never a half-written one, and an export
    that fails midway leaves ``out`` as it was.  ``OverwriteError`` before anything is written when
    ``out`` is or holds the database, is an ingest dataset, or is a directory of other files."""
    out = Path(os.path.realpath(out)) if os.path.islink(out) else Path(out)  # the directory it names is replaced
    refuse_overlap([Input(db, "database")], [Output(out, "Parquet export", owns_dir=True)])
    _check_replaceable(out)
    con = connect_waiting(db, read_only=True)
    try:
        tmp = _temporary_sibling(out)
        try:
            counts = _write_tables(con, tmp)
            con.close()
            _publish(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    finally:
        con.close()
    return counts


def _write_tables(con, out: Path) -> dict[str, int]:
    counts = {}
    for table in TABLES:
        rows = con.sql(f"SELECT count(*) FROM {table}").fetchall()[0][0]
        counts[table] = rows
        keys = PARTITIONED.get(table)
        if keys and rows:  # COPY TO takes its path literally (no glob): quoted, not escaped
            con.execute(f"COPY (SELECT * REPLACE ({_hive_value_sql('run_id')} AS run_id) FROM {table}) "
                        f"TO {_quote(out / table)} "
                        f"(FORMAT parquet, PARTITION_BY ({', '.join(keys)}), OVERWRITE_OR_IGNORE)")
        else:
            con.execute(f"COPY {table} TO {_quote(out / (table + '.parquet'))} (FORMAT parquet)")
    return counts


def _export_names() -> set[str]:
    return {f"{table}.parquet" for table in TABLES} | set(PARTITIONED)


def _check_replaceable(out: Path) -> None:
    """``out`` may be replaced: absent, an empty directory, or an export (only the names an export writes)."""
    if not out.is_dir() or out.is_symlink():
        return  # absent (made), or not a directory: the rename says why in one line
    names = {entry.name for entry in out.iterdir()}
    if (out / "meta.parquet").is_file() and (out / "traces").is_dir():
        raise OverwriteError(f"{out}: an ingest dataset (`scaletrace ingest --parquet`), not an export; nothing was "
                             "written: export to a new directory")
    if names - _export_names():
        shown = ", ".join(sorted(names - _export_names())[:3])
        raise OverwriteError(f"{out}: exists and is not a scaletrace Parquet export (it holds {shown}); nothing was "
                             "written: give a new or empty directory")


def _temporary_sibling(out: Path) -> Path:
    """A new hidden directory beside ``out`` (the same file system: the rename is atomic); the
    leftovers of exports that were killed (their process gone) are deleted first."""
    for stale in out.parent.glob(f".{glob_literal(out.name)}.*.export"):
        pid = stale.name[len(out.name) + 2:].split(".", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    tmp = out.parent / f".{out.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.export"
    try:
        tmp.mkdir(parents=True)
    except OSError as exc:  # the line names the user's path, not the hidden one
        raise OSError(exc.errno, exc.strerror, str(out)) from None
    return tmp


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


RENAME_EXCHANGE = 2  # linux/fs.h: renameat2 swaps the two paths atomically


def _publish(tmp: Path, out: Path) -> None:
    """Put the directory ``tmp`` at ``out``: a rename when ``out`` is absent; else the two are
    exchanged (renameat2, one step) or, where that is not available, ``out`` is moved aside and
    ``tmp`` renamed in; the old export is then deleted."""
    if not os.path.lexists(out):
        os.rename(tmp, out)
        return
    if _exchange(tmp, out):
        shutil.rmtree(tmp, ignore_errors=True)  # now the old export
        return
    old = out.with_name(f".{out.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.old.export")
    os.rename(out, old)
    os.rename(tmp, out)
    shutil.rmtree(old, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE); False where it is not available."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    return False


def open_parquet(directory: str | Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with each table of an export or an ingest dataset (pipeline/execute/dataset.py),
    plus the package's macros and reference tables: the small tables, and the event tables when
    they fit (``IN_MEMORY_FRACTION``), loaded once; larger event tables as views over the files.

    Each has the schema's columns, in its order and of its types (hive partition values come
    back as text).  The per-trace tables keep only rows whose trace has a record in ``traces``: a
    dataset's parts being written, or left by a task that died, are not read.  A table with no
    files is the schema's empty table.  A column the files lack (written by an older version) is
    NULL; then, as a database file is, the directory is refused in one line when this version
    cannot answer from it (``dbcheck.check_readable``: traces an older version read), or when a
    part of a trace lacks one of its table's columns (hand-edited, or another tool's)."""
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
    lacking: list[tuple[Path, list[str]]] = []  # (part, the columns it lacks) of the per-trace tables
    renamed = None  # {folder value: run id}, once runs and traces are read (they come first in TABLES)
    for table in TABLES:
        if renamed is None and table in PARTITIONED:
            renamed = _map_run_folders(con)
        files = _files(directory, table, dataset)
        if not files:
            continue
        columns = con.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = ? "
                              "ORDER BY column_index", [table]).fetchall()
        keys = PARTITIONED.get(table, ()) if not files[0].parent == directory else ()
        held = _columns_of(con, files)  # None: a file's footer cannot be read (_create names it)
        present = set(keys).union(*held.values()) if held else {name for name, _ in columns}
        select = ", ".join(f'CAST("{name}" AS {typ}) AS "{name}"' if name in present else
                           f'CAST(NULL AS {typ}) AS "{name}"' for name, typ in columns)
        if held and table in PER_TRACE_TABLES:
            lacking += [(path, missed) for path, names in held.items()
                        if (missed := [name for name, _ in columns if name not in names and name not in keys])]
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
        _create(con, kind, table, select, files, keys, where, bool(renamed))
    try:
        register_definitions(con, directory)
        _check_parts(con, directory, dataset, lacking)
    except BaseException:
        con.close()
        raise
    return con


def _columns_of(con, files: list[Path]) -> dict[Path, set[str]] | None:
    """The top-level column names of each whole file (one query over their footers, which the
    reads after it find cached); None when one cannot be read."""
    whole = [f for f in files if whole_parquet(f)]
    try:
        listed = ", ".join(map(sql_path, whole))
        rows = con.execute(f"SELECT file_name, name, num_children FROM parquet_schema([{listed}])").fetchall() \
            if whole else []
    except duckdb.Error:
        return None
    by_file: dict[str, list[tuple[str, int]]] = {}
    for file_name, name, children in rows:
        by_file.setdefault(file_name, []).append((name, children or 0))
    return {path: _top_level(by_file.get(str(path), [])) for path in whole}


def _top_level(elements: list[tuple[str, int]]) -> set[str]:
    """The root's children among a file's schema elements (depth first: each with its number of children)."""
    names, i = set(), 1

    def skip(i: int) -> int:
        count = elements[i][1]
        i += 1
        for _ in range(count):
            i = skip(i)
        return i

    for _ in range(elements[0][1] if elements else 0):
        names.add(elements[i][0])
        i = skip(i)
    return names


def _check_parts(con, directory: Path, dataset: bool, lacking: list[tuple[Path, list[str]]]) -> None:
    """Refuse what this version cannot answer from (``dbcheck.check_readable``), then a part of a
    committed trace that lacks a column of its table (a dataset's uncommitted parts are never read)."""
    from scaletrace.pipeline.store import dbcheck

    dbcheck.check_readable(con, directory, "dataset" if dataset else "export")
    if dataset and lacking:
        committed = {str(t) for (t,) in con.execute("SELECT trace_id FROM traces").fetchall()}
        lacking = [(path, missed) for path, missed in lacking if path.stem in committed]
    if lacking:
        path, missed = lacking[0]
        more = f" (and {len(lacking) - 1} more parts)" if len(lacking) > 1 else ""
        raise DatabaseError(f"{path}: a part without column{'s' * (len(missed) > 1)} {', '.join(missed)}{more}, "
                            "not as scaletrace wrote it; put the part back, or ingest its traces into a new dataset")


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


def _map_run_folders(con) -> dict[str, str]:
    """The temporary table ``_hive_run_ids`` (folder value -> run id) of the run ids whose partition
    folders name them by a prefix and a hash (``hive_value``); returns the mapping."""
    run_ids = [r for (r,) in con.execute("SELECT run_id FROM runs UNION SELECT run_id FROM traces").fetchall()]
    renamed = hive_run_ids(run_ids)
    if renamed:
        con.execute("CREATE TEMP TABLE _hive_run_ids (hive VARCHAR, run_id VARCHAR)")
        con.executemany("INSERT INTO _hive_run_ids VALUES (?, ?)", list(renamed.items()))
    return renamed


def _create(con, kind: str, table: str, select: str, files: list[Path], keys: tuple, where: str,
            renamed: bool = False) -> None:
    """Replace the schema's empty ``table`` by a table (or view) over ``files``; when one is damaged
    (truncated, garbage, 0 bytes, a partition value that is not its column's type), each is
    checked and the damaged ones are named and left out (all damaged: the empty table stays)."""
    if _replace(con, kind, table, f"SELECT {select} FROM {_read(files, keys, renamed)}{where}"):
        return
    good = []
    for path in files:
        try:
            con.execute(f"CREATE TEMP TABLE _checked AS SELECT {select} FROM {_read([path], keys, renamed)}")
            good.append(path)
        except duckdb.Error as exc:
            damaged(path, exc)
        finally:
            con.execute("DROP TABLE IF EXISTS _checked")
    if good:
        _replace(con, kind, table, f"SELECT {select} FROM {_read(good, keys, renamed)}{where}")


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


def _read(files: list[Path], keys: tuple, renamed: bool = False) -> str:
    """read_parquet over ``files``; ``renamed``: a ``run_id`` folder value that is a long run id's
    prefix and hash is read as that run id (``_hive_run_ids``)."""
    hive = f", hive_partitioning = true, hive_types = {{{', '.join(f'{k!r}: VARCHAR' for k in keys)}}}" if keys else ""
    read = f"read_parquet([{', '.join(sql_path(f) for f in files)}]{hive}, union_by_name = true)"
    if not (renamed and "run_id" in keys):
        return read
    return (f"(SELECT * REPLACE (coalesce((SELECT k.run_id FROM _hive_run_ids k WHERE k.hive = p.run_id), p.run_id) "
            f"AS run_id) FROM {read} p)")
