"""Ingest trace files into DuckDB: discover, parse in parallel, write one transaction per file.

Parsing runs in worker processes (one per core); the main process is the only
DuckDB writer and takes results in path order, so at most ``workers + 1``
parsed files are held at once: peak memory follows the largest file, not the
sum of files.
"""

from __future__ import annotations

import hashlib
import itertools
import multiprocessing
import os
import re
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import duckdb
import pyarrow as pa

from scaletrace.pipeline import schema, sidefiles, store
from scaletrace.pipeline.classify import DEFAULT_RULES, Classifier, Rule
from scaletrace.pipeline.decode import TraceError, decode, unpack
from scaletrace.pipeline.extract import Extracted, TraceMeta, extract, rank_from_filename
from scaletrace.pipeline.manifest import MANIFEST_NAME, Manifest, ManifestError, read_manifest, run_row

TRACE_SUFFIXES = (".json", ".json.gz")
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


@dataclass
class ParsedFile:
    """What a worker returns for one trace file (pickled back to the writing process)."""

    sha256: str | None  # None: the file could not be read
    file_bytes: int  # size on disk
    json_bytes: int = 0  # uncompressed JSON size; 0 when not decoded
    extracted: Extracted | None = None  # None and no error: unchanged since the last ingest
    error: str | None = None  # one line: why the file cannot be ingested


def is_trace_file(path: Path) -> bool:
    return path.name != MANIFEST_NAME and path.name.endswith(TRACE_SUFFIXES)


def discover(paths: Iterable[str | Path]) -> tuple[dict[Path, list[Path]], list[Outcome]]:
    """Group trace files by run directory (the directory that holds them)."""
    runs: dict[Path, list[Path]] = {}
    problems: list[Outcome] = []
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            runs.setdefault(path.resolve().parent, []).append(path.resolve())
        elif path.is_dir():
            found = 0
            for root, dirs, files in os.walk(path):  # does not follow symlinked dirs: no loops
                dirs.sort()
                for name in sorted(files):
                    candidate = Path(root) / name
                    if is_trace_file(candidate) and candidate.is_file():
                        runs.setdefault(candidate.resolve().parent, []).append(candidate.resolve())
                        found += 1
            if not found:
                problems.append(Outcome(str(path), "error", "no trace files (*.json, *.json.gz) found"))
        elif path.is_symlink():
            problems.append(Outcome(str(path), "error", "broken symlink or symlink loop"))
        else:
            problems.append(Outcome(str(path), "error", "no such file or directory"))
    return {d: sorted(set(f)) for d, f in sorted(runs.items())}, problems


