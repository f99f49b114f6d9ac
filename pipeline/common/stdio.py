"""The command line's standard streams, made safe before a command runs.

- A stream the shell closed (``>&-``, ``2>&-``, ``<&-``): its file descriptor is held on /dev/null,
  so that no file the command opens (a database!) is given descriptor 1 and written to as stdout;
  writing to a closed stdout is then one error line (:class:`StdoutError`), never a traceback.
- A stdout that cannot take a write (a full disk, ``> /dev/full``, an I/O error): the first failed
  write raises :class:`StdoutError` (the command line turns it into one line and exit 1); later
  writes, the interpreter's last flush among them, are dropped, so nothing more is said.
- A locale whose encoding cannot spell a trace's names (ISO-8859-1 and a Chinese run_id): stdout and
  stderr write such characters as backslash escapes instead of raising UnicodeEncodeError.

Only the process's own streams are touched (``sys.stdout is sys.__stdout__``): under a test runner
or another program's redirection nothing changes.
"""

from __future__ import annotations

import errno
import io
import os
import sys


class StdoutError(OSError):
    """Standard output cannot be written (closed, full, broken)."""


class _Raw(io.RawIOBase):
    """File descriptor 1 for writing; its first failure is a StdoutError, then writes are dropped."""

    def __init__(self, fd: int | None) -> None:
        super().__init__()
        self.fd, self.failed = fd, False

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self.fd is not None and os.isatty(self.fd)

    def fileno(self) -> int:
        if self.fd is None:
            raise OSError(errno.EBADF, "standard output is closed")
        return self.fd

    def write(self, data) -> int:
        if self.failed:
            return len(data)
        try:
            if self.fd is None:
                raise OSError(errno.EBADF, "standard output is closed")
            return os.write(self.fd, data)
        except BlockingIOError:
            raise
        except OSError as exc:
            if exc.errno == errno.EINTR:
                raise
            self.failed = True
            raise StdoutError(exc.errno, exc.strerror or "cannot write") from None


def _hold(fd: int) -> bool:
    """True when ``fd`` was closed and is now /dev/null (so nothing else can be given it)."""
    try:
        os.fstat(fd)
        return False
    except OSError:
        pass
    null = os.open(os.devnull, os.O_RDWR)
    if null != fd:
        os.dup2(null, fd)
        os.close(null)
    return True


def guard() -> None:
    """Make the process's standard streams safe (see the module's docstring); idempotent."""
    closed = {fd: _hold(fd) for fd in (0, 1, 2)}
    if sys.stderr is None or closed[2]:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115  nobody can read what it would say
    elif sys.stderr is sys.__stderr__ and sys.stderr.errors == "strict":
        sys.stderr.reconfigure(errors="backslashreplace")
    if isinstance(getattr(sys.stdout, "buffer", None), io.BufferedWriter) and isinstance(
            sys.stdout.buffer.raw, _Raw):
        return
    if sys.stdout is None or closed[1]:
        raw, template = _Raw(None), None
    elif sys.stdout is sys.__stdout__:
        raw, template = _Raw(sys.stdout.fileno()), sys.stdout
        template.flush()
    else:
        return
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(raw), encoding=getattr(template, "encoding", None) or "utf-8",
        errors="backslashreplace", line_buffering=bool(template and template.line_buffering))


def flush() -> None:
    """Write what stdout still holds (a StdoutError if it cannot take it)."""
    if sys.stdout is not None:
        sys.stdout.flush()
