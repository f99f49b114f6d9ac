"""Ingest trace files into DuckDB: discover, parse in parallel, write them in batches (each file
whole or not at all).

Parsing runs in worker processes (one per core); the main process is the only
DuckDB writer and takes results in path order, so at most ``workers + 1``
parsed files are held at once, or more small ones together no larger than the
largest file (``workers.in_order``): peak memory follows the largest file, not
the sum of files.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

import duckdb

from scaletrace.pipeline.store import dbcheck, runsync, schema, template, write as store
from scaletrace.pipeline.common import diskfull, limits, oneline
from scaletrace.pipeline.common.limits import file_kind
from scaletrace.pipeline.common.paths import Input, Output, refuse_overlap
from scaletrace.pipeline.read import sidefiles
from scaletrace.pipeline.read.classify import DEFAULT_RULES, Classifier, Rule
from scaletrace.pipeline.read.decode import TraceError, unpack
from scaletrace.pipeline.read.version import EXTRACT_VERSION, rank_from_filename
from scaletrace.pipeline.read.manifest import (is_trace_file, MANIFEST_NAME, Manifest, ManifestError, apply_meta, check_meta, read_manifest,
                                               run_row)

if TYPE_CHECKING:
    from scaletrace.pipeline.read.extract import Extracted, TraceMeta

# A timestamp written with a decimal point anywhere in the file: HTA then rounds every
# event to whole µs (its ts column is float), and hta_* queries must do the same.
FRACTIONAL_TS = re.compile(rb'"ts"\s*:\s*-?\d+\.')


@dataclass
class Outcome:
    """What happened to one file: status ``ok``, ``unchanged``, ``error`` or ``note``."""

    path: str
    status: str
    message: str = ""
    run_id: str | None = None
    rank: int | None = None
    warning: str | None = None  # worth a line even though the file ingested
    json_bytes: int = 0  # uncompressed JSON of a stored file (progress: MB/s)
    node: str | None = None  # the Ray node that parsed the file (--engine ray)

    def line(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass
class IngestReport:
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def errors(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "error"]

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)


@dataclass
class RunDir:
    """A run: the directory that holds its traces, and its manifest (empty when it has none)."""

    run_id: str  # run.json's run_id, else the directory's name
    path: Path
    manifest: Manifest
    manifest_raw: str | None  # run.json as written, for runs.manifest
    files: list[Path]
    meta_keys: tuple[str, ...] = ()  # the run.json keys this ingest's --meta filled in (run.json had none)

    def row(self) -> dict:
        """The run's ``runs`` row (``manifest.run_row``)."""
        return run_row(self.run_id, str(self.path), self.manifest, self.manifest_raw, self.meta_keys)


@dataclass
class ParsedFile:
    """What a worker returns for one trace file (pickled back to the writing process)."""

    sha256: str | None  # None: the file could not be read
    file_bytes: int  # size on disk
    json_bytes: int = 0  # uncompressed JSON size; 0 when not decoded
    extracted: Extracted | None = None  # None and no error: unchanged since the last ingest
    error: str | None = None  # one line: why the file cannot be ingested
    stat_key: str | None = None  # runsync.stat_key taken before the read (None: racy, or no stat)
    extract_version: str = EXTRACT_VERSION  # what made the rows, with the options that change them (runsync)


def path_list(paths: str | Path | Iterable[str | Path]) -> list[str | Path]:
    """The paths of an ingest: one str, bytes or Path is one path (iterated, ``"my.run"`` was
    seven one-character paths, and ``"."`` among them the whole current directory)."""
    if isinstance(paths, (str, bytes, os.PathLike)):
        return [paths]
    return list(paths)


def check_output(paths: list[str | Path], out: str | Path, what: str, owns_dir: bool = False) -> None:
    """``paths.OverwriteError`` when the database or dataset ``out`` is one of the trace inputs
    (or, ``owns_dir``: holds one), before anything is opened or written."""
    refuse_overlap(trace_inputs(paths), [Output(out, what, owns_dir=owns_dir)])


def trace_inputs(paths: list[str | Path]) -> list[Input]:
    """An ingest's paths as inputs of ``paths.refuse_overlap``: under a directory, what it reads
    is its traces, run.json and step / power logs (a new file beside them takes nothing)."""
    return [Input(p, "trace input", reads=read_by_ingest) for p in paths]


def read_by_ingest(path: Path) -> bool:
    """A file an ingest of its directory reads: a trace, run.json, a step or power log."""
    return is_trace_file(path) or path.name == MANIFEST_NAME or sidefiles.SIDE_RE.match(path.name) is not None


def discover(paths: str | Path | Iterable[str | Path]) -> tuple[dict[Path, list[Path]], list[Outcome]]:
    """Group trace files by run directory (the directory that holds them)."""
    runs: dict[Path, list[Path]] = {}
    problems: list[Outcome] = []
    for raw in path_list(paths):
        path = Path(raw)
        if path.is_file():
            placed = _in_run(path, problems)
            if placed:
                runs.setdefault(placed[0], []).append(placed[1])
        elif path.is_dir():
            found = 0
            unreadable = _UnreadableDirs(problems)
            walked: set[str] = set()  # real paths of the directories walked: a symlinked one is walked once
            for root, dirs, files in os.walk(path, onerror=unreadable, followlinks=True):
                here = os.path.realpath(root)
                walked.add(here)
                dirs[:] = [d for d in sorted(dirs) if not _walked(os.path.join(root, d), here, walked)]
                resolved = None  # root, resolved once for its files
                for name in sorted(files):
                    candidate = Path(root) / name
                    if not is_trace_file(candidate):
                        continue
                    if not candidate.is_file():  # named like a trace: a FIFO, a socket, a dangling link
                        problems.append(Outcome(_shown(candidate), "error", not_a_trace_file(candidate)))
                        continue
                    resolved = resolved or candidate.absolute().parent.resolve()
                    placed = _in_run(candidate, problems, resolved)
                    if placed:
                        runs.setdefault(placed[0], []).append(placed[1])
                        found += 1
            if not found and not unreadable.seen and not any(o.path.startswith(_shown(path)) for o in problems):
                problems.append(Outcome(_shown(path), "error", "no trace files (*.json, *.json.gz) found"))
        else:  # a dangling link, a loop, a FIFO, a device such as /dev/zero, a socket, nothing
            problems.append(Outcome(_shown(path), "error", not_a_trace_file(path)))
    named = set()  # a file found in a directory and named too: one line
    problems = [o for o in problems if not (o.path in named or named.add(o.path))]
    return {d: sorted(set(f)) for d, f in sorted(runs.items())}, problems


