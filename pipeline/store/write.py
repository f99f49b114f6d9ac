"""Write trace files' rows: each one's ``traces`` row, its run's ``runs`` row and its per-trace
tables, in one transaction (one file's, or a batch's: pipeline/execute/ingest.py); the DDL and connections
are ``pipeline/store/schema.py``."""

from __future__ import annotations

from dataclasses import astuple, dataclass, fields
from typing import TYPE_CHECKING

from scaletrace.pipeline.read.vocabulary import PER_TRACE_TABLES

if TYPE_CHECKING:
    import pyarrow as pa

    from scaletrace.pipeline.read.extract import Extracted


@dataclass(frozen=True)
class TraceRow:
    """One ``traces`` row, less ``trace_id``, ``status`` and ``ingested_at`` (the store sets those);
    fields in the table's column order (README "Schema" says what each holds)."""

    path: str  # absolute file path (unique)
    run_id: str
    rank: int
    rank_source: str  # distributed_info / manifest / file_name / single_trace
    sha256: str
    bytes: int  # file size
    json_bytes: int  # uncompressed JSON size
    num_events: int
    host: str | None
    pid: int | None
    device_name: str | None
    world_size: int | None
    backend: str | None
    nccl_version: str | None
    base_time_ns: int | None
    ts_fractional: bool
    trace_mode: str  # gpu / cpu
    extract_version: str | None = None  # extract.EXTRACT_VERSION that made the rows (another: parsed again)
    stat_key: str | None = None  # runsync.stat_key of the file when read (None: hash it on the next ingest)


_TRACE_COLUMNS = [f.name for f in fields(TraceRow)]


def replace_trace(con, trace: TraceRow, run: dict | None, ex: Extracted | None, trace_id: int | None = None) -> int:
    """Replace the rows of ``trace.path`` with ``ex`` atomically (and upsert ``run``, a ``runs`` row
    from ``manifest.run_row``; None: this ingest has already written it); returns the new trace_id
    (``trace_id``, else the next of the sequence).  ``ex`` None: only the trace's record (a Parquet
    dataset's tasks wrote its rows)."""
    con.execute("BEGIN")
    try:
        (trace_id,) = put_traces(con, [trace], [run] if run else [], stored_ids(con, [trace.path]), [trace_id])
        append_rows(con, [(trace_id, trace, ex)] if ex else [])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return trace_id


def stored_ids(con, paths: list[str]) -> list[int]:
    """The trace_ids stored from ``paths`` (those of them stored before)."""
    return [tid for (tid,) in con.execute("SELECT trace_id FROM traces WHERE list_contains(?, path)",
                                          [paths]).fetchall()]


def put_traces(con, traces: list[TraceRow], runs: list[dict], replaced: list[int],
               trace_ids: list[int | None] | None = None) -> list[int]:
    """Inside the caller's transaction: drop the rows of the stored traces ``replaced`` (their
    trace_ids: the older versions of ``traces``), upsert ``runs`` and insert the ``traces`` rows;
    returns their trace_ids, in order (``trace_ids``' where given, else the sequence's next).  A
    few statements for a whole batch (a statement costs ~1.5 ms whatever its rows); the per-trace
    rows follow with :func:`append_rows` in the same transaction."""
    if replaced:
        for table in (*PER_TRACE_TABLES, "traces"):
            con.execute(f"DELETE FROM {table} WHERE list_contains(?, trace_id)", [replaced])
    put_runs(con, runs)
    if not traces:
        return []
    ids = trace_ids or [None] * len(traces)
    rows = [(trace_id, *astuple(trace)) for trace_id, trace in zip(ids, traces)]
    made = dict(_insert(con, "traces", ["trace_id", *_TRACE_COLUMNS], list(zip(*rows)),
                        {"trace_id": "coalesce(trace_id, nextval('trace_id_seq'))", "status": "'ok'",
                         "ingested_at": "now()"}, "RETURNING path, trace_id").fetchall())
    return [made[trace.path] for trace in traces]


def _insert(con, table: str, columns: list[str], values: list[tuple], computed: dict[str, str], tail: str = ""):
    """One INSERT of many rows into ``table``: ``values`` holds each column's values (as lists:
    ``unnest`` zips them into rows, ~8 ms for 32 traces rows, where as many VALUES tuples took
    ~20 ms and as many single INSERTs ~90 ms); ``computed``: column -> SQL over the others."""
    names = [*dict.fromkeys([*columns, *computed])]
    select = ", ".join(computed.get(name, name) for name in names)
    unnest = ", ".join(f"unnest(?) AS {name}" for name in columns)
    return con.execute(f"INSERT INTO {table} ({', '.join(names)}) SELECT {select} FROM (SELECT {unnest}) {tail}",
                       [list(column) for column in values])


def put_run(con, run: dict) -> None:
    """Insert or replace the ``runs`` row ``run`` (``manifest.run_row``)."""
    put_runs(con, [run])


