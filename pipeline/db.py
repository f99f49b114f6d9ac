"""Read-only access to a scaletrace database; results are polars DataFrames."""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl

import queries
from pipeline.schema import DatabaseError, _first_line, connect_waiting


class Database:
    """A scaletrace DuckDB file opened read-only, or a directory written by
    ``scaletrace export --parquet`` (read through views).

    >>> db = connect("scaletrace.duckdb")
    >>> db.query("rank_breakdown", run_id="param-dlrm-8rank")
    """

    def __init__(self, path: str | Path, wait_s: float = 10.0):
        self.path = Path(path)
        if self.path.is_dir():  # a Parquet export (scaletrace export --parquet)
            from pipeline.export import open_parquet

            self.con = open_parquet(self.path)
            return
        if not self.path.is_file():
            raise DatabaseError(f"{path}: no such database; create it with `scaletrace ingest PATH --db {path}`")
        self.con = connect_waiting(self.path, read_only=True, wait_s=wait_s)
        try:
            self.con.sql("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
        except duckdb.Error as exc:
            raise DatabaseError(f"{path}: not a scaletrace database ({_first_line(exc)})") from None

    def query(self, name: str, **params) -> pl.DataFrame:
        """Run the named query file (see `scaletrace query --list`)."""
        q = queries.load(name)
        return self._run(q.sql, queries.bind(q, params))

    def sql(self, text: str, params: dict | None = None) -> pl.DataFrame:
        """Run ad-hoc SQL; the connection is read-only, so it cannot change the database."""
        return self._run(text, params)

    def _run(self, text: str, params) -> pl.DataFrame:
        try:
            rel = self.con.sql(text, params=params or None)
            if rel is None:  # a statement with no result set
                return pl.DataFrame()
            return pl.from_arrow(rel.to_arrow_table())
        except duckdb.Error as exc:
            raise queries.QueryError(_first_line(exc)) from None

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def connect(path: str | Path = "scaletrace.duckdb", wait_s: float = 10.0) -> Database:
    """Open read-only; waits up to ``wait_s`` seconds while an ingest holds the file."""
    return Database(path, wait_s)
