"""Ctrl-C (SIGINT) or SIGTERM during an ingest: one line and exit 128 + N (130, 143), never a
traceback, nothing half-written (docs/robustness.md, "Signals").

The first of either signal raises KeyboardInterrupt at once, as Python's own SIGINT handler
does, and is remembered: DuckDB turns a KeyboardInterrupt raised inside a query into its own
``InterruptException``, which the ingest would take for one file's failure and go on, so the
ingest's callbacks call :meth:`Interrupt.check` to raise it again.  Further signals while the
ingest cleans up (rolls back, stops its workers) are ignored.  Parse workers ignore both
(pipeline/execute/workers.py): the parent stops them.  A step that must not be cut in two (a
Parquet trace's commit record, its run's row and its line) runs under :func:`held`: a signal
during it stops the ingest once the step is done.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

from scaletrace import INTERRUPTED_LINE, TERMINATED_LINE

SIGNALS = (signal.SIGINT, signal.SIGTERM)  # each ends the command with 128 + its number
LINES = {signal.SIGINT: INTERRUPTED_LINE, signal.SIGTERM: TERMINATED_LINE}
_active: "Interrupt | None" = None  # the handler installed now, if any


class Interrupt:
    """A context manager that installs the handler (main thread only) and restores the old ones."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict = {}
        self._holding = 0  # sections under held() open now

    def __enter__(self) -> "Interrupt":
        global _active
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._handler) for sig in SIGNALS}
            _active = self
        return self

    def __exit__(self, *exc) -> None:
        global _active
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
        if _active is self:
            _active = None

    def _handler(self, signum, frame) -> None:
        if self.signum is None:
            self.signum = signum
            if not self._holding and not _in_import_machinery(frame):
                raise KeyboardInterrupt

    @property
    def hit(self) -> bool:
        return self.signum is not None

    @property
    def line(self) -> str:
        """The first word of the command's line: ``interrupted`` (Ctrl-C, or a KeyboardInterrupt
        raised before the handler was in) or ``terminated``."""
        return LINES[self.signum or signal.SIGINT]

    @property
    def status(self) -> int:
        """128 + the signal's number, as a shell reports a command the signal ended."""
        return 128 + (self.signum or signal.SIGINT)

    def check(self) -> None:
        """Raise KeyboardInterrupt if a signal came (even if DuckDB swallowed it), unless a step
        under :func:`held` is still going on: it raises once the step is done."""
        if self.hit and not self._holding:
            raise KeyboardInterrupt


def _in_import_machinery(frame) -> bool:
    """Whether the signal came during an import (importlib's code is on the stack): the signal is
    only remembered, and the next :meth:`Interrupt.check` raises it.  A KeyboardInterrupt raised in
    importlib's own code (a module lock's weakref callback) is printed as "Exception ignored" and
    lost, and one raised while a compiled module initializes can abort the process: DuckDB's
    (nanobind) does, "Critical nanobind error", SIGABRT instead of exit 130."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def requested() -> bool:
    """Whether a signal has asked the command to stop (a step under :func:`held` goes on)."""
    return _active is not None and _active.hit


@contextmanager
def held() -> Iterator[None]:
    """A step that SIGINT and SIGTERM never cut in two: one that comes during it stops the command
    (KeyboardInterrupt) when the step is done.  No effect without an :class:`Interrupt` installed
    (the Python API: KeyboardInterrupt as Python raises it)."""
    stop = _active
    if stop is None:
        yield
        return
    stop._holding += 1
    try:
        yield
    finally:
        stop._holding -= 1
    stop.check()
