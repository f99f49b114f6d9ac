"""Ingest into a Parquet dataset (``scaletrace ingest --parquet DIR``), trace by trace, in worker
processes on this machine or in Ray tasks on a cluster (``pipeline/execute/engines.py``).

The layout is the hive layout of ``scaletrace export --parquet`` (``pipeline/store/export.py``), so
every reading command opens either with ``--db DIR``::

    DIR/meta.parquet                                     schema version
    DIR/traces/<path key>.parquet                        one row per trace: its commit record
    DIR/runs/<run key>.parquet                           one row per run
    DIR/device_events/run_id=R/rank=K/<trace_id>.parquet cpu_events and collectives alike
    DIR/steps/run_id=R/<trace_id>.parquet                interval_unions, compute_islands alike
    DIR/step_log/run_id=R/data.parquet                   power_samples alike; side_files/<run key>.parquet
    DIR/ingest_log/<started>-<pid>.parquet               one per ingest command

Every file is written under a temporary name and renamed: whole or absent.  A task writes its
trace's parts; then the driver writes the trace's record in ``traces/`` (the commit).  A
``trace_id`` is a hash of (path, sha256, run id, rank), and readers keep only the parts whose
trace_id has a record: the parts of a trace being written, of a task whose node died, or of the
version a changed file replaced are never read, and the end of the next ingest deletes them.

The driver keeps the small tables (runs, traces, side files, this command's ingest log) in an
in-memory DuckDB loaded from DIR, so that run.json edits, side files, rank checks and the log
follow exactly the code of the DuckDB ingest (``pipeline/execute/ingest.py``, ``pipeline/store/runsync.py``).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import itertools
import os
import socket
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator
from urllib.parse import quote

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from scaletrace.pipeline.store import dbcheck, runsync, schema, write as store
from scaletrace.pipeline.read.classify import DEFAULT_RULES, Rule
from scaletrace.pipeline.read.decode import TraceError
from scaletrace.pipeline.common import diskfull, interrupt
from scaletrace.pipeline.common.errors import DatasetError
from scaletrace.pipeline.common.paths import sql_path
from scaletrace.pipeline.store.export import PARTITIONED
from scaletrace.pipeline.store.export import _files as export_files
from scaletrace.pipeline.store.export import hive_run_ids, hive_value, whole_parquet
from scaletrace.pipeline.read.extract import Extracted
from scaletrace.pipeline.execute.ingest import (DEFERRED, ClashWithPending, IngestReport, Outcome, check_clash, discover,
                                                drop_vanished, ingest_side_files, log_outcome,
                                                missing_ranks, parse_file, read_runs, resolve_rank, stale_dropped,
                                                stored_others,
                                                stored_outcome, trace_row, check_output, path_list)
from scaletrace.pipeline.read.manifest import check_meta

TRACE_TABLES = Extracted.TABLES  # written by the tasks, one part per trace and table
STATE_TABLES = ("runs", "traces", "side_files", "step_log", "power_samples")  # written by the driver
LOG_EVERY_S = 5.0  # the ingest log reaches DIR at least this often


@dataclass(frozen=True)
class TraceTask:
    """What one task needs: small, so that 100,000 of them cost little to send."""

    path: str
    run_id: str
    ranks: dict | None  # run.json's "ranks"
    nfiles: int  # the run's trace files in this ingest
    others: int  # traces already stored for the run under other paths
    known_sha: str | None  # skip the file when its sha256 is this
    out: str  # the dataset directory
    rules: tuple[Rule, ...] = DEFAULT_RULES
    keep_python: bool = False
    max_trace_bytes: int | None = None
    on_cluster: bool = False


@dataclass
class TaskResult:
    """What a task sends back: the trace's record, never its rows (those are in DIR already)."""

    trace: store.TraceRow | None = None  # None: unchanged, or failed (``error``)
    trace_id: int | None = None
    zero_duration_events: int = 0
    notes: tuple = ()  # TraceMeta.notes
    error: str | None = None
    node: str | None = None
    no_room: bool = False  # the parts could not be written: a full disk, a quota, read-only


