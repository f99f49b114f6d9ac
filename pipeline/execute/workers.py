"""The parse process pool: results in task order, one file per failure, workers that never
outlive the ingest (README, "Robustness").

* Every parse runs in a worker process, even with one worker or one file.
* An exception in a worker is that job's failure (its type in the line), never the ingest's.
* A worker that dies (the kernel's out-of-memory killer, a SIGKILL, a crash in C code) breaks
  a ``ProcessPoolExecutor`` and every job in flight with it.  The unfinished jobs are then run
  again one at a time in a fresh process: the one whose process dies again is that file's
  error; the others come back as usual, and a new pool takes the rest.
* Workers die with the ingest process (``PR_SET_PDEATHSIG`` on Linux, else a thread that
  watches the parent), ignore Ctrl-C and SIGTERM (the parent handles them and stops them), and are the
  out-of-memory killer's first choice, so that memory pressure costs a file, not the ingest.
"""

from __future__ import annotations

import ctypes
import gc
import itertools
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Iterable, Iterator

from scaletrace.pipeline.common import interrupt, limits
from scaletrace.pipeline.common.oneline import describe

PR_SET_PDEATHSIG = 1  # linux/prctl.h
_PENDING = object()
_STARTED = object()  # what _in_order yields once, when its pool is forked and its first jobs are in


def pool_size(workers: int | None, jobs: int) -> int:
    """Processes for ``jobs`` files: ``workers``, else one per core this process may run on;
    never more than the jobs, at least one."""
    return max(1, min(workers or len(os.sched_getaffinity(0)) or 1, jobs))


class Ordered:
    """The iterator :func:`in_order` returns; ``ready`` says whether the next result is in."""

    def __init__(self, fn, jobs, workers, failed, kwargs, sizes=None):
        self._pending: deque[tuple[tuple, Future]] = deque()
        self._results = _in_order(fn, jobs, workers, failed, kwargs, self._pending, sizes)
        self._started = False

    def __iter__(self) -> "Ordered":
        return self

    def __next__(self):
        self.start()
        return next(self._results)

    def start(self) -> None:
        """Fork the pool and hand it the first jobs now, without waiting for a result: the caller
        may then open what the workers must not inherit (a DuckDB connection) while they parse."""
        if not self._started:
            self._started = True
            for _ in itertools.islice(self._results, 1):  # runs to _STARTED (nothing when no jobs)
                pass

    def ready(self, timeout: float = 0.0) -> bool:
        """Whether the next result is done, waiting at most ``timeout`` seconds for it (False
        where no job is in flight)."""
        if not self._pending:
            return False
        future = self._pending[0][1]
        if timeout > 0 and not future.done():
            wait([future], timeout)
        return future.done()

    def close(self) -> None:
        """Stop: the workers are killed when results are left (an interrupted ingest)."""
        self._results.close()


# jobs in flight at most, past the first workers + 1 (those small enough to be held together)
MAX_AHEAD_PER_WORKER = 8


def in_order(fn: Callable, jobs: Iterable[tuple], workers: int, failed: Callable[[str], object],
             sizes: list[int] | None = None, **kwargs) -> Ordered:
    """``fn(*job, **kwargs)`` for every job, yielded in job order; a job that raises or whose
    process dies yields ``failed(reason)``.

    At most ``workers + 1`` jobs are in flight (their results held until taken), or, with
    ``sizes`` (each job's input size, e.g. its file's bytes), more while the jobs in flight are
    together no larger than the largest job, up to MAX_AHEAD_PER_WORKER a worker: small files
    keep the workers busy while the caller writes, and what is held stays within what one
    large job would hold.

    Even one worker is a process of its own: a parser that dies (a C stack overflow, the
    out-of-memory killer) must cost its file, never the process that writes the database."""
    return Ordered(fn, jobs, workers, failed, kwargs, sizes)