def _walked(directory: str, here: str, walked: set[str]) -> bool:
    """A symlink to a directory whose real path is walked already, or that holds ``here`` (the
    real path of the directory being walked: a link to an ancestor is a loop, a link to / the whole
    file system): not walked again.  A plain subdirectory is walked (no loop without a link)."""
    if not os.path.islink(directory):
        return False
    real = os.path.realpath(directory)
    return real in walked or here == real or here.startswith(real.rstrip(os.sep) + os.sep)


def not_a_trace_file(path: Path) -> str:
    """Why a path named like a trace (or given as one) cannot be read as one, from its stat (never
    opened: a FIFO would block): a dangling symlink, a loop, a FIFO, a device, a socket."""
    link = f" (a symlink to {os.readlink(path)})" if os.path.islink(path) else ""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return f"a broken symlink: its target {os.readlink(path)} does not exist" if link else "no such file or directory"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symlink loop (the link leads back to itself)"
        return f"cannot read it ({exc.strerror or exc})"
    return f"not a regular file or a directory: {file_kind(info.st_mode)}{link}; not ingested"


def _in_run(path: Path, problems: list[Outcome], run_dir: Path | None = None) -> tuple[Path, Path] | None:
    """(run directory, file) of a trace: the directory that holds the entry, even when the entry
    is a symlink to a file stored elsewhere (the run is the directory the user named); ``run_dir``:
    that directory, resolved, when the caller has it.  None when the path is not UTF-8 text, as
    the database stores paths: a name with another byte (legal on Linux: ``b_bad\\xff``) is that
    file's one line in ``problems``, shown escaped, and the other files still ingest."""
    run_dir = run_dir or path.absolute().parent.resolve()
    file = run_dir / path.name
    try:
        str(file).encode("utf-8")
    except UnicodeEncodeError:
        problems.append(Outcome(_shown(path), "error", "its path is not valid UTF-8, which the database stores paths as; "
                                                "rename the file or its directory"))
        return None
    return run_dir, file


def _shown(path) -> str:
    """A path as text, bytes that are not UTF-8 escaped (``\\xff``): what lines and logs hold."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


class _UnreadableDirs:
    """os.walk's onerror: a directory that cannot be listed is one error line, not a silent skip."""

    def __init__(self, problems: list[Outcome]):
        self.problems, self.seen = problems, False

    def __call__(self, exc: OSError) -> None:
        self.seen = True
        self.problems.append(Outcome(_shown(exc.filename or "?"), "error",
                                     f"cannot read directory ({exc.strerror or exc}); its traces are not ingested"))


def parse_file(path: str, known_sha: str | None, rules: tuple[Rule, ...], keep_python: bool,
               max_trace_bytes: int | None = None) -> ParsedFile:
    """Worker: read, decode and extract one file (nothing when its sha256 is ``known_sha``).

    The file's bytes are released as soon as they are decoded (``extract`` drops the
    raw event slices after reading them), so they never coexist with the output tables.
    ``max_trace_bytes``: the file and its decompressed JSON may be no larger (default:
    ``limits.default_max_trace_bytes()``)."""
    limit = max_trace_bytes or limits.default_max_trace_bytes()
    key = runsync.current_stat_key(path)  # before the read: a later write changes the file's stat
    try:
        from scaletrace.pipeline.read.extract import scan_padding

        pad = scan_padding()  # room the compiled scanner reads past the JSON (0: the reference reads)
        raw = limits.read_regular(path, limit, TRACE_LIMIT, pad=pad)
    except OSError as exc:
        return ParsedFile(None, 0, error=f"cannot read file ({exc.strerror or exc})")
    except (limits.LimitError, MemoryError) as exc:
        return ParsedFile(None, 0, error=f"cannot read file ({str(exc) or type(exc).__name__})")
    nbytes = len(raw)
    if known_sha is not None:  # stored before: most likely unchanged, so hash before parsing
        sha = hashlib.sha256(raw).hexdigest()
        if sha == known_sha:
            return ParsedFile(sha, nbytes, stat_key=key)
        hashing = None
    elif nbytes < HASH_BESIDE_BYTES:  # a small new file: a thread would cost more than the hash
        sha, hashing = hashlib.sha256(raw).hexdigest(), None
    else:  # a new file: hash beside the gunzip and the scan (both release the GIL, as hashlib does)
        hashing = _Hash(raw)
    held = [raw]  # _parse drops the file's bytes once gunzipped
    del raw
    try:
        result = _parse(held, limit, pad, rules, keep_python)
    finally:
        if hashing is not None:
            sha = hashing.result()
    result.sha256, result.file_bytes, result.stat_key = sha, nbytes, key
    result.extract_version = runsync.extract_identity(rules, keep_python)
    return result


HASH_BESIDE_BYTES = 1 << 20  # a file this large is hashed in a thread beside its parse (0.15 ms to start one)


class _Hash(threading.Thread):
    """sha256 of a file's bytes in a thread of its own, beside the parse of the same bytes."""

    def __init__(self, data):
        super().__init__(daemon=True)
        self._data, self._sha = data, None
        self.start()

    def run(self) -> None:
        try:
            self._sha = hashlib.sha256(self._data).hexdigest()
        finally:
            self._data = None

    def result(self) -> str:
        self.join()
        return self._sha


def _parse(held: list, limit: int, pad: int, rules: tuple[Rule, ...], keep_python: bool) -> ParsedFile:
    """parse_file's gunzip, scan and extract of the file's bytes ``held[0]`` (its sha256 and size
    are set by the caller)."""
    import pyarrow as pa

    from scaletrace.pipeline.execute.workers import fit_heap
    from scaletrace.pipeline.read.extract import scan_or_decode

    try:
        data = unpack(held[0], limit, TRACE_LIMIT, check_utf8=False, pad=pad)  # scan_or_decode checks
        held.clear()
        json_bytes = len(data)
        fit_heap(json_bytes)
        classifier = _classifier(rules)
        # the compiled scanner's columns (read in place from the padded buffer), or msgspec's decode (the reference)
        doc = scan_or_decode(data, utf8_checked=False, buffer=data.obj if pad else None,
                             device_categories=classifier.device_categories)
        fractional, gpu_trace = prescans(doc, data, classifier)
        del data
        return ParsedFile(None, 0, json_bytes, extract(doc, classifier, keep_python, fractional, gpu_trace))
    except TraceError as exc:
        return ParsedFile(None, 0, error=str(exc))
    except (OverflowError, pa.ArrowException) as exc:  # a value our checks missed: still one line
        return ParsedFile(None, 0, error=f"a value does not fit its column ({str(exc).splitlines()[0]})")
    except (MemoryError, RecursionError) as exc:
        return ParsedFile(None, 0, error=f"too large or deeply nested to parse ({type(exc).__name__})")
    except Exception as exc:  # the backstop: one file's line with the exception's type, never the ingest's
        return ParsedFile(None, 0, error=f"could not be parsed ({oneline.describe(exc)})")