def trace_id(trace: store.TraceRow) -> int:
    """A positive 63-bit id from what makes a trace's rows: its file, content, run and rank."""
    key = f"{trace.path}\0{trace.sha256}\0{trace.run_id}\0{trace.rank}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") >> 1


def _key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _part(value) -> str:
    """A hive partition value as DuckDB writes and reads it (percent-encoded); a long run id by its
    prefix and hash (``export.hive_value``: a file name holds 255 bytes)."""
    return quote(hive_value(value) if isinstance(value, str) else str(value), safe="")


def write_atomic(table: pa.Table, path: Path) -> None:
    """Write ``table`` to ``path`` whole or not at all (a temporary name, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def part_path(out: Path, table: str, run_id: str, rank: int, tid: int) -> Path:
    keys = PARTITIONED[table]
    folder = out / table / f"run_id={_part(run_id)}"
    if "rank" in keys:
        folder = folder / f"rank={_part(rank)}"
    return folder / f"{tid}.parquet"


def write_parts(out: Path, trace: store.TraceRow, tid: int, ex: Extracted) -> None:
    """One Parquet part per non-empty table of the trace; the partition keys live in the path."""
    for table in ex.TABLES:
        rows = ex.table(table)  # one table unpacked at a time (Extracted.table)
        if not rows.num_rows:
            continue
        columns = {"trace_id": pa.repeat(pa.scalar(tid, pa.int64()), rows.num_rows)}
        if "rank" not in PARTITIONED[table]:
            columns["rank"] = pa.repeat(pa.scalar(trace.rank, pa.int32()), rows.num_rows)
        part = pa.table({**columns, **{name: rows[name] for name in rows.column_names}})
        write_atomic(part, part_path(out, table, trace.run_id, trace.rank, tid))


def node_name() -> str:
    """The Ray node this runs on (its IP and id), else the host name."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        context = ray.get_runtime_context()
        return f"{ray.util.get_node_ip_address()}/{context.get_node_id()[:8]}"
    return socket.gethostname()


def run_task(task: TraceTask) -> TaskResult:
    """Parse one trace file and write its parts into the dataset (in a worker or a Ray task)."""
    node = node_name()
    parsed = parse_file(task.path, task.known_sha, task.rules, task.keep_python, task.max_trace_bytes)
    if parsed.error:
        error = parsed.error
        if task.on_cluster and error.startswith("cannot read file"):
            error += f" on node {node}; trace paths must be on a filesystem every node mounts"
        return TaskResult(error=error, node=node)
    if parsed.extracted is None:
        return TaskResult(node=node)
    meta = parsed.extracted.meta
    path = Path(task.path)
    try:
        rank, source = resolve_rank(path, task.run_id, task.ranks, task.nfiles, meta, lambda: task.others)
    except TraceError as exc:
        return TaskResult(error=str(exc), node=node)
    trace = trace_row(path, task.run_id, rank, source, parsed)
    tid = trace_id(trace)
    try:
        write_parts(Path(task.out), trace, tid, parsed.extracted)
    except (OSError, pa.ArrowException) as exc:
        no_room = diskfull.no_room(exc) or getattr(exc, "errno", None) in CANNOT_GROW or "too large" in str(exc)
        return TaskResult(error=f"cannot store on node {node}: {exc}", node=node, no_room=no_room)
    return TaskResult(trace, tid, meta.zero_duration_events, meta.notes, node=node)


def failed_task(reason: str) -> TaskResult:
    """The result of a task that raised, or whose worker or node died for good."""
    return TaskResult(error=reason)


