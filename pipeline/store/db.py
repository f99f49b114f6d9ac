"""Read-only access to a scaletrace database; results are polars DataFrames."""

from __future__ import annotations

import functools
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import duckdb
import polars as pl

from scaletrace import queries
from scaletrace.queries import definitions
from scaletrace.pipeline.common import limits, sandbox
from scaletrace.pipeline.store import dbcheck
from scaletrace.pipeline.store.schema import DatabaseError, _first_line, connect_waiting, register_definitions

# Query parameters that must name something in the database, so that a typo is an
# error and not an empty table: parameter -> (what it names, plural, SQL of the known values).
KNOWN_VALUES = {
    "run_id": ("run", "runs", "SELECT DISTINCT run_id FROM runs ORDER BY 1"),
    "workload": ("sweep (workload)", "workloads", "SELECT DISTINCT workload FROM runs WHERE workload IS NOT NULL ORDER BY 1"),
}
KNOWN_VALUES["run_a"] = KNOWN_VALUES["run_b"] = KNOWN_VALUES["run_id"]  # run_diff's two runs
MAX_LISTED = 20  # known values named in one error line
# Queries whose rows are runs of a sweep (run.json `workload`): a note names the runs without one.
SWEEP_QUERIES = ("scaling", "layouts", "scaling_attribution", "scaling_attribution_by_group", "run_gpu_time")
TRACE_MAGIC = (b"\x1f\x8b", b"{", b"[")  # gzip, or JSON in object or array form (a Kineto trace)
READER_MEMORY_FRACTION = 4  # a reading connection's DuckDB memory_limit: this share of the machine's memory
WAIT_SLICE_S = 0.5  # a query's thread is waited for in slices: Ctrl-C does not end a wait without a timeout
INTERRUPT_WAIT_S = 5.0  # after an interrupt, how long to wait for DuckDB to stop before going on without it
BATCH_ROWS = 65_536  # rows per batch of a streamed result (Database.stream)
MEMO_SIZE = 64  # query results a Database keeps for a repeated question (Database.query)
# DuckDB types polars cannot take (or that may hold values it cannot, e.g. an infinite DATE), shown
# as DuckDB's own text; per output format, nested values and BLOBs its writers cannot write.
AS_TEXT = {"interval", "union", "bit", "date", "time", "time with time zone", "timestamp", "timestamp_s",
           "timestamp_ms", "timestamp_ns", "timestamp with time zone", "map", "uhugeint", "varint", "bignum"}
AS_TEXT_FOR = {"csv": {"list", "struct", "array", "blob"}, "json": {"blob"}}


def _listed(items: list) -> str:
    """The first MAX_LISTED of ``items``, comma-separated, then "and N more"."""
    more = f" and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else ""
    return ", ".join(map(str, items[:MAX_LISTED])) + more


class QueryTimeout(queries.QueryError):
    """A query ran past its time limit (``timeout_s``) and was stopped."""


def reader_memory_limit() -> str:
    """DuckDB's memory_limit for reading connections (its own default is 80 % of the machine)."""
    return f"{(limits.physical_memory_bytes() or 8 << 30) // READER_MEMORY_FRACTION // (1 << 20)}MiB"


def guarded(con: duckdb.DuckDBPyConnection, work: Callable, timeout_s: float | None,
            started: float | None = None):
    """``work()`` (which runs queries on ``con``) in a thread, so that Ctrl-C (KeyboardInterrupt in
    this thread) and the time limit always stop it: DuckDB's own check for Ctrl-C misses some.
    Either interrupts ``con``; ``timeout_s`` after ``started`` (time.monotonic(); default: now),
    QueryTimeout."""
    outcome: dict = {}
    done = threading.Event()  # not Thread.join: a join that Ctrl-C interrupts can leave is_alive() wrong

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # noqa: BLE001  handed to the caller's thread
            outcome["error"] = exc
        finally:
            done.set()
            _RUNNING.discard(done)

    _RUNNING.add(done)
    deadline = None if timeout_s is None else (time.monotonic() if started is None else started) + timeout_s
    threading.Thread(target=run, name="scaletrace-query", daemon=True).start()
    try:
        while not done.is_set():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                _stop(con, done)
                raise QueryTimeout(f"stopped after {timeout_s:g} s, the time limit "
                                   "(--timeout SECONDS to change it, 0 for none)")
            done.wait(WAIT_SLICE_S if left is None else min(left, WAIT_SLICE_S))  # an untimed wait misses Ctrl-C
    except KeyboardInterrupt:
        _stop(con, done)
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


_RUNNING: set = set()  # the done events of queries not finished yet