TRACE_LIMIT = "the trace size limit (--max-trace-size)"


def prescans(doc, data, classifier: Classifier) -> tuple[bool, bool]:
    """Whether some timestamp is written with a decimal point (HTA then rounds to µs), and whether
    some event has a device category (a GPU trace): two searches of the raw JSON, or the compiled
    scanner's answers to the same two questions, taken as it read every key (``Scanned.prescans``;
    tests/test_extractor_diff.py checks they are the searches')."""
    found = getattr(doc, "prescans", None)
    if found is not None:
        return found
    return FRACTIONAL_TS.search(data) is not None, classifier.device_scan.search(data) is not None


def extract(doc, classifier: Classifier, keep_python: bool, fractional: bool, gpu_trace: bool) -> "Extracted":
    """``pipeline.read.extract.extract``: the parser (numpy, pyarrow, the scanner) is imported by
    the first parse, so an ingest with nothing to parse never loads it (load_parser)."""
    from scaletrace.pipeline.read import extract as parser

    return parser.extract(doc, classifier, keep_python, fractional, gpu_trace)


def load_parser() -> None:
    """Import the parser in this process before the parse workers are forked: they share its
    modules instead of each importing them (~0.15 s a process), and the family rules compiled.
    numpy.ma too: ``np.unique`` imports it on its first call (33 ms in each worker)."""
    import numpy.ma  # noqa: F401

    import numpy as np

    import scaletrace.pipeline.read.extract  # noqa: F401
    from scaletrace.pipeline.read import arrays, families

    families.compiled(families.OP_FAMILIES), families.compiled(families.NAME_FAMILIES)
    # Arrow's first dictionary decode and first compressed IPC stream set up its kernels and codec
    # (~12 MB resident): once here, not inside each worker's first parse, whose memory cap it counts in
    arrays.Packed(arrays.pa.table({"name": arrays.decoded(np.zeros(1, np.int32), ["x"])})).unpack()


def _failed_parse(reason: str) -> ParsedFile:
    """parse_file's result for a file whose parse raised or whose process died (pipeline/execute/workers.py)."""
    return ParsedFile(None, 0, error=reason)


_CLASSIFIERS: dict = {}


def _classifier(rules: tuple[Rule, ...]) -> Classifier:
    if rules not in _CLASSIFIERS:
        _CLASSIFIERS[rules] = Classifier(rules)
    return _CLASSIFIERS[rules]


def ingest(
    paths: str | Path | Iterable[str | Path],
    db: str | Path = "scaletrace.duckdb",
    *,
    rules: tuple[Rule, ...] = DEFAULT_RULES,
    keep_python: bool = False,
    workers: int | None = None,
    on_outcome: Callable[[Outcome], None] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    on_wait: Callable[[str], None] | None = None,
    lock_wait_s: float = schema.LOCK_WAIT_S,
    max_trace_bytes: int | None = None,
    meta: dict | None = None,
) -> IngestReport:
    """Ingest trace files or run directories into the DuckDB file ``db``.

    ``max_trace_bytes``: a trace file, and its JSON once decompressed, may be no larger; a
    larger one is that file's error (default ``limits.default_max_trace_bytes()``, a sixteenth
    of the machine's memory).  ``meta``: run.json facts for every run of this ingest, by key
    (``{"workload": "llama", "parallel.tp": 8}``, as ``scaletrace ingest --meta``), used where a
    run's run.json has no value; ``manifest.MetaError`` for a key that is not run.json's or a
    value of the wrong type (before anything is read or written).  ``paths``: a path (str or Path)
    or several; ``paths.OverwriteError`` when ``db`` is one of them."""
    meta = check_meta(meta)
    paths = path_list(paths)
    check_output(paths, db, "database")
    report = IngestReport()

    def record(outcome: Outcome) -> None:
        report.outcomes.append(outcome)
        if on_outcome:
            on_outcome(outcome)

    run_dirs, problems = discover(paths)
    con, fresh = _open(db, lock_wait_s, on_wait, run_dirs)
    stopped = None  # the error of a full disk, said once the database is closed
    try:
        runs, tasks = _plan(con, run_dirs, problems, record, meta, runsync.extract_identity(rules, keep_python))
        if tasks:
            con.close()  # workers are forked with no DuckDB instance (and its threads) alive
            con = None
            con = _parse_and_write(db, tasks, record, on_progress, lock_wait_s, on_wait, rules=rules,
                                   keep_python=keep_python, workers=workers, max_trace_bytes=max_trace_bytes,
                                   fresh=fresh)
        elif not fresh:
            dbcheck.set_up_definitions(con, db)
        finished = finish_runs(con, runs)
        for outcome in finished:
            record(outcome)
        log_outcomes(con, finished)
    except Exception as exc:
        if not diskfull.no_room(exc):
            raise
        stopped = exc
    finally:
        if con is not None:
            con.close()
    if stopped is not None:  # the space left as the user finds it: measured after the close
        raise diskfull.stopped(db, report.count("ok")) from stopped
    return report


def _open(db, lock_wait_s: float, on_wait, run_dirs=()) -> tuple[duckdb.DuckDBPyConnection, bool]:
    """A connection to ``db`` once it is known to be new, empty or scaletrace's (dbcheck), and whether
    it is a copy of the template (its stored definitions are this version's; else they are written
    later).  A new file that a full disk stopped half set up (0 bytes, or torn) is removed: DuckDB
    would refuse it, and with it every later ingest once space is freed."""
    new = str(db) != ":memory:" and not os.path.lexists(db) and not os.path.lexists(f"{db}.wal")
    try:
        fresh = template.place(db)  # a new file: a copy of this version's set-up (~0.3 s of DDL saved)
        return dbcheck.open_for_write(db, lock_wait_s, on_wait, reading=run_dirs), fresh
    except Exception as exc:
        if not diskfull.no_room(exc):
            raise
        if not new:  # an existing file (empty, or an older version's) whose tables did not fit: left as it was
            raise diskfull.stopped(db, 0) from exc
        # created by this ingest (nothing was there when it began), and its connection is closed
        for leftover in (Path(f"{db}.wal"), Path(db)):
            leftover.unlink(missing_ok=True)
        raise diskfull.disk_full(db, "the new database was not created") from exc