class Dataset:
    """A Parquet dataset directory: created on first use, refused when it is something else."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        meta = self.root / "meta.parquet"
        if self.root.exists() and not self.root.is_dir():
            raise DatasetError(f"{root}: not a directory")
        if (self.root / "traces.parquet").exists():
            raise DatasetError(f"{root}: a `scaletrace export --parquet` directory, not an ingest dataset; "
                               "ingest into a new directory")
        if not meta.exists() and self.root.is_dir() and any(self.root.iterdir()):
            raise DatasetError(f"{root}: exists and is not a scaletrace Parquet dataset (no meta.parquet); "
                               "give a new or empty directory")
        self.root.mkdir(parents=True, exist_ok=True)
        for damaged in [meta] * meta.exists() + sorted((self.root / "ingest_log").glob("*.parquet")):
            if damaged.is_file() and not _whole(damaged):  # what can be written again is; a log is set aside
                damaged.replace(damaged.with_name(damaged.name + ".damaged")) if damaged != meta else damaged.unlink()
        if not meta.exists():
            write_atomic(pa.table({"key": ["schema_version", "layout"],
                                   "value": [schema.SCHEMA_VERSION, "dataset"]}), meta)
        self.log_file = self.root / "ingest_log" / f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.parquet"

    def check_version(self, con, run_dirs) -> None:
        """Refuse a dataset written by a newer scaletrace, or one that holds traces an older one read
        that this ingest (``run_dirs``) does not read again (``dbcheck.check_whole``)."""
        meta = pq.read_table(self.root / "meta.parquet").to_pydict()
        self.version = dict(zip(meta["key"], meta["value"])).get("schema_version")
        dbcheck.refuse_newer(schema.Setup(frozenset(), {"schema_version": self.version or ""}), self.root)
        dbcheck.check_whole(con, self.root, run_dirs, "dataset")

    def mark_version(self, con) -> None:
        """Record this schema version once no trace an older version read is left (its files'
        columns are this version's, or read as NULL where an older one's small tables lack them)."""
        if getattr(self, "version", None) != schema.SCHEMA_VERSION and not dbcheck.stale_traces(con):
            write_atomic(pa.table({"key": ["schema_version", "layout"], "value": [schema.SCHEMA_VERSION, "dataset"]}),
                         self.root / "meta.parquet")

    def lock(self, wait_s: float, on_wait: Callable[[str], None] | None) -> "_Lock":
        return _Lock(self.root / ".ingest.lock", wait_s, on_wait)

    def load_state(self) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB with the schema and the dataset's small tables (not its log)."""
        con = schema.open_duckdb()
        con.execute(schema.SCHEMA_SQL.read_text())
        for table in STATE_TABLES:
            source = self._source(table)
            if source:
                con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM {source}")
        run_ids = [r for (r,) in con.execute("SELECT run_id FROM runs UNION SELECT run_id FROM traces").fetchall()]
        for folder, run_id in hive_run_ids(run_ids).items():  # a long run id's folders name it by a prefix and hash
            for table in STATE_TABLES:
                if table in PARTITIONED:
                    con.execute(f"UPDATE {table} SET run_id = ? WHERE run_id = ?", [run_id, folder])
        return con

    def _source(self, table: str) -> str | None:
        """The table's files that can be read (a damaged one is named on stderr and left out:
        its trace, run or side file is then written again by this ingest)."""
        files = [f for f in export_files(self.root, table, True) if _whole(f, warn=True)]
        if not files:
            return None
        listed = ", ".join(sql_path(f) for f in files)  # glob characters in DIR matched literally
        return f"read_parquet([{listed}], hive_partitioning = {str(table in PARTITIONED).lower()}, union_by_name = true)"

    def drop_damaged(self, con) -> list[str]:
        """Committed traces with a part that is damaged (truncated, 0 bytes, overwritten): their
        record goes from the state, so that the trace is parsed and its parts written again
        (the source file's hash alone said "unchanged" for ever)."""
        dropped = []
        for path, tid, run_id, rank in con.execute("SELECT path, trace_id, run_id, rank FROM traces").fetchall():
            parts = [part_path(self.root, table, run_id, rank, tid) for table in TRACE_TABLES]
            if all(_whole(p) for p in parts if os.path.lexists(p)):
                continue
            store.drop_trace(con, path)
            self.uncommit(path)
            dropped.append(path)
        return dropped

    def commit(self, con, trace: store.TraceRow, tid: int) -> None:
        write_atomic(con.sql("SELECT * FROM traces WHERE trace_id = $1", params=[tid]).to_arrow_table(),
                     self.root / "traces" / f"{_key(trace.path)}.parquet")

    def uncommit(self, path: str) -> None:
        """Delete the commit record of the trace stored from ``path`` (its parts go with the
        garbage at the end of the ingest)."""
        (self.root / "traces" / f"{_key(path)}.parquet").unlink(missing_ok=True)

    def save_run(self, con, run_id: str) -> None:
        rows = con.sql("SELECT * FROM runs WHERE run_id = $1", params=[run_id]).to_arrow_table()
        path = self.root / "runs" / f"{_key(run_id)}.parquet"
        if rows.num_rows:
            write_atomic(rows, path)
        else:
            path.unlink(missing_ok=True)

    def save_side_tables(self, con, run_id: str) -> None:
        """The run's side_files, step_log and power_samples rows, as the state holds them."""
        for table in ("side_files", "step_log", "power_samples"):
            if table in PARTITIONED:  # the run id is in the path
                rows = con.sql(f"SELECT * EXCLUDE (run_id) FROM {table} WHERE run_id = $1", params=[run_id])
                path = self.root / table / f"run_id={_part(run_id)}" / "data.parquet"
            else:
                rows = con.sql(f"SELECT * FROM {table} WHERE run_id = $1", params=[run_id])
                path = self.root / table / f"{_key(run_id)}.parquet"
            rows = rows.to_arrow_table()
            if rows.num_rows:
                write_atomic(rows, path)
            else:
                path.unlink(missing_ok=True)

    def save_log(self, con) -> None:
        write_atomic(con.sql("SELECT * FROM ingest_log").to_arrow_table(), self.log_file)

    def collect_garbage(self, con) -> int:
        """Delete the parts no committed trace owns, and temporary files left by dead writers;
        returns how many files went."""
        committed = {str(t) for (t,) in con.execute("SELECT trace_id FROM traces").fetchall()}
        gone = 0
        for table in TRACE_TABLES:
            for path in (self.root / table).rglob("*.parquet"):
                if path.stem not in committed and path.is_file():  # a folder named x.parquet stays
                    path.unlink(missing_ok=True)
                    gone += 1
        for path in self.root.rglob(".*.tmp"):
            if path.is_file():
                path.unlink(missing_ok=True)
                gone += 1
        return gone