def put_runs(con, runs: list[dict]) -> None:
    """Insert or replace the ``runs`` rows ``runs`` (``manifest.run_row``, one key order): an UPDATE
    for each stored one, one INSERT for the others (measured: 3-4 ms an UPDATE, where DuckDB's
    INSERT OR REPLACE took 10-12 ms a row)."""
    if not runs:
        return
    stored = {run_id for (run_id,) in con.execute("SELECT run_id FROM runs WHERE list_contains(?, run_id)",
                                                  [[run["run_id"] for run in runs]]).fetchall()}
    for run in runs:
        if run["run_id"] in stored:
            others = [column for column in run if column != "run_id"]
            con.execute(f"UPDATE runs SET {', '.join(f'{c} = ?' for c in others)}, updated_at = now() "
                        "WHERE run_id = ?", [*(run[c] for c in others), run["run_id"]])
    new = [run for run in runs if run["run_id"] not in stored]
    if new:
        columns = list(new[0])
        _insert(con, "runs", columns, [[run[c] for run in new] for c in columns], {"updated_at": "now()"})


def append_rows(con, parts: list[tuple[int, TraceRow, Extracted]]) -> None:
    """Inside the caller's transaction: the per-trace tables of several traces, one INSERT per
    table for all of them (each table's Arrow parts, with their trace_id, run_id and rank columns
    put in front, joined without a copy).  A statement costs ~1.5 ms whatever its size, so a file's
    seven inserts were most of a small file's write."""
    import pyarrow as pa  # loaded with the parse: an ingest that parses nothing never needs it

    for table in PER_TRACE_TABLES:
        pieces = [_keyed(ex.table(table), trace_id, trace) for trace_id, trace, ex in parts]  # one table at a time
        pieces = [piece for piece in pieces if piece.num_rows]
        if not pieces:
            continue
        try:
            joined = [pa.concat_tables(pieces, promote_options="permissive")] if len(pieces) > 1 else pieces
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # parts that no common schema holds: one insert each
            joined = pieces
        for arrow in joined:
            # a relation over the table, not a registered view: DuckDB holds a registered object until
            # the transaction ends, so a batch's tables were all in memory at its COMMIT
            con.from_arrow(arrow).insert_into(table)


def _keyed(arrow: pa.Table, trace_id: int, trace: TraceRow) -> pa.Table:
    """``arrow`` with the table's three leading columns (trace_id, run_id, rank) in front (built
    from buffers: ``pa.array`` imports pandas on its first call)."""
    import numpy as np
    import pyarrow as pa

    rows = arrow.num_rows
    run_id = trace.run_id.encode("utf-8")
    name = pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(np.array([0, len(run_id)], np.int32)),
                                                  pa.py_buffer(run_id)])
    run = pa.DictionaryArray.from_arrays(_full(0, rows, np.int32), name)
    return (arrow.add_column(0, "_trace_id", _full(trace_id, rows, np.int64))
            .add_column(1, "_run_id", run)
            .add_column(2, "_rank", _full(trace.rank, rows, np.int64)))


def _full(value: int, rows: int, dtype) -> pa.Array:
    import numpy as np
    import pyarrow as pa

    return pa.Array.from_buffers(pa.from_numpy_dtype(dtype), rows, [None, pa.py_buffer(np.full(rows, value, dtype))])


def put_stat_key(con, path: str, key: str | None) -> None:
    """Store the stat of an unchanged file that was hashed (its stat differed, or was racy), so that
    the next ingest skips it unread."""
    if key is not None:
        con.execute("UPDATE traces SET stat_key = ? WHERE path = ? AND stat_key IS DISTINCT FROM ?", [key, path, key])


def drop_trace(con, path: str) -> None:
    """Delete the rows of the trace stored from ``path``, in one transaction."""
    con.execute("BEGIN")
    try:
        for (tid,) in con.execute("SELECT trace_id FROM traces WHERE path = ?", [path]).fetchall():
            for table in PER_TRACE_TABLES:
                con.execute(f"DELETE FROM {table} WHERE trace_id = ?", [tid])
            con.execute("DELETE FROM traces WHERE trace_id = ?", [tid])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def vanished(con, runs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(path, run id) of the stored traces of each (run id, run directory) of ``runs`` (of the run,
    or of its directory) whose file is gone from the disk: what a re-profiled run left behind.
    One query for all the runs."""
    import os

    order = {run_id: i for i, (run_id, _) in enumerate(runs)}  # the runs' order, each run's paths sorted
    by_dir = {run_dir.rstrip("/"): run_id for run_id, run_dir in runs}
    gone = []
    for path, stored_id in con.execute("SELECT path, run_id FROM traces").fetchall():
        run_id = stored_id if stored_id in order else by_dir.get(os.path.dirname(path))
        if run_id is not None and not os.path.lexists(path):
            gone.append((order[run_id], path, run_id))
    return [(path, run_id) for _, path, run_id in sorted(gone)]


def duplicate_ranks(con, run_id: str) -> list[tuple[int, list[str]]]:
    """(rank, paths) of every rank the run holds more than one trace of."""
    return con.execute("SELECT rank, list(path ORDER BY path) FROM traces WHERE run_id = ? GROUP BY rank "
                       "HAVING count(*) > 1 ORDER BY rank", [run_id]).fetchall()
