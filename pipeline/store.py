"""Write one trace file's rows: its ``traces`` row, its run's ``runs`` row and its per-trace tables,
in one transaction (the DDL and connections are ``pipeline/schema.py``)."""

from __future__ import annotations

from dataclasses import astuple, dataclass, fields

from scaletrace.pipeline.extract import Extracted


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


_TRACE_COLUMNS = ", ".join(f.name for f in fields(TraceRow))


def replace_trace(con, trace: TraceRow, run: dict | None, ex: Extracted | None, trace_id: int | None = None) -> int:
    """Replace the rows of ``trace.path`` with ``ex`` atomically (and upsert ``run``, a ``runs`` row
    from ``manifest.run_row``; None: this ingest has already written it); returns the new trace_id
    (``trace_id``, else the next of the sequence).  ``ex`` None: only the trace's record (a Parquet
    dataset's tasks wrote its rows)."""
    con.execute("BEGIN")
    try:
        old = con.execute("SELECT trace_id FROM traces WHERE path = ?", [trace.path]).fetchall()
        if old:
            for table in Extracted.TABLES:
                con.execute(f"DELETE FROM {table} WHERE trace_id = ?", [old[0][0]])
            con.execute("DELETE FROM traces WHERE trace_id = ?", [old[0][0]])
        if trace_id is None:
            trace_id = con.execute("SELECT nextval('trace_id_seq')").fetchall()[0][0]
        if run is not None:
            con.execute(f"INSERT OR REPLACE INTO runs ({', '.join(run)}, updated_at) "
                        f"VALUES ({', '.join('?' * len(run))}, now())", list(run.values()))
        values = astuple(trace)
        con.execute(
            f"INSERT INTO traces (trace_id, {_TRACE_COLUMNS}, status, ingested_at) "
            f"VALUES (?, {', '.join('?' * len(values))}, 'ok', now())",
            [trace_id, *values],
        )
        for table, arrow in (ex.tables() if ex else {}).items():
            con.register("_incoming", arrow)
            con.execute(f"INSERT INTO {table} SELECT ?, ?, ?, * FROM _incoming", [trace_id, trace.run_id, trace.rank])
            con.unregister("_incoming")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return trace_id


def drop_trace(con, path: str) -> None:
    """Delete the rows of the trace stored from ``path``, in one transaction."""
    con.execute("BEGIN")
    try:
        for (tid,) in con.execute("SELECT trace_id FROM traces WHERE path = ?", [path]).fetchall():
            for table in Extracted.TABLES:
                con.execute(f"DELETE FROM {table} WHERE trace_id = ?", [tid])
            con.execute("DELETE FROM traces WHERE trace_id = ?", [tid])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def vanished(con, run_id: str, run_dir: str) -> list[str]:
    """Stored traces of the run (or of its directory) whose file is gone from the disk: what a
    re-profiled run left behind."""
    import os

    rows = con.execute("SELECT path, run_id FROM traces WHERE run_id = ? OR starts_with(path, ?) ORDER BY path",
                       [run_id, run_dir.rstrip("/") + "/"]).fetchall()
    return [path for path, run in rows if (run == run_id or os.path.dirname(path) == run_dir)
            and not os.path.lexists(path)]


def duplicate_ranks(con, run_id: str) -> list[tuple[int, list[str]]]:
    """(rank, paths) of every rank the run holds more than one trace of."""
    return con.execute("SELECT rank, list(path ORDER BY path) FROM traces WHERE run_id = ? GROUP BY rank "
                       "HAVING count(*) > 1 ORDER BY rank", [run_id]).fetchall()
