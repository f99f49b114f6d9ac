"""Ctrl-C during an ingest: one line and exit 130, never a traceback (README, "Robustness").

The first SIGINT raises KeyboardInterrupt at once, as Python's own handler does, and is
remembered: DuckDB turns a KeyboardInterrupt raised inside a query into its own
``InterruptException``, which the ingest would take for one file's failure and go on, so the
ingest's callbacks call :meth:`CtrlC.check` to raise it again.  Further SIGINTs while the
ingest cleans up (rolls back, stops its workers) are ignored.  Parse workers ignore SIGINT
(pipeline/execute/workers.py): the parent stops them.
"""

from __future__ import annotations

import signal
import threading


class CtrlC:
    """A context manager that installs the handler (main thread only) and restores the old one."""

    def __init__(self) -> None:
        self.hit = False
        self._previous = None

    def __enter__(self) -> "CtrlC":
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def _handler(self, signum, frame) -> None:
        if not self.hit:
            self.hit = True
            raise KeyboardInterrupt

    def check(self) -> None:
        """Raise KeyboardInterrupt if Ctrl-C was pressed (even if DuckDB swallowed it)."""
        if self.hit:
            raise KeyboardInterrupt