def _stop(con: duckdb.DuckDBPyConnection, done: threading.Event) -> None:
    """Interrupt ``con`` until its query is done (an interrupt before the query starts is lost), for
    at most INTERRUPT_WAIT_S; Ctrl-C meanwhile is ignored (the first one is being handled)."""
    deadline = time.monotonic() + INTERRUPT_WAIT_S
    while not done.is_set() and time.monotonic() < deadline:
        con.interrupt()
        try:
            done.wait(0.05)
        except KeyboardInterrupt:
            pass


def query_running() -> bool:
    """A query thread that did not stop when interrupted (the process must exit without waiting)."""
    return bool(_RUNNING)


def _within_limit(method: Callable) -> Callable:
    """A :class:`Database` call whose statements share one time limit (see Database.time_limit)."""
    @functools.wraps(method)
    def call(self: "Database", *args, **kwargs):
        with self.time_limit():
            return method(self, *args, **kwargs)

    return call


class Database:
    """A scaletrace DuckDB file opened read-only, or a directory written by
    ``scaletrace export --parquet`` (read through views).  Either way the
    connection carries this version's macros and reference tables, never the
    copies an older version stored in the file (queries/definitions.py).

    >>> db = connect("scaletrace.duckdb")
    >>> db.query("rank_breakdown", run_id="param-dlrm-8rank")
    """

    def __init__(self, path: str | Path, wait_s: float = 10.0, timeout_s: float | None = None):
        self.path = Path(path)
        self.timeout_s = timeout_s  # each call's time limit (None: none); Ctrl-C stops one either way
        self._started: float | None = None  # when the time limit's block began (time_limit)
        self._memo: dict[tuple, pl.DataFrame] = {}  # (query, parameters) -> its result (query())
        self._shared: set[str] = set()  # the definitions.SHARED_PER_RUN macros computed on this connection
        not_db = _traces_not_database(self.path)
        if not_db:
            raise DatabaseError(not_db)
        if self.path.is_dir():  # a Parquet export (scaletrace export --parquet)
            from scaletrace.pipeline.store.export import open_parquet

            self.con = open_parquet(self.path)  # refused as a database file is (dbcheck.check_readable)
            self.con.execute(f"SET memory_limit = '{reader_memory_limit()}'")
            return
        if not self.path.is_file():
            raise DatabaseError(f"{path}: no such database; create it with `scaletrace ingest PATH --db {path}`")
        self.con = connect_waiting(self.path, read_only=True, wait_s=wait_s)
        try:
            guarded(self.con, lambda: self._set_up(path), None)  # as a query is: Ctrl-C stops it at once
        except BaseException:
            self.close()  # now: the error's traceback keeps this object, and DuckDB the file, alive
            raise

    def _set_up(self, path: str | Path) -> None:
        """Check that the file is a scaletrace database this version can answer from as it is (its
        columns, its traces' rows: ``dbcheck.check_readable``); register the definitions."""
        # SET, not connect's config: a connection to a file open in this process must match its config
        self.con.execute(f"SET memory_limit = '{reader_memory_limit()}'")
        try:
            self.con.sql("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
        except duckdb.Error as exc:
            raise DatabaseError(f"{path}: not a scaletrace database ({_first_line(exc)})") from None
        dbcheck.check_readable(self.con, path)
        register_definitions(self.con, path)

    @contextmanager
    def time_limit(self):
        """Every statement run inside this block shares one time limit, ``timeout_s`` from the
        block's start (the outermost block's, when nested).  Each call (query, notes, sql, stream)
        is such a block, so one call holds the database no longer than the limit however many
        statements it runs; the command line puts its whole command in one."""
        if self._started is not None:
            yield
            return
        self._started = time.monotonic()
        try:
            yield
        finally:
            self._started = None

    @_within_limit
    def query(self, name: str, **params) -> pl.DataFrame:
        """Run the named query file (see `scaletrace query --list`).  A Database answers from one
        snapshot (no process can write a DuckDB file while it is open read-only): a query asked
        again with the same parameters gets the first result (explain and the report ask several
        twice); the last MEMO_SIZE results are kept."""
        q = queries.load(name)
        bound = queries.bind(q, params)
        key = (name, tuple(sorted(bound.items())))
        if key in self._memo:
            self._memo[key] = self._memo.pop(key)  # most recently used last
            return self._memo[key].clone()
        for param, value in bound.items():
            if value is not None and param in KNOWN_VALUES:
                self._check_known(param, value)
        from scaletrace.queries.analysis import critical_path

        if name in critical_path.QUERIES:  # SQL over a walk that runs in Python first
            critical_path.prepare(self, bound.get("run_id"))
        if bound.get("run_id") is None:  # a question about every run: share what several queries read
            for shared in definitions.SHARED_PER_RUN:
                if shared not in self._shared and definitions.reads(q.sql, shared):
                    self._guard(lambda: definitions.share(self.con, shared))
                    self._shared.add(shared)
        result = self._run(q.sql, bound)
        self._memo[key] = result
        while len(self._memo) > MEMO_SIZE:
            self._memo.pop(next(iter(self._memo)))
        return result.clone()

    def _check_known(self, param: str, value: object) -> None:
        what, plural, sql = KNOWN_VALUES[param]
        known = [row[0] for row in self._run(sql, None).iter_rows()]
        if value in known:
            return
        if not known:
            raise queries.QueryError(f"no {what} '{value}' in {self.path}: it holds no {plural}")
        raise queries.QueryError(f"no {what} '{value}' in {self.path}; known {plural}: {_listed(known)}")

    @_within_limit
    def notes(self, name: str, **params) -> list[str]:
        """Why the named query's result may lack rows: an empty database, or the
        runs selected by ``run_id`` (all when NULL) whose traces are CPU-only, for
        a query whose header has a ``cpu_only`` note (the hta_* queries).
        """
        q = queries.load(name)
        if self.num_traces() == 0:
            return [f"{self.path} holds no traces: ingest some with `scaletrace ingest PATH --db {self.path}`"]
        if name in SWEEP_QUERIES:
            return self._no_workload_note(name)
        if not q.cpu_only:
            return []
        run_id = queries.bind(q, params).get("run_id")
        cpu_runs = self._run("SELECT DISTINCT run_id FROM traces WHERE trace_mode = 'cpu' "
                             "AND ($run_id IS NULL OR run_id = $run_id) ORDER BY 1", {"run_id": run_id})
        if cpu_runs.is_empty():
            return []
        return [f"{', '.join(cpu_runs['run_id'])}: {q.cpu_only}"]

    def _no_workload_note(self, name: str) -> list[str]:
        """The runs a sweep query leaves out because run.json gives them no workload."""
        alone = self._run("SELECT run_id FROM runs WHERE workload IS NULL ORDER BY 1", None)["run_id"].to_list()
        if not alone:
            return []
        listed = _listed(alone)
        return [f"{len(alone)} run{'s' * (len(alone) != 1)} without a workload in run.json, so in no sweep and not in "
                f"'{name}': {listed}; give them one with `scaletrace ingest PATH --meta workload=NAME` "
                "(`scaletrace explain` describes every run on its own)"]

    @_within_limit
    def num_traces(self) -> int:
        """Trace files ingested into this database."""
        return self._run("SELECT count(*) FROM traces", None).item()

    @_within_limit
    def sql(self, text: str, params: dict | None = None) -> pl.DataFrame:
        """Run one ad-hoc SQL statement; the connection is read-only, so it cannot change the database.

        Several statements are refused: DuckDB would run them all and return only the last result.
        Repeated column names get ``_2``, ``_3``; values polars cannot take (INTERVAL, UNION, an
        infinite DATE) are DuckDB's text.
        """
        self.sql_check(text)  # and no file but the database (ATTACH, COPY TO, readers)
        return self._run(text, params, showable=True)

    @_within_limit
    def stream(self, text: str, on_batch: Callable[[pl.DataFrame], None], fmt: str = "table",
               columns: list[str] | None = None, batch_rows: int = BATCH_ROWS) -> list[str]:
        """Run one ad-hoc read-only statement (as :meth:`sql`) and hand its result to ``on_batch`` in
        DataFrames of up to ``batch_rows`` rows, never all of it at once; returns the column names.
        Values ``fmt``'s writer cannot take are DuckDB's text; repeated column names get ``_2``, ``_3``."""
        self.sql_check(text)

        def work() -> list[str]:
            rel = self.con.sql(text)
            if rel is None:  # a statement with no result set
                return []
            rel = self._showable(rel, fmt, columns)
            reader = rel.to_arrow_reader(batch_rows)
            for batch in reader:
                on_batch(_to_polars(batch))
            return rel.columns

        return self._guard(work)

    def sql_check(self, text: str) -> None:
        """Refuse what :meth:`sql` refuses (not one statement, not a query) and fence the connection."""
        try:
            statements = duckdb.extract_statements(text)
        except duckdb.Error as exc:
            raise queries.QueryError(_first_line(exc)) from None
        if len(statements) != 1:
            raise queries.QueryError(f"give exactly one SQL statement, got {len(statements)}"
                                     + (" (run them one at a time)" if statements else ""))
        sandbox.check_reads(statements[0])
        sandbox.fence(self.con, self.path if self.path.is_dir() else None)

    def _run(self, text: str, params, showable: bool = False) -> pl.DataFrame:
        def work() -> pl.DataFrame:
            rel = self.con.sql(text, params=params or None)
            if rel is None:  # a statement with no result set
                return pl.DataFrame()
            return _to_polars(self._showable(rel) if showable else rel)

        return self._guard(work)

    def _guard(self, work: Callable):
        try:
            return guarded(self.con, work, self.timeout_s, self._started)
        except duckdb.Error as exc:
            raise queries.QueryError(_first_line(exc)) from None

    @staticmethod
    def _showable(rel: duckdb.DuckDBPyRelation, fmt: str = "table", columns: list[str] | None = None
                  ) -> duckdb.DuckDBPyRelation:
        """``rel`` with repeated column names made unique and the values polars (or ``fmt``'s
        writer) cannot take cast to text; only ``columns`` where given (a user mistake: QueryError)."""
        text_ids = AS_TEXT | AS_TEXT_FOR.get(fmt, set())
        names, seen = [], {}
        for name in rel.columns:
            seen[name] = seen.get(name, 0) + 1
            names.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
        picked = list(range(len(names)))
        if columns is not None:
            unknown = [c for c in columns if c not in names]
            if unknown or not columns:
                raise queries.QueryError(f"the result has no column {', '.join(unknown) or '(none given)'}; "
                                         f"its columns: {', '.join(names)}")
            picked = [names.index(c) for c in columns]
        exprs = []
        for i in picked:
            ref = f"#{i + 1}" + ("::VARCHAR" if rel.types[i].id in text_ids else "")
            exprs.append(f'{ref} AS "{names[i].replace(chr(34), chr(34) * 2)}"')
        if names == rel.columns and picked == list(range(len(names))) and not any("::" in e for e in exprs):
            return rel
        return rel.project(", ".join(exprs))

    def close(self) -> None:
        if not query_running():  # a query that ignored its interrupts keeps the connection busy
            self.con.close()

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _to_polars(data) -> pl.DataFrame:
    """A relation's result or one Arrow batch as polars; what polars still cannot take is one line."""
    try:
        table = data.to_arrow_table() if isinstance(data, duckdb.DuckDBPyRelation) else data
        return pl.from_arrow(table)
    except duckdb.Error:
        raise
    except Exception as exc:  # noqa: BLE001  polars / pyarrow: a type they cannot convert
        raise queries.QueryError(f"cannot show this result ({type(exc).__name__}: {_first_line(exc)}); "
                                 "cast the column, e.g. col::VARCHAR") from None


def _is_trace(path: Path) -> bool:
    """A trace file by its name (the names ingest reads) or its first bytes (gzip or JSON, not DuckDB's)."""
    from scaletrace.pipeline.read.manifest import is_trace_file

    if is_trace_file(path):
        return True
    try:
        with path.open("rb") as f:
            head = f.read(64)
    except OSError:
        return False
    return head[8:12] != b"DUCK" and head.lstrip().startswith(TRACE_MAGIC)


def _holds_traces(path: Path, limit: int = 10_000) -> bool:
    """A trace file somewhere under ``path`` (among the first ``limit`` entries)."""
    from scaletrace.pipeline.read.manifest import is_trace_file

    for i, found in enumerate(path.rglob("*")):
        if i >= limit:
            return False
        if is_trace_file(found):
            return True
    return False


def _traces_not_database(path: Path) -> str | None:
    """What to say when --db names traces (a trace file, or a folder of them that is no Parquet
    export) instead of a database: ingest them first.  None for anything else."""
    import shlex

    if path.is_file() and _is_trace(path):
        what = "a trace file"
    elif path.is_dir() and not (path / "meta.parquet").exists() and _holds_traces(path):
        what = "a folder of traces"
    else:
        return None
    return (f"{path}: {what}, not a scaletrace database; ingest it first: "
            f"`scaletrace ingest {shlex.quote(str(path))} --db runs.duckdb`, then give `--db runs.duckdb`")


def connect(path: str | Path = "scaletrace.duckdb", wait_s: float = 10.0, timeout_s: float | None = None
            ) -> Database:
    """Open read-only; waits up to ``wait_s`` seconds while an ingest holds the file; each call
    (query, sql, ...) stops after ``timeout_s`` seconds (None: no limit) with QueryTimeout.  While
    a Database is open no ingest can write the file: close it (or use ``with``) when done."""
    return Database(path, wait_s, timeout_s)