def _in_order(fn, jobs, workers: int, failed, kwargs, pending: deque, sizes=None) -> Iterator:
    workers = max(1, workers)
    jobs = list(jobs)
    ahead = sizes is not None  # without sizes: workers + 1 in flight
    sizes = list(sizes) if ahead else [0] * len(jobs)
    budget, most = max(sizes, default=0), max(workers + 1, MAX_AHEAD_PER_WORKER * workers if ahead else 0)
    pool = None
    nxt = 0  # the next job to submit
    held = 0  # the sizes of the jobs in flight
    finished = False
    announced = False
    try:
        while True:
            while nxt < len(jobs) and (len(pending) <= workers
                                        or (len(pending) < most and held + sizes[nxt] <= budget)):
                pool = pool or _new_pool(workers)
                pending.append((jobs[nxt], _submit(pool, fn, jobs[nxt], kwargs), sizes[nxt]))
                held += sizes[nxt]
                nxt += 1
            if not pending:
                finished = True
                return
            if not announced:
                announced = True
                yield _STARTED
            job, future, size = pending.popleft()
            held -= size
            result = _outcome(future, failed)
            if result is not _PENDING:
                yield result
                continue
            # A worker died: the pool and every job still in it are lost.
            again = [(job, future, size)] + list(pending)
            pending.clear()
            held = 0
            _discard(pool, kill=True)
            pool = None
            for job, future, _ in again:
                result = _outcome(future, failed)
                yield _alone(fn, job, kwargs, failed) if result is _PENDING else result
    finally:
        if pool is not None:
            _discard(pool, kill=not finished)


def _submit(pool: ProcessPoolExecutor, fn, job, kwargs) -> Future:
    try:
        # A submit may fork the pool's workers, and os.fork runs the parent's at-fork callbacks
        # (logging's lock release): a KeyboardInterrupt raised inside one is printed as "Exception
        # ignored" with its traceback.  Held, a signal is raised once the submit is done.
        with interrupt.held():
            return pool.submit(fn, *job, **kwargs)
    except BrokenProcessPool as exc:  # a worker died since the last result: settled like the others
        future: Future = Future()
        future.set_exception(exc)
        return future


def _outcome(future: Future, failed):
    """The job's result, ``failed(...)`` when it raised, or _PENDING when its process died."""
    try:
        return future.result()
    except BrokenProcessPool:
        return _PENDING
    except Exception as exc:
        return failed(f"could not be parsed ({describe(exc)})")


def _alone(fn, job, kwargs, failed):
    """Run one job in a process of its own; if that process dies too, the job is the cause."""
    pool = _new_pool(1)
    try:
        with interrupt.held():  # it forks (see _submit)
            future = pool.submit(fn, *job, **kwargs)
        processes = list((getattr(pool, "_processes", None) or {}).values())
        result = _outcome(future, failed)
        if result is not _PENDING:
            return result
        return failed(f"the parse process died ({_death(_exit_code(processes))}); "
                      "the other files were parsed again")
    finally:
        _discard(pool, kill=True)


def _exit_code(processes, wait_s: float = 5.0) -> int | None:
    """The dead worker's exit code.  The pool's own thread reaps it too: a join that loses that
    race sees no code, which the other thread records a moment later."""
    deadline = time.monotonic() + wait_s
    while True:
        for process in processes:
            process.join(0.1)
        codes = [p.exitcode for p in processes if p.exitcode]
        if codes or time.monotonic() > deadline:
            return codes[0] if codes else None
        time.sleep(0.05)


def _death(code: int | None) -> str:
    if code is None:
        return "cause unknown"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = ": out of memory?" if -code == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exit status {code}"


def _new_pool(workers: int) -> ProcessPoolExecutor:
    # fork: no __main__ re-import.  A replacement pool is forked while the DuckDB connection is
    # open; the workers never touch it.
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"),
                               initializer=_init_worker, initargs=(os.getpid(),))


