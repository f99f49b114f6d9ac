"""How many files the command line may open (``ulimit -n``).

A command opens more descriptors than its files: the database and its write-ahead log, the worker
pool's pipes, DuckDB's and polars' threads, V8's (the report's charts). Under a tiny soft limit they
died with ``OSError: Too many open files`` or a Rust panic shown as a traceback. So, before a command:
the soft limit is raised to the hard one where it is lower (as many tools do; the hard limit is the
administrator's), and a hard limit under MIN_OPEN_FILES is one line naming the limit and the fix.
"""

from __future__ import annotations

import errno
import resource

# Each command ran at 24 (the report) or 16 (a one-worker ingest) and failed at 20 or 14: a margin
# above that for the worker pool's pipes on a larger machine.
MIN_OPEN_FILES = 64


class TooFewFiles(OSError):
    """This process may not open enough files to run a command."""


def ensure(minimum: int = MIN_OPEN_FILES) -> None:
    """Raise the soft RLIMIT_NOFILE to the hard limit where lower; TooFewFiles when the limit stays
    under ``minimum``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < minimum:
        raise TooFewFiles(errno.EMFILE, too_few_line(soft, minimum))


def too_few_line(limit: int | None = None, minimum: int = MIN_OPEN_FILES) -> str:
    """The one line for a limit on open files too small (``limit`` None: it was hit midway)."""
    if limit is None:
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return (f"this process may open only {limit} files (ulimit -n) and scaletrace needs at least {minimum}: "
            f"raise the limit (ulimit -n 1024)")