def _whole(path: Path, warn: bool = False) -> bool:
    """``export.whole_parquet``; ``warn``: a damaged file is named on stderr."""
    whole = whole_parquet(path)
    if not whole and warn:
        sys.stderr.write(f"warning: {path}: damaged Parquet file, read without it\n")
    return whole


class _Lock:
    """One ingest at a time per dataset (an advisory lock on DIR/.ingest.lock)."""

    def __init__(self, path: Path, wait_s: float, on_wait):
        self.path, self.wait_s, self.on_wait = path, wait_s, on_wait

    def __enter__(self) -> "_Lock":
        self.file = open(self.path, "a")
        deadline, told = time.monotonic() + self.wait_s, False
        while True:
            try:
                fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except OSError:
                if time.monotonic() >= deadline:
                    self.file.close()
                    waited = f" for more than {self.wait_s:g} s" if self.wait_s > 0 else ""
                    raise DatasetError(f"{self.path.parent}: another ingest is writing it{waited}; try again "
                                       "when it has finished") from None
                if self.on_wait and not told:
                    self.on_wait(f"{self.path.parent}: waiting up to {self.wait_s:g} s for another ingest to finish")
                    told = True
                time.sleep(0.2)

    def __exit__(self, *exc) -> None:
        self.file.close()


Mapper = Callable[[Callable, list[TraceTask], Callable[[str], TaskResult]], Iterator[tuple[TraceTask, TaskResult]]]