def parse_file(path: str, known_sha: str | None, rules: tuple[Rule, ...], keep_python: bool) -> ParsedFile:
    """Worker: read, decode and extract one file (nothing when its sha256 is ``known_sha``).

    The file's bytes are released as soon as they are decoded (``extract`` drops the
    raw event slices after reading them), so they never coexist with the output tables."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        return ParsedFile(None, 0, error=f"cannot read file ({exc.strerror or exc})")
    sha, nbytes = hashlib.sha256(raw).hexdigest(), len(raw)
    if sha == known_sha:
        return ParsedFile(sha, nbytes)
    try:
        data = unpack(raw)
        del raw
        json_bytes = len(data)
        classifier = _classifier(rules)
        fractional = FRACTIONAL_TS.search(data) is not None
        gpu_trace = classifier.device_scan.search(data) is not None  # any device category: a GPU trace
        doc = decode(data)
        del data
        return ParsedFile(sha, nbytes, json_bytes, extract(doc, classifier, keep_python, fractional, gpu_trace))
    except TraceError as exc:
        return ParsedFile(sha, nbytes, error=str(exc))
    except (OverflowError, pa.ArrowException) as exc:  # a value our checks missed: still one line
        return ParsedFile(sha, nbytes, error=f"a value does not fit its column ({str(exc).splitlines()[0]})")
    except (MemoryError, RecursionError) as exc:
        return ParsedFile(sha, nbytes, error=f"too large or deeply nested to parse ({type(exc).__name__})")


_CLASSIFIERS: dict = {}


def _classifier(rules: tuple[Rule, ...]) -> Classifier:
    if rules not in _CLASSIFIERS:
        _CLASSIFIERS[rules] = Classifier(rules)
    return _CLASSIFIERS[rules]


def ingest(
    paths: Iterable[str | Path],
    db: str | Path = "scaletrace.duckdb",
    *,
    rules: tuple[Rule, ...] = DEFAULT_RULES,
    keep_python: bool = False,
    workers: int | None = None,
    on_outcome: Callable[[Outcome], None] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    on_wait: Callable[[str], None] | None = None,
    lock_wait_s: float = schema.LOCK_WAIT_S,
) -> IngestReport:
    """Ingest trace files or run directories into the DuckDB file ``db``."""
    report = IngestReport()

    def record(outcome: Outcome) -> None:
        report.outcomes.append(outcome)
        if on_outcome:
            on_outcome(outcome)

    run_dirs, problems = discover(paths)
    con = schema.open_for_write(db, lock_wait_s, on_wait)
    try:
        for outcome in problems:
            record(outcome)
            _log(con, outcome)
        runs = _read_runs(run_dirs, con, record)
        known = dict(con.execute("SELECT path, sha256 FROM traces").fetchall())
    finally:
        con.close()  # workers are forked with no DuckDB instance (and its threads) alive
    tasks = [(f, run) for run in runs for f in run.files]
    parsed = _parse_all(tasks, known, rules, keep_python, workers)
    first = next(parsed, None)
    con = schema.open_for_write(db, lock_wait_s, on_wait)
    try:
        done = 0
        for item in itertools.chain([first] if first else [], parsed):
            (path, run), result = item
            outcome = _write(con, path, run, result)
            record(outcome)
            _log(con, outcome)
            done += 1
            if on_progress:
                on_progress(done, len(tasks))
        for run in runs:
            for outcome in _ingest_side_files(con, run) + _missing_ranks(con, run):
                record(outcome)
                _log(con, outcome)
    finally:
        con.close()
    return report


def _missing_ranks(con, run: RunDir) -> list[Outcome]:
    """A note when the run's world size says there are ranks without a trace."""
    rows = con.execute(
        "SELECT list(DISTINCT rank ORDER BY rank), max(world_size) FROM traces WHERE run_id = ?",
        [run.run_id]).fetchall()
    ranks, trace_world = rows[0] if rows else ([], None)
    world = run.manifest.world_size or trace_world
    if not ranks or not world or len(ranks) >= world:
        return []
    missing = sorted(set(range(world)) - set(ranks))
    shown = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
    return [Outcome(str(run.path), "note", f"run '{run.run_id}': {len(missing)} of {world} ranks have no "
                    f"trace (ranks {shown}); cross-rank figures cover the {len(ranks)} present",
                    run.run_id)]


def _ingest_side_files(con, run: RunDir) -> list[Outcome]:
    """The collector's step and power logs of one run (pipeline/sidefiles.py)."""
    known = dict(con.execute("SELECT path, sha256 FROM side_files WHERE run_id = ?", [run.run_id]).fetchall())
    outcomes = []
    for path, rank, kind in sidefiles.side_files(run.path):
        try:
            sha, records = sidefiles.read(path, kind)
            if known.get(str(path)) == sha:
                outcomes.append(Outcome(str(path), "unchanged", "unchanged, skipped", run.run_id, rank))
                continue
            sidefiles.write(con, path, run.run_id, rank, kind, sha, records)
        except (OSError, ValueError, duckdb.Error) as exc:
            outcomes.append(Outcome(str(path), "error", f"{kind} log not ingested: {exc}", run.run_id, rank))
            continue
        outcomes.append(Outcome(str(path), "ok", f"{len(records)} {kind} records for run '{run.run_id}' "
                                f"rank {rank}", run.run_id, rank))
    return outcomes


def _read_runs(run_dirs: dict[Path, list[Path]], con, record) -> list[RunDir]:
    runs = []
    for run_dir, files in run_dirs.items():
        try:
            manifest, raw, warnings = read_manifest(run_dir)
        except ManifestError as exc:
            for f in files:
                outcome = Outcome(str(f), "error", f"run.json unusable, trace skipped: {exc}")
                record(outcome)
                _log(con, outcome)
            continue
        for warning in warnings:
            outcome = Outcome(str(run_dir / MANIFEST_NAME), "note", warning.split(": ", 1)[1])
            record(outcome)
            _log(con, outcome)
        runs.append(RunDir(manifest.run_id or run_dir.name, run_dir, manifest, raw, files))
    return runs


