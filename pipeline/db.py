"""Read-only access to a scaletrace database; results are polars DataFrames."""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl

from scaletrace import queries
from scaletrace.pipeline import sandbox
from scaletrace.pipeline.schema import DatabaseError, _first_line, connect_waiting, register_definitions

# Query parameters that must name something in the database, so that a typo is an
# error and not an empty table: parameter -> (what it names, plural, SQL of the known values).
KNOWN_VALUES = {
    "run_id": ("run", "runs", "SELECT DISTINCT run_id FROM runs ORDER BY 1"),
    "workload": ("sweep (workload)", "workloads", "SELECT DISTINCT workload FROM runs WHERE workload IS NOT NULL ORDER BY 1"),
}
MAX_LISTED = 20  # known values named in one error line


class Database:
    """A scaletrace DuckDB file opened read-only, or a directory written by
    ``scaletrace export --parquet`` (read through views).  Either way the
    connection carries this version's macros and reference tables, never the
    copies an older version stored in the file (queries/definitions.py).

    >>> db = connect("scaletrace.duckdb")
    >>> db.query("rank_breakdown", run_id="param-dlrm-8rank")
    """

    def __init__(self, path: str | Path, wait_s: float = 10.0):
        self.path = Path(path)
        if self.path.is_dir():  # a Parquet export (scaletrace export --parquet)
            from scaletrace.pipeline.export import open_parquet

            self.con = open_parquet(self.path)
            return
        if not self.path.is_file():
            raise DatabaseError(f"{path}: no such database; create it with `scaletrace ingest PATH --db {path}`")
        self.con = connect_waiting(self.path, read_only=True, wait_s=wait_s)
        try:
            self.con.sql("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
        except duckdb.Error as exc:
            raise DatabaseError(f"{path}: not a scaletrace database ({_first_line(exc)})") from None
        register_definitions(self.con, path)

    def query(self, name: str, **params) -> pl.DataFrame:
        """Run the named query file (see `scaletrace query --list`)."""
        q = queries.load(name)
        bound = queries.bind(q, params)
        for param, value in bound.items():
            if value is not None and param in KNOWN_VALUES:
                self._check_known(param, value)
        return self._run(q.sql, bound)

    def _check_known(self, param: str, value: object) -> None:
        what, plural, sql = KNOWN_VALUES[param]
        known = [row[0] for row in self._run(sql, None).iter_rows()]
        if value in known:
            return
        if not known:
            raise queries.QueryError(f"no {what} '{value}' in {self.path}: it holds no {plural}")
        listed = ", ".join(map(str, known[:MAX_LISTED]))
        more = f" and {len(known) - MAX_LISTED} more" if len(known) > MAX_LISTED else ""
        raise queries.QueryError(f"no {what} '{value}' in {self.path}; known {plural}: {listed}{more}")

    def notes(self, name: str, **params) -> list[str]:
        """Why the named query's result may lack rows: an empty database, or the
        runs selected by ``run_id`` (all when NULL) whose traces are CPU-only, for
        a query whose header has a ``cpu_only`` note (the hta_* queries).
        """
        q = queries.load(name)
        if self.num_traces() == 0:
            return [f"{self.path} holds no traces: ingest some with `scaletrace ingest PATH --db {self.path}`"]
        if not q.cpu_only:
            return []
        run_id = queries.bind(q, params).get("run_id")
        cpu_runs = self._run("SELECT DISTINCT run_id FROM traces WHERE trace_mode = 'cpu' "
                             "AND ($run_id IS NULL OR run_id = $run_id) ORDER BY 1", {"run_id": run_id})
        if cpu_runs.is_empty():
            return []
        return [f"{', '.join(cpu_runs['run_id'])}: {q.cpu_only}"]

    def num_traces(self) -> int:
        """Trace files ingested into this database."""
        return self._run("SELECT count(*) FROM traces", None).item()

    def sql(self, text: str, params: dict | None = None) -> pl.DataFrame:
        """Run one ad-hoc SQL statement; the connection is read-only, so it cannot change the database.

        Several statements are refused: DuckDB would run them all and return only the last result.
        """
        try:
            statements = duckdb.extract_statements(text)
        except duckdb.Error as exc:
            raise queries.QueryError(_first_line(exc)) from None
        count = len(statements)
        if count != 1:
            raise queries.QueryError(f"give exactly one SQL statement, got {count}"
                                     + (" (run them one at a time)" if count else ""))
        sandbox.check_reads(statements[0])  # and no file but the database (ATTACH, COPY TO, readers)
        sandbox.fence(self.con, self.path if self.path.is_dir() else None)
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