def ingest_dataset(
    paths: str | Path | Iterable[str | Path],
    out: str | Path,
    mapper: Mapper,
    *,
    rules: tuple[Rule, ...] = DEFAULT_RULES,
    keep_python: bool = False,
    on_cluster: bool = False,
    on_outcome: Callable[[Outcome], None] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    on_wait: Callable[[str], None] | None = None,
    lock_wait_s: float = schema.LOCK_WAIT_S,
    max_trace_bytes: int | None = None,
    meta: dict | None = None,
) -> IngestReport:
    """Ingest trace files or run directories into the Parquet dataset ``out``; ``mapper`` runs
    ``run_task`` over the tasks (``pipeline/execute/engines.py``: local processes or Ray) and yields
    (task, result) as they finish.  ``meta``: run.json facts for every run, as in the DuckDB
    ingest (``pipeline.execute.ingest.ingest``).  A full disk (or a quota) stops it with one
    ``DiskFull`` line, the traces committed before whole."""
    meta = check_meta(meta)
    paths = path_list(paths)
    check_output(paths, out, "Parquet dataset", owns_dir=True)
    report = IngestReport()
    try:
        _write(Dataset(out), paths, mapper, report, meta, rules=rules, keep_python=keep_python,
               on_cluster=on_cluster, on_outcome=on_outcome, on_progress=on_progress, on_wait=on_wait,
               lock_wait_s=lock_wait_s, max_trace_bytes=max_trace_bytes)
    except Exception as exc:
        if not diskfull.no_room(exc):
            raise
        stopped = exc
    else:
        return report
    # said once the writers are gone and the lock released: the space left as the user finds it
    raise diskfull.stopped(out, report.count("ok")) from stopped


def _write(ds: Dataset, paths: Iterable[str | Path], mapper: Mapper, report: IngestReport, meta: dict | None, *,
           rules: tuple[Rule, ...], keep_python: bool, on_cluster: bool, on_outcome, on_progress, on_wait,
           lock_wait_s: float, max_trace_bytes: int | None) -> None:
    """ingest_dataset's work, its outcomes in ``report``."""
    with ds.lock(lock_wait_s, on_wait):
        con = ds.load_state()
        try:  # an older version's traces outside this ingest: refused before anything is written
            run_dirs, problems = discover(paths)
            ds.check_version(con, run_dirs)
        except BaseException:
            con.close()
            raise
        damaged = ds.drop_damaged(con)
        loaded_runs = _run_ids(con)
        last_log = time.monotonic()

        def record(outcome: Outcome) -> None:
            nonlocal last_log
            report.outcomes.append(outcome)
            if on_outcome:
                on_outcome(outcome)
            if time.monotonic() - last_log > LOG_EVERY_S:
                ds.save_log(con)
                last_log = time.monotonic()

        try:
            for outcome in problems:
                record(outcome)
                log_outcome(con, outcome)
            runs = read_runs(run_dirs, con, record, meta)
            for path in damaged:
                record(Outcome(path, "note", "a Parquet part of its trace was damaged; the trace is parsed again"))
            for outcome in drop_vanished(con, runs, ds.uncommit):
                record(outcome)
                log_outcome(con, outcome)
            by_path = {str(f): run for run in runs for f in run.files}
            known = runsync.known_shas(con, runs, runsync.extract_identity(rules, keep_python))
            tasks = [TraceTask(str(f), run.run_id, run.manifest.ranks, len(run.files),
                               stored_others(con, run.run_id, f), known.get(str(f)), str(ds.root), rules,
                               keep_python, max_trace_bytes, on_cluster)
                     for run in runs for f in run.files]
            saved_runs: set[str] = set()
            pending = set(by_path)  # not yet committed: their stored records may be stale
            deferred: list = []  # clashed only with such records: committed after the others
            done = 0
            retry: dict = {}
            moving: dict[str, int] = {}  # a deferred file -> its new rank
            for task, result in itertools.chain(mapper(run_task, tasks, failed_task), _later(deferred, retry)):
                run = by_path[task.path]
                pending.discard(task.path)
                waiting = frozenset() if retry else pending | {t.path for t, _ in deferred}
                moving.pop(task.path, None)
                with interrupt.held():  # a commit record, its run's row and its line: all or none
                    outcome = _commit(con, ds, run, task, result, waiting, moving, saved_runs)
                    if outcome.status == DEFERRED:
                        deferred.append((task, result))
                        moving[task.path] = result.trace.rank
                        continue
                    done += 1
                    log_outcome(con, outcome)
                    record(outcome)
                if on_progress:
                    on_progress(done, len(tasks))
            for run in runs:
                runsync.refresh(con, run)
                for outcome in stale_dropped(con, [run], ds.uncommit) + ingest_side_files(con, run) + \
                        missing_ranks(con, run):
                    record(outcome)
                    log_outcome(con, outcome)
                ds.save_side_tables(con, run.run_id)
                ds.save_run(con, run.run_id)  # as refreshed (runs this ingest did not see are unchanged)
            _drop_abandoned_runs(con, ds, loaded_runs)
            ds.collect_garbage(con)
            ds.mark_version(con)
        except OSError as exc:  # the driver's own writes: a full disk, a read-only file system
            raise _cannot_write(ds, exc) from None
        finally:
            try:
                ds.save_log(con)
            except OSError:
                pass  # said above; the log of this ingest is what a full disk costs
            con.close()