def _parse_all(tasks, known, rules, keep_python, workers):
    """Yield (task, parse result) in task order, parsing up to ``workers`` files at once."""
    workers = workers or len(os.sched_getaffinity(0)) or 1
    workers = max(1, min(workers, len(tasks)))
    if workers == 1:
        for task in tasks:
            yield task, parse_file(str(task[0]), known.get(str(task[0])), rules, keep_python)
        return
    ctx = multiprocessing.get_context("fork")  # no __main__ re-import; pool starts before DuckDB opens
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        pending: deque[tuple[tuple, Future]] = deque()
        queue = iter(tasks)
        for task in queue:
            pending.append((task, pool.submit(parse_file, str(task[0]), known.get(str(task[0])),
                                               rules, keep_python)))
            if len(pending) > workers:
                head, future = pending.popleft()
                yield head, future.result()
        while pending:
            head, future = pending.popleft()
            yield head, future.result()


def _resolve_rank(path: Path, run: RunDir, meta: TraceMeta, con) -> tuple[int, str]:
    if meta.rank is not None:
        return meta.rank, "distributed_info"
    if run.manifest.ranks and path.name in run.manifest.ranks:
        return run.manifest.ranks[path.name], "manifest"
    rank = rank_from_filename(path)
    if rank is not None:
        return rank, "file_name"
    others = con.execute(
        "SELECT count(*) FROM traces WHERE run_id = ? AND path <> ?", [run.run_id, str(path)]
    ).fetchall()[0][0]
    if len(run.files) == 1 and others == 0:
        return 0, "single_trace"
    raise TraceError(
        f"no rank in distributedInfo, run.json or the file name, and run '{run.run_id}' has "
        f"{max(len(run.files), others + 1)} traces: name the files rank<N>.json(.gz) or add "
        f'"ranks": {{"{path.name}": N}} to {MANIFEST_NAME}'
    )


def _write(con, path: Path, run: RunDir, parsed: ParsedFile) -> Outcome:
    if parsed.error:
        return Outcome(str(path), "error", parsed.error, run.run_id)
    extracted = parsed.extracted
    if extracted is None:
        return Outcome(str(path), "unchanged", "unchanged, skipped", run.run_id)
    meta = extracted.meta
    try:
        rank, rank_source = _resolve_rank(path, run, meta, con)
        clash = con.execute(
            "SELECT path FROM traces WHERE run_id = ? AND rank = ? AND path <> ? LIMIT 1",
            [run.run_id, rank, str(path)],
        ).fetchall()
        if clash:
            raise TraceError(f"duplicate rank {rank} in run '{run.run_id}': also in {clash[0][0]}")
    except TraceError as exc:
        return Outcome(str(path), "error", str(exc), run.run_id)
    trace = store.TraceRow(
        path=str(path), run_id=run.run_id, rank=rank, rank_source=rank_source, sha256=parsed.sha256,
        bytes=parsed.file_bytes, json_bytes=parsed.json_bytes, num_events=meta.num_events, host=meta.host,
        pid=meta.pid, device_name=meta.device_name, world_size=meta.world_size, backend=meta.backend,
        nccl_version=meta.nccl_version, base_time_ns=meta.base_time_ns, ts_fractional=meta.ts_fractional,
        trace_mode=meta.trace_mode)
    try:
        store.replace_trace(con, trace, run_row(run.run_id, str(run.path), run.manifest, run.manifest_raw), extracted)
    except (duckdb.Error, pa.ArrowException, OverflowError) as exc:  # rolled back: nothing partial
        return Outcome(str(path), "error", f"cannot store: {str(exc).splitlines()[0]}", run.run_id)
    message = f"ingested as run '{run.run_id}' rank {rank}"
    warning = None
    if rank_source == "single_trace":
        warning = "no rank in the trace or its name; a run of one trace is rank 0"
    zero = meta.zero_duration_events
    if zero:
        warning = "; ".join(filter(None, [warning, f"{zero} device events of zero duration kept (they add no time)"]))
    return Outcome(str(path), "ok", message + (f" ({warning})" if warning else ""), run.run_id, rank, warning)


def _log(con, outcome: Outcome) -> None:
    con.execute(
        "INSERT INTO ingest_log VALUES (now(), ?, ?, ?, ?)",
        [outcome.path, outcome.run_id, outcome.status, outcome.message],
    )