def _plan(con, run_dirs: dict[Path, list[Path]], problems: list[Outcome], record, meta: dict | None,
          identity: str = EXTRACT_VERSION):
    """The runs, and the files to parse as (path, run, stored sha256): a stored file whose stat is
    what it was when read is unchanged without being read (pipeline/store/runsync.py)."""
    for outcome in problems:
        record(outcome)
    log_outcomes(con, problems)
    runs = read_runs(run_dirs, con, record, meta)
    gone = drop_vanished(con, runs)
    for outcome in gone:
        record(outcome)
    log_outcomes(con, gone)
    known = runsync.known_files(con, runs, identity)  # re-keyed by an edited run.json, or other options: parsed again
    tasks, same = [], []
    for run in runs:
        for f in run.files:
            sha, key = known.get(str(f), (None, None))
            if key is not None and runsync.current_stat_key(f) == key:
                same.append(unchanged(f, run))
            else:
                tasks.append((f, run, sha))
    log_outcomes(con, same)
    for outcome in same:
        record(outcome)
    return runs, tasks


def _parse_and_write(db, tasks: list, record, on_progress, lock_wait_s: float, on_wait, *, rules, keep_python,
                     workers, max_trace_bytes, fresh: bool):
    """Parse ``tasks`` in the worker pool and write them in batches; returns the open connection.
    ``fresh``: ``db`` is a copy of the template, whose stored definitions are this version's."""
    from scaletrace.pipeline.execute.workers import in_order, pool_size  # the pool: only to parse

    load_parser()
    pending = {str(f) for f, _, _ in tasks}  # not yet written: their stored rows may be stale
    deferred: list = []  # files whose rank clashed only with such rows: written after the others
    moving: dict[str, int] = {}  # a deferred file -> its new rank
    ordered = in_order(parse_file, [(str(f), sha, rules, keep_python) for f, _, sha in tasks],
                       pool_size(workers, len(tasks)), _failed_parse, sizes=[_size(f) for f, _, _ in tasks],
                       max_trace_bytes=max_trace_bytes)
    parsed = zip(((f, run) for f, run, _ in tasks), ordered)
    con = None
    try:
        ordered.start()  # the workers are forked before DuckDB opens (fork: no __main__ re-import)
        con = dbcheck.open_for_write(db, lock_wait_s, on_wait, setup=False)  # checked above
        if not fresh:
            dbcheck.set_up_definitions(con, db)  # while the workers parse (~0.25 s for a new file)
        # one DuckDB thread: the parse workers have the cores, and a file's small inserts gain nothing
        # from more (measured: 60 files' writes 1.6-1.9 s of CPU with the default, 1.4-1.5 s with one)
        con.execute("SET threads = 1")
        con.execute(f"SET memory_limit = '{WRITER_MEMORY_LIMIT}'")
    except BaseException:
        ordered.close()
        if con is not None:
            con.close()
        raise
    done = 0

    def stored(outcome: Outcome) -> None:  # a file's outcome, once its batch is committed
        nonlocal done
        done += 1
        record(outcome)
        if on_progress:
            on_progress(done, len(tasks))

    def defer(item, outcome: Outcome) -> None:
        deferred.append(item)
        moving[str(item[0][0])] = int(outcome.message)

    batch = Batch(con, stored, defer, Stored(con, sorted({run.run_id for _, run, _ in tasks}), sorted(pending)))
    written = False
    try:
        for item in parsed:
            (path, _run), _result = item
            pending.discard(str(path))
            batch.add(item, pending | {str(p) for (p, _), _ in deferred})
            if batch.full() or not ordered.ready(batch.time_left()):  # the writer would wait: commit
                batch.commit()
        batch.commit()
        for item in deferred:  # every other file is written: the run as it is now
            batch.add(item, frozenset(), dict(moving))  # a copy: a failed batch is written again as it was
            moving.pop(str(item[0][0]))
        batch.commit()
        written = True
        return con
    finally:
        ordered.close()  # interrupted: the workers stop now, not after their files
        batch.abandon()
        if not written:
            con.close()


# DuckDB's buffers in the writing process (its own default: 80 % of the machine, kept until the process
# ends).  An insert beyond it goes to the database file as it is made (DuckDB's optimistic writes) rather
# than staying in memory until the COMMIT: measured on an 80 MB CPU-only trace (888,888 rows in each of
# three tables), the writer's peak 534 MB by default, 388 MB with this (docs: Robustness, "Memory").
WRITER_MEMORY_LIMIT = "128MiB"