def _discard(pool: ProcessPoolExecutor, kill: bool) -> None:
    """Shut a pool down; ``kill``: stop its workers now instead of letting them finish a file.

    A worker killed while it sends a result leaves the pool's thread waiting for the rest of
    the message for ever (the parent holds the pipe's write end too, so no end of file comes),
    and shutdown, or the interpreter's exit, waits for that thread: once the workers are dead,
    the parent's write end is closed, and the thread sees the end of the pipe."""
    if kill:
        processes = list((getattr(pool, "_processes", None) or {}).values())
        for process in processes:
            try:
                process.kill()
            except (OSError, AttributeError, ValueError):
                pass
        for process in processes:
            process.join(5)
        writer = getattr(getattr(pool, "_result_queue", None), "_writer", None)
        if writer is not None and not any(p.is_alive() for p in processes):
            try:
                writer.close()
            except OSError:
                pass
    pool.shutdown(wait=True, cancel_futures=True)


def _init_worker(parent_pid: int) -> None:
    # The objects forked from the parent are never the worker's garbage: frozen, the collector does not
    # walk them (a forked child of a process with live native threads crashed walking them, in the
    # first collection of a pandas import), and their pages are not written (copy-on-write).
    gc.freeze()
    for sig in interrupt.SIGNALS:  # Ctrl-C and SIGTERM are the parent's (even sent to the whole
        signal.signal(sig, signal.SIG_IGN)  # process group): it stops the workers, and says one line
    _die_with_parent(parent_pid)
    _prefer_oom_kill()
    _reuse_freed_memory()
    limits.watch_parse_memory()  # each parse's memory cap: its one line, not the OOM killer's choice


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
MMAP_THRESHOLD = 64 << 20  # measured: 0.2 s of system time here, 0.3 s at 32 MiB, no better at 128
TRIM_THRESHOLD = 256 << 20
# A file of at least LARGE_JSON_BYTES of JSON: blocks from LARGE_MMAP_THRESHOLD up are mapped (its
# columns are several MB each), so that each is given back when freed instead of staying in a heap
# that a stage's temporaries fragment (measured: an 80 MB CPU-only trace's worker peaked at 513 MB,
# 438 MB with this; the system time of faulting pages in again is paid by large files only).
LARGE_JSON_BYTES = 32 << 20
LARGE_MMAP_THRESHOLD = 4 << 20


class _Malloc:
    libc = None  # set in a parse worker (_reuse_freed_memory)
    threshold = None


def _reuse_freed_memory() -> None:
    """glibc: blocks under 64 MiB come from the heap and stay there once freed (up to 256 MiB free
    at its top), for the next file to reuse: each file's buffers were mapped and unmapped, and
    faulting their pages in again cost the workers 0.45-0.5 s of system time on the 60-trace set,
    0.2 s with this (0.3 s with 32 MiB).  A larger block is still mapped and given back when
    freed (see :func:`fit_heap` for large files).  A no-op elsewhere."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    except (OSError, AttributeError):
        return
    _Malloc.libc, _Malloc.threshold = libc, MMAP_THRESHOLD


def fit_heap(json_bytes: int) -> None:
    """In a parse worker, before a file's scan: the mmap threshold for a file of ``json_bytes``
    of JSON (``LARGE_JSON_BYTES``).  A no-op outside a worker, and where glibc is not the allocator."""
    if _Malloc.libc is None:
        return
    threshold = LARGE_MMAP_THRESHOLD if json_bytes >= LARGE_JSON_BYTES else MMAP_THRESHOLD
    if threshold != _Malloc.threshold:
        _Malloc.libc.mallopt(M_MMAP_THRESHOLD, threshold)
        _Malloc.threshold = threshold


def _die_with_parent(parent_pid: int) -> None:
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
                if os.getppid() != parent_pid:  # the parent died before prctl took effect
                    os._exit(1)
                return
        except (OSError, AttributeError):
            pass
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(1.0)
    os._exit(1)


def _prefer_oom_kill() -> None:
    """Make this worker the out-of-memory killer's first choice (Linux; raising it needs no
    privilege): under memory pressure a parse dies, and costs one file, not the ingest."""
    try:
        with open("/proc/self/oom_score_adj", "w") as handle:
            handle.write("1000")
    except OSError:
        pass
