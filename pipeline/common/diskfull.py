"""A full disk, said once: which errors mean that the file system (or a quota) has no room left,
and the one line that names the path, the space left and the mount point (docs/robustness.md,
"A full disk").

DuckDB quotes the system's words ("Could not write file ...: No space left on device"), pyarrow
gives an OSError with errno 28 or quotes them, our own writes raise OSError: all of them are
found here, at the end of the error's chain (an error raised while handling it, or from it).
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from scaletrace.pipeline.common.errors import DiskFull
from scaletrace.pipeline.common.limits import size_text

NO_ROOM_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
NO_ROOM_WORDS = tuple(os.strerror(code) for code in NO_ROOM_ERRNOS)  # "No space left on device", ...


def no_room(exc: BaseException | None) -> bool:
    """Whether ``exc``, or an error in its chain, says the file system has no room (a full disk,
    a quota)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in NO_ROOM_ERRNOS:
            return True
        if any(words in str(exc) for words in NO_ROOM_WORDS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def mount_point(path: str | os.PathLike) -> Path:
    """The mount point of the file system that holds ``path`` (or would: the nearest existing
    folder above it)."""
    here = Path(os.path.abspath(path))
    while not os.path.lexists(here) and here != here.parent:
        here = here.parent
    while not os.path.ismount(here) and here != here.parent:
        here = here.parent
    return here


def room(path: str | os.PathLike) -> str:
    """``"212 KiB free on /data"``: what is left now on ``path``'s file system."""
    mount = mount_point(path)
    try:
        free = size_text(shutil.disk_usage(mount).free)
    except OSError:
        free = "unknown space"
    return f"{free} free on {mount}"


def disk_full(path: str | os.PathLike, what_happened: str) -> DiskFull:
    """The one line: ``PATH: disk full (N free on MOUNT); WHAT_HAPPENED: free space and re-run``."""
    return DiskFull(f"{path}: disk full ({room(path)}); {what_happened}: free space and re-run")


def stopped(path: str | os.PathLike, stored: int) -> DiskFull:
    """The line of an ingest that a full disk stopped, after ``stored`` files."""
    return disk_full(path, f"the ingest stopped after storing {stored} file{'s' * (stored != 1)}; what was "
                           "stored before is intact")