def _size(path: Path) -> int:
    """The file's bytes on disk (0 when it cannot be stat'ed: its parse says why)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


# A batch: the files written in one transaction.  Its Arrow tables are held until it commits (a
# failed batch is written again file by file), so it is bounded: at most BATCH_FILES files and
# BATCH_BYTES of tables (a larger file is a batch of its own), and committed as soon as the
# next parse is not done within BATCH_MIN_S of the batch's start: the writer never waits long
# holding an open transaction, and a file's line comes at most that much later.
# The first batch is BATCH_FIRST files, each next one twice the last, up to BATCH_FILES: the first
# lines come at once, and a kill early in an ingest costs little.
BATCH_FIRST = 1
BATCH_FILES = 32
BATCH_BYTES = 64 << 20
BATCH_MIN_S = 1.0


class Batch:
    """Several files in one transaction, each whole or not at all: a file's ``traces`` row and
    all its rows are in the same transaction as its ``ingest_log`` row, so a killed ingest leaves
    every file of the open batch unwritten (a rerun writes them).  Outcomes reach ``on_stored``
    (the caller's lines and progress) only once their batch is committed.  A batch whose write or
    commit fails is rolled back and its files are written again one transaction each, as a lone
    file is: one bad file costs its own line, never the other files of its batch."""

    def __init__(self, con, on_stored: Callable[[Outcome], None], on_deferred: Callable, stored: Stored):
        self.con, self.on_stored, self.on_deferred = con, on_stored, on_deferred
        self.stored = stored  # the committed rows each file is checked against
        self.written_runs: set[str] = set()  # runs rows committed by this ingest (8 ms an upsert)
        self.most = BATCH_FIRST  # files in this batch at most
        self._reset()

    def _reset(self) -> None:
        self.items: list = []  # (item, pending, moving, outcome)
        self.parts: list = []  # (TraceRow, Extracted) staged: their traces rows and tables still to write
        self.replaced: list[int] = []  # the stored trace_ids of the staged files' older versions
        self.new_runs: list[dict] = []  # runs rows staged
        self.staged: dict[str, tuple[str, int]] = {}  # path -> (run id, rank) of the open transaction's rows
        self.trace_ids: list[int] = []  # the traces rows written in the open transaction, in staging order
        self.runs: set[str] = set()  # runs rows written (or staged) in the open transaction
        self.nbytes = 0
        self.opened: float | None = None

    def full(self) -> bool:
        return len(self.items) >= self.most or self.nbytes >= BATCH_BYTES

    def add(self, item, pending, moving: dict[str, int] | None = None) -> None:
        """Write one parsed file into the open transaction (one is begun if none is)."""
        (path, run), result = item
        if self.opened is None:
            self.con.execute("BEGIN")
            self.opened = time.monotonic()
        try:
            outcome = self._stage(path, run, result, pending, moving)
            if outcome.status == DEFERRED:
                self.on_deferred(item, outcome)
                return
        except schema.DatabaseError:
            raise
        except Exception:  # noqa: BLE001  the transaction is lost: its files one by one, this one too
            self._one_by_one([*self.items, (item, pending, moving, None)])
            return
        self.items.append((item, pending, moving, outcome))

    def _stage(self, path: Path, run: RunDir, parsed: ParsedFile, pending, moving) -> Outcome:
        """Check one file against what is stored and staged, and stage its rows: they are written
        with the batch's others (:meth:`_flush`), a few statements for the whole batch."""
        placed = _place(self.con, path, run, parsed, pending, moving, _InBatch(self.stored, self.staged))
        if isinstance(placed, Outcome):
            return placed
        trace, extracted, old = placed
        if run.run_id not in self.written_runs and run.run_id not in self.runs:
            self.new_runs.append(run.row())
        self.runs.add(run.run_id)
        self.replaced += [old] if old is not None else []
        self.staged[trace.path] = (trace.run_id, trace.rank)
        self.parts.append((trace, extracted))
        # the buffers' sizes, as the batch's write unpacks them (Table.nbytes walks each column: 0.2 ms a file, 20x this)
        self.nbytes += extracted.nbytes()
        if self.full():
            self._flush()
        return stored_outcome(trace, extracted.meta.zero_duration_events, extracted.meta.notes)

    def _flush(self) -> None:
        """Write the staged rows: the older versions' rows dropped, the runs and traces rows, then
        every per-trace table, one INSERT each."""
        traces = [trace for trace, _ in self.parts]
        trace_ids = store.put_traces(self.con, traces, self.new_runs, self.replaced)
        self.trace_ids += trace_ids
        store.append_rows(self.con, [(trace_id, trace, ex) for trace_id, (trace, ex) in zip(trace_ids, self.parts)])
        self.parts, self.replaced, self.new_runs = [], [], []

    def commit(self) -> None:
        """Commit the open transaction, then hand its outcomes on; a failure (a value a column
        cannot take, a full disk) rolls it back and writes its files one by one."""
        if self.opened is None:
            return
        items = self.items
        try:
            if self.parts or self.new_runs:
                self._flush()
            log_outcomes(self.con, [outcome for *_, outcome in items])  # one statement for the batch
            self.con.execute("COMMIT")
        except Exception:  # noqa: BLE001
            if not self._committed():
                self._one_by_one(items)
                return
        self.written_runs |= self.runs
        # every staged row was written, in staging order: trace_ids follow the same order
        for (path, (run_id, rank)), trace_id in zip(self.staged.items(), self.trace_ids):
            self.stored.put(path, run_id, rank, trace_id)
        self.most = min(BATCH_FILES, 2 * self.most)
        self._reset()
        interrupted = None
        for _, _, _, outcome in items:  # every committed file is handed on, even after a Ctrl-C (the
            try:                        # caller's count of stored files stays exact), then it stops
                self.on_stored(outcome)
            except KeyboardInterrupt as exc:
                interrupted = exc
        if interrupted is not None:
            raise interrupted

    def _committed(self) -> bool:
        """After a failure: whether the transaction was committed all the same (DuckDB says "Query
        interrupted" of a COMMIT that Ctrl-C hit once it was made).  An open transaction is rolled
        back first, so only committed rows are seen."""
        try:
            self.con.execute("ROLLBACK")
        except duckdb.Error:  # none open: the COMMIT ran, or DuckDB rolled it back
            pass
        try:
            (found,), = self.con.execute("SELECT count(*) FROM traces WHERE list_contains(?, trace_id)",
                                         [self.trace_ids]).fetchall()
        except duckdb.Error:
            return False
        return bool(self.trace_ids) and found == len(self.trace_ids)

    def time_left(self) -> float:
        """Seconds the open batch may still wait for the next file (BATCH_MIN_S from its start)."""
        return 0.0 if self.opened is None else max(0.0, BATCH_MIN_S - (time.monotonic() - self.opened))

    def _one_by_one(self, items) -> None:
        self.abandon()
        for item, pending, moving, _ in items:
            (path, run), result = item
            outcome = _write_safely(self.con, path, run, result, self.written_runs, pending, moving)
            if outcome.status == DEFERRED:
                self.on_deferred(item, outcome)
                continue
            if outcome.status == "ok":  # committed on its own
                self.stored.put(outcome.path, outcome.run_id, outcome.rank, None)
            log_outcome(self.con, outcome)
            self.on_stored(outcome)

    def abandon(self) -> None:
        """Roll the open transaction back (an interrupted ingest: its files are not written)."""
        if self.opened is not None:
            self._reset()
            try:
                self.con.execute("ROLLBACK")
            except duckdb.Error:  # already rolled back by DuckDB (a failed COMMIT), or invalidated
                pass


def missing_ranks(con, run: RunDir) -> list[Outcome]:
    """A note when the run's world size says there are ranks without a trace."""
    return runs_missing_ranks(con, [run]).get(run.run_id, [])


def runs_missing_ranks(con, runs: list[RunDir]) -> dict[str, list[Outcome]]:
    """run id -> ``missing_ranks``'s note, for every run of ``runs`` (one query)."""
    stored = {run_id: (ranks, world) for run_id, ranks, world in con.execute(
        "SELECT run_id, list(DISTINCT rank ORDER BY rank), max(world_size) FROM traces "
        "WHERE list_contains(?, run_id) GROUP BY run_id", [[run.run_id for run in runs]]).fetchall()}
    notes = {}
    for run in runs:
        ranks, trace_world = stored.get(run.run_id, ([], None))
        world = run.manifest.world_size or trace_world
        if not ranks or not world or len(ranks) >= world:
            continue
        count, first = limits.missing_ranks(ranks, world, 8)  # never range(world): a file may claim 2e9
        shown = ", ".join(map(str, first)) + (", ..." if count > 8 else "")
        notes[run.run_id] = [Outcome(str(run.path), "note", f"run '{run.run_id}': {count} of {world} ranks have no "
                                     f"trace (ranks {shown}); cross-rank figures cover the {len(ranks)} present",
                                     run.run_id)]
    return notes


def ingest_side_files(con, run: RunDir) -> list[Outcome]:
    """The collector's step and power logs of one run (pipeline/read/sidefiles.py)."""
    return _side_files(con, run, _stored_side_files(con, [run]).get(run.run_id, {}))


def _stored_side_files(con, runs: list[RunDir]) -> dict[str, dict[str, str]]:
    """run id -> {path: sha256} of the side files stored for ``runs`` (one query)."""
    known: dict[str, dict[str, str]] = {}
    for run_id, path, sha in con.execute("SELECT run_id, path, sha256 FROM side_files WHERE list_contains(?, run_id)",
                                         [[run.run_id for run in runs]]).fetchall():
        known.setdefault(run_id, {})[path] = sha
    return known


def _side_files(con, run: RunDir, known: dict[str, str]) -> list[Outcome]:
    """Ingest the run's step and power logs; ``known``: the sha256 of those stored, by path."""
    outcomes = []
    for path, rank, kind in sidefiles.side_files(run.path):
        try:
            sha, records = sidefiles.read(path, kind, known.get(str(path)))
            if records is None:
                outcomes.append(Outcome(str(path), "unchanged", "unchanged, skipped", run.run_id, rank))
                continue
            sidefiles.write(con, path, run.run_id, rank, kind, sha, records)
        except (OSError, ValueError, duckdb.Error) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else oneline.message(exc)
            outcomes.append(Outcome(str(path), "error", f"{kind} log not ingested: {reason}", run.run_id, rank))
            continue
        outcomes.append(Outcome(str(path), "ok", f"{len(records)} {kind} records for run '{run.run_id}' "
                                f"rank {rank}", run.run_id, rank))
    return outcomes


def finish_runs(con, runs: list[RunDir]) -> list[Outcome]:
    """After the traces are written: each run's ``runs`` row follows run.json (edited alone), its
    side files are ingested, and a note says which ranks it lacks; a few queries for all the runs."""
    runsync.refresh_runs(con, runs)
    known = _stored_side_files(con, runs)
    missing = runs_missing_ranks(con, runs)
    outcomes = stale_dropped(con, runs)
    for run in runs:
        outcomes += _side_files(con, run, known.get(run.run_id, {})) + missing.get(run.run_id, [])
    return outcomes


def read_runs(run_dirs: dict[Path, list[Path]], con, record, meta: dict | None = None) -> list[RunDir]:
    """The runs of the discovered files, with their manifests and the checked ``--meta`` facts
    (``manifest.check_meta``) filled in where run.json has none; an unusable run.json skips its run."""
    runs = []
    for run_dir, files in run_dirs.items():
        try:
            manifest, raw, warnings = read_manifest(run_dir)
        except ManifestError as exc:
            _skip_run(con, record, run_dir, files, exc)
            continue
        for warning in warnings:
            outcome = Outcome(str(run_dir / MANIFEST_NAME), "note", warning.split(": ", 1)[1])
            record(outcome)
            log_outcome(con, outcome)
        manifest, raw, meta_keys = apply_meta(manifest, raw, meta)
        runs.append(RunDir(manifest.run_id or run_dir.name, run_dir, manifest, raw, files, meta_keys))
    return _one_directory_per_run(con, record, runs)


def _one_directory_per_run(con, record, runs: list[RunDir]) -> list[RunDir]:
    """A run is one directory: a run whose run id is already held by another directory (traces
    stored from it whose files are still there, or an earlier directory of this ingest) is
    refused whole, one line naming both directories; it changes nothing stored (its run.json
    and step logs would have replaced the other run's row).  A directory that was moved (its
    stored traces' files are gone) is no claim: the run moves with it."""
    stored: dict[str, list[Path]] = {}  # run id -> the directories its stored traces are in (files still there)
    for run_id, path in con.execute("SELECT run_id, path FROM traces WHERE list_contains(?, run_id) ORDER BY path",
                                    [sorted({run.run_id for run in runs})]).fetchall():
        folder = Path(os.path.dirname(path))
        if folder not in stored.setdefault(run_id, []) and os.path.lexists(path):
            stored[run_id].append(folder)
    kept, taken = [], {}
    for run in runs:
        other = taken.get(run.run_id) or next((d for d in stored.get(run.run_id, ()) if d != run.path), None)
        if other is None:
            taken[run.run_id] = run.path
            kept.append(run)
        else:
            _refuse_run(con, record, run, other)
    return kept


def _refuse_run(con, record, run: RunDir, other: Path) -> None:
    """One line for a run whose run id another directory holds; its traces are logged as skipped."""
    count = f"{len(run.files)} trace{'s' * (len(run.files) != 1)}"
    source = f"its {MANIFEST_NAME}" if run.manifest.run_id else "its directory name"
    reason = (f"run '{run.run_id}' ({source}) is already the run of {other}; the run's {count} skipped and nothing "
              f"stored changed: give one of the two directories another run_id in its {MANIFEST_NAME}")
    outcome = Outcome(str(run.path), "error", oneline.one_line(reason), run.run_id)
    record(outcome)
    log_outcome(con, outcome)
    log_outcomes(con, [Outcome(str(f), "error", f"skipped: run '{run.run_id}' is already the run of {other}")
                       for f in run.files])


def _skip_run(con, record, run_dir: Path, files: list[Path], exc: ManifestError) -> None:
    """An unusable run.json: one line for the run; its traces are skipped (and logged as such),
    since the run id, world size and rank map it would give are unknown."""
    reason = str(exc).split(": ", 1)[-1]
    count = f"{len(files)} trace{'s' * (len(files) != 1)}"
    outcome = Outcome(str(run_dir / MANIFEST_NAME), "error", f"{reason}; the run's {count} skipped")
    record(outcome)
    log_outcome(con, outcome)
    for f in files:
        log_outcome(con, Outcome(str(f), "error", f"skipped: {run_dir / MANIFEST_NAME} is unusable: {reason}"))


def resolve_rank(path: Path, run_id: str, ranks: dict | None, nfiles: int, meta: TraceMeta,
                  others: Callable[[], int]) -> tuple[int, str]:
    """The trace's rank and where it came from; ``ranks`` is run.json's map, ``nfiles`` the run's
    trace files in this ingest, ``others()`` the traces already stored for the run under other paths."""
    if meta.rank is not None:
        return meta.rank, "distributed_info"
    if ranks and path.name in ranks:
        return ranks[path.name], "manifest"
    rank = rank_from_filename(path)
    if rank is not None:
        return rank, "file_name"
    stored = others()
    if nfiles == 1 and stored == 0:
        return 0, "single_trace"
    raise TraceError(
        f"no rank in distributedInfo, run.json or the file name, and run '{run_id}' has "
        f"{max(nfiles, stored + 1)} traces: name the files rank<N>.json(.gz) or add "
        f'"ranks": {{"{path.name}": N}} to {MANIFEST_NAME}'
    )


def stored_others(con, run_id: str, path: Path) -> int:
    """Traces stored for ``run_id`` under another path than ``path``."""
    return con.execute("SELECT count(*) FROM traces WHERE run_id = ? AND path <> ?",
                       [run_id, str(path)]).fetchall()[0][0]


class ClashWithPending(TraceError):
    """The rank is stored for another file of the run that this ingest has yet to write: its
    rows may be those of a replaced version (ranks swapped between files in place), so the
    check is made again once that file is written."""


DEFERRED = "deferred"  # an Outcome status that never reaches the log: the file is written later


def check_clash(con, run_id: str, rank: int, path: Path, pending: set[str] | frozenset = frozenset(),
                moving: dict[str, int] | None = None) -> None:
    """TraceError when another file of the run is stored with the same rank; ClashWithPending
    when each such file is one of ``pending`` (this ingest has yet to write them).  ``moving``:
    deferred files and the rank each now has; a row of one moving to another rank is no clash."""
    refuse_clash(_Queried(con).holders(run_id, rank, str(path)), run_id, rank, pending, moving)


def refuse_clash(holders, run_id: str, rank: int, pending, moving: dict[str, int] | None) -> None:
    """check_clash's decision, given the other files that hold ``rank`` in the run."""
    clash = [p for p in sorted(holders) if not (moving and p in moving and moving[p] != rank)]
    if clash and all(p in pending for p in clash):
        raise ClashWithPending(clash[0])
    if clash:
        raise TraceError(f"duplicate rank {rank} in run '{run_id}': also in {clash[0]}")


class _Queried:
    """What a file is checked against, read from the database (a file written alone)."""

    def __init__(self, con):
        self.con = con

    def holders(self, run_id: str, rank: int, path: str) -> list[str]:
        return [p for (p,) in self.con.execute("SELECT path FROM traces WHERE run_id = ? AND rank = ? AND path <> ?",
                                               [run_id, rank, path]).fetchall()]

    def others(self, run_id: str, path: str) -> int:
        return stored_others(self.con, run_id, Path(path))

    def old(self, path: str) -> int | None:  # replace_trace finds it itself
        return None


class Stored:
    """The committed traces rows of this ingest's runs and files (path -> run id, rank, trace_id),
    indexed by run and by rank: read once, kept as batches commit, so that checking a file costs
    no query (a query a file was ~2 ms: 2 s for a run of 1,024 ranks)."""

    def __init__(self, con, run_ids: list[str], paths: list[str]):
        self.at: dict[str, tuple[str, int, int | None]] = {}
        self.by_run: dict[str, set[str]] = {}
        self.by_rank: dict[tuple[str, int], set[str]] = {}
        for path, run_id, rank, trace_id in con.execute(
                "SELECT path, run_id, rank, trace_id FROM traces WHERE list_contains(?, run_id) "
                "OR list_contains(?, path)", [run_ids, paths]).fetchall():
            self.put(path, run_id, rank, trace_id)

    def put(self, path: str, run_id: str, rank: int, trace_id: int | None) -> None:
        """``path``'s row is now this one (committed)."""
        if path in self.at:
            was_run, was_rank, _ = self.at[path]
            self.by_run[was_run].discard(path)
            self.by_rank[(was_run, was_rank)].discard(path)
        self.at[path] = (run_id, rank, trace_id)
        self.by_run.setdefault(run_id, set()).add(path)
        self.by_rank.setdefault((run_id, rank), set()).add(path)


class _InBatch:
    """What a file of a batch is checked against: the committed rows (:class:`Stored`) with the
    open transaction's rows (``staged``: path -> run id, rank) in place of their older versions."""

    def __init__(self, stored: Stored, staged: dict[str, tuple[str, int]]):
        self.stored, self.staged = stored, staged

    def holders(self, run_id: str, rank: int, path: str) -> list[str]:
        found = {p for p in self.stored.by_rank.get((run_id, rank), ()) if p not in self.staged}
        found |= {p for p, where in self.staged.items() if where == (run_id, rank)}
        return sorted(found - {path})

    def others(self, run_id: str, path: str) -> int:
        found = {p for p in self.stored.by_run.get(run_id, ()) if p not in self.staged}
        found |= {p for p, (r, _) in self.staged.items() if r == run_id}
        return len(found - {path})

    def old(self, path: str) -> int | None:
        return self.stored.at.get(path, (None, None, None))[2]


def trace_row(path: Path, run_id: str, rank: int, rank_source: str, parsed: ParsedFile) -> store.TraceRow:
    meta = parsed.extracted.meta
    return store.TraceRow(
        path=str(path), run_id=run_id, rank=rank, rank_source=rank_source, sha256=parsed.sha256,
        bytes=parsed.file_bytes, json_bytes=parsed.json_bytes, num_events=meta.num_events, host=meta.host,
        pid=meta.pid, device_name=meta.device_name, world_size=meta.world_size, backend=meta.backend,
        nccl_version=meta.nccl_version, base_time_ns=meta.base_time_ns, ts_fractional=meta.ts_fractional,
        trace_mode=meta.trace_mode, extract_version=parsed.extract_version, stat_key=parsed.stat_key)


def stored_outcome(trace: store.TraceRow, zero_duration_events: int, notes: tuple = ()) -> Outcome:
    """The ``ok`` line of a stored trace, with what is worth a note (``notes``: TraceMeta.notes)."""
    warning = None
    if trace.rank_source == "single_trace":
        warning = "no rank in the trace or its name; a run of one trace is rank 0"
    if zero_duration_events:
        warning = "; ".join(filter(None, [warning, f"{zero_duration_events} device events of zero duration "
                                          "kept (they add no time)"]))
    warning = "; ".join(filter(None, [warning, *notes])) or None
    message = f"ingested as run '{trace.run_id}' rank {trace.rank}"
    return Outcome(trace.path, "ok", message + (f" ({warning})" if warning else ""), trace.run_id, trace.rank,
                   warning, trace.json_bytes)


def stale_dropped(con, runs: list[RunDir], on_drop: Callable[[str], None] | None = None) -> list[Outcome]:
    """``runsync.drop_stale``, a note for each trace dropped."""
    return [Outcome(path, "note", "its rows, stored by an older version, were dropped: this version could not read "
                    "the file again (see its error)", run_id) for path, run_id in runsync.drop_stale(con, runs, on_drop)]


def drop_vanished(con, runs: list[RunDir], on_drop: Callable[[str], None] | None = None) -> list[Outcome]:
    """An ingest sees each run directory as it is now: a stored trace whose file
    is gone (a re-profiled run, a deleted or renamed file) is dropped, with a note."""
    notes = []
    for path, run_id in store.vanished(con, [(run.run_id, str(run.path)) for run in runs]):
        store.drop_trace(con, path)
        if on_drop:
            on_drop(path)
        notes.append(Outcome(path, "note", "the file is gone from its run directory; its rows were dropped", run_id))
    return notes


def _place(con, path: Path, run: RunDir, parsed: ParsedFile, pending, moving, view=None):
    """A parsed file's traces row, tables and the trace_id of its stored older version (None: a new
    file, or one ``replace_trace`` finds), or the Outcome that ends it here: its parse error,
    unchanged, deferred behind a pending file that holds its rank, or a rank it cannot take.
    ``view``: what the file is checked against (the database's rows by default)."""
    view = view or _Queried(con)
    if parsed.error:
        return Outcome(str(path), "error", parsed.error, run.run_id)
    extracted = parsed.extracted
    if extracted is None:  # hashed: its stat had changed, or was racy
        store.put_stat_key(con, str(path), parsed.stat_key)
        return unchanged(path, run)
    try:
        rank, rank_source = resolve_rank(path, run.run_id, run.manifest.ranks, len(run.files), extracted.meta,
                                          lambda: view.others(run.run_id, str(path)))
        refuse_clash(view.holders(run.run_id, rank, str(path)), run.run_id, rank, pending, moving)
    except ClashWithPending:
        return Outcome(str(path), DEFERRED, str(rank), run.run_id)  # the rank: see ``moving``
    except TraceError as exc:
        return Outcome(str(path), "error", str(exc), run.run_id)
    return trace_row(path, run.run_id, rank, rank_source, parsed), extracted, view.old(str(path))


def _write(con, path: Path, run: RunDir, parsed: ParsedFile, written_runs: set[str],
           pending: set[str] | frozenset = frozenset(), moving: dict[str, int] | None = None) -> Outcome:
    placed = _place(con, path, run, parsed, pending, moving)
    if isinstance(placed, Outcome):
        return placed
    trace, extracted, _ = placed
    import pyarrow as pa  # loaded: the file was parsed

    try:
        row = None if run.run_id in written_runs else run.row()
        store.replace_trace(con, trace, row, extracted)
    except (duckdb.Error, pa.ArrowException, OverflowError) as exc:  # rolled back: nothing partial
        return Outcome(str(path), "error", f"cannot store: {oneline.message(exc)}", run.run_id)  # COMMIT's, not ROLLBACK's
    written_runs.add(run.run_id)
    return stored_outcome(trace, extracted.meta.zero_duration_events, extracted.meta.notes)


def _write_safely(con, path: Path, run: RunDir, parsed: ParsedFile, written_runs: set[str],
                  pending: set[str] | frozenset = frozenset(), moving: dict[str, int] | None = None) -> Outcome:
    """_write, where any exception is that file's one line (the backstop, with its type); a
    database that can no longer be written (disk full: DuckDB invalidates it) ends the ingest
    with one DatabaseError line naming the first error."""
    try:
        outcome = _write(con, path, run, parsed, written_runs, pending, moving)
    except duckdb.FatalException as exc:
        outcome = Outcome(str(path), "error", f"cannot store: {oneline.message(exc)}", run.run_id)
    except Exception as exc:
        return Outcome(str(path), "error", f"cannot store ({oneline.describe(exc)})", run.run_id)
    if outcome.status == "error" and outcome.message.startswith("cannot store: ") and any(
            sign in outcome.message for sign in CANNOT_WRITE):
        raise schema.DatabaseError(f"{outcome.path}: {outcome.message}; the ingest stops (the files stored "
                                   "before are intact: re-run when the database can be written)")
    return outcome


# DuckDB's words for a database that cannot be written at all (a full disk, a file-size limit, an
# invalidated instance): every later file would fail the same way.
CANNOT_WRITE = ("Could not write file", "No space left on device", "database has been invalidated")


def unchanged(path: Path, run: RunDir) -> Outcome:
    return Outcome(str(path), "unchanged", "unchanged, skipped", run.run_id)


def log_outcome(con, outcome: Outcome) -> None:
    """The outcome's ``ingest_log`` row."""
    log_outcomes(con, [outcome])


def log_outcomes(con, outcomes: list[Outcome]) -> None:
    """The outcomes' ``ingest_log`` rows, in one statement (a statement costs ~1 ms, whatever its rows)."""
    if outcomes:
        columns = [[getattr(o, name) for o in outcomes] for name in ("path", "run_id", "status", "message", "node")]
        con.execute("INSERT INTO ingest_log (logged_at, path, run_id, status, message, node) SELECT now(), "
                    + ", ".join("unnest(?::VARCHAR[])" for _ in columns), columns)