def _cannot_write(ds: Dataset, exc: OSError) -> DatasetError:
    """The one line of an ingest that cannot write the dataset: the traces
    committed before stay whole, the parts written since are never read (no commit record) and
    go with the next ingest's garbage."""
    where = exc.filename or ds.root
    return DatasetError(f"{where}: cannot write ({exc.strerror or exc}); the ingest stops (the traces committed "
                        "before are intact: re-run when the dataset can be written)")


CANNOT_GROW = (errno.EFBIG, errno.EROFS)  # a part that cannot be written besides a full disk (diskfull.no_room)


def _commit(con, ds: Dataset, run, task: TraceTask, result: TaskResult, pending: set[str] | frozenset,
            moving: dict[str, int], saved_runs: set[str]) -> Outcome:
    """Check the task's trace against the others (a duplicate rank) and write its record, after its
    run's row when this ingest has not written that yet (``saved_runs``): no trace without its run."""
    if result.error:
        if result.no_room:
            raise DatasetError(f"{task.path}: {result.error}; the ingest stops (the traces committed before are "
                               "intact: re-run when the dataset can be written)")
        return Outcome(task.path, "error", result.error, run.run_id, node=result.node)
    if result.trace is None:
        return Outcome(task.path, "unchanged", "unchanged, skipped", run.run_id, node=result.node)
    trace = result.trace
    try:
        check_clash(con, run.run_id, trace.rank, Path(task.path), pending, moving)
    except ClashWithPending:
        return Outcome(task.path, DEFERRED, "", run.run_id)
    except TraceError as exc:
        return Outcome(task.path, "error", str(exc), run.run_id, node=result.node)
    store.replace_trace(con, trace, run.row(), None,
                        trace_id=result.trace_id)
    if run.run_id not in saved_runs:
        ds.save_run(con, run.run_id)
        saved_runs.add(run.run_id)
    ds.commit(con, trace, result.trace_id)
    outcome = stored_outcome(trace, result.zero_duration_events, result.notes)
    outcome.node = result.node
    return outcome


def _later(deferred: list, retry: dict) -> Iterator:
    """The deferred commits, once every task has finished (``retry`` is then set: checked
    against the run as it is now, none deferred again)."""
    retry["now"] = True
    while deferred:
        yield deferred.pop(0)


def _run_ids(con) -> set[str]:
    return {run_id for (run_id,) in con.execute("SELECT run_id FROM runs").fetchall()}


def _drop_abandoned_runs(con, ds: Dataset, loaded: set[str]) -> None:
    """runsync.refresh deleted the rows of a run id that run.json no longer gives (of the ``loaded``
    ones): so go its files."""
    for run_id in loaded - _run_ids(con):
        ds.save_run(con, run_id)  # no row: its file is deleted
        ds.save_side_tables(con, run_id)


def ingest_parquet(paths: str | Path | Iterable[str | Path], out: str | Path, *, engine: str = "local",
                   ray_address: str | None = None, workers: int | None = None, **kwargs) -> IngestReport:
    """Ingest into the Parquet dataset ``out`` with the ``local`` process pool or on ``ray``
    (``ray_address``, else ``RAY_ADDRESS``, else a local cluster for the call); ``kwargs`` as
    :func:`ingest_dataset`.  Every reading command opens ``out`` as ``--db``."""
    from scaletrace.pipeline.execute import engines

    if engine == "ray":
        mapper = engines.ray_engine(ray_address, workers)
    elif engine == "local":
        mapper = engines.local(workers)
    else:
        raise ValueError(f"unknown engine {engine!r}; one of {', '.join(engines.ENGINES)}")
    return ingest_dataset(paths, out, mapper, on_cluster=engine == "ray", **kwargs)
