"""Paths as a command reads and writes them: no output onto an input, and a path given to SQL
as the one path it is.

``refuse_overlap`` is the one check every verb makes before it writes (``report -o``, ``run -o``,
``export --parquet``, ``ingest --db`` / ``--parquet``): an output that is one of the command's
inputs (the same path once symlinks are resolved, or the same file by device and inode: a hard
link, a bind mount), an output inside an input that is a directory of tables (a Parquet
dataset or export: every file under it is read), an output that is an existing file an input
directory's reader reads (a trace, run.json: ``Input.reads``), or an input inside an output
directory the command replaces or tidies as its own (an export, an ingest dataset) is one line,
``OverwriteError``, before anything is written.

``sql_path`` quotes a path for DuckDB's ``read_parquet``, whose every path is a glob pattern: a
folder named ``runs*`` beside ``runs1`` read both, every row twice.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


class OverwriteError(ValueError):
    """An output of a command that is, holds or sits inside one of its inputs."""


@dataclass(frozen=True)
class Input:
    path: str | Path
    what: str  # "database", "dataset", "trace", ...: said in the line
    holds_outputs: bool = False  # a directory every file of which is read: nothing may be written inside
    reads: Callable[[Path], bool] | None = None  # of a directory: the files under it the command reads


@dataclass(frozen=True)
class Output:
    path: str | Path
    what: str  # "report", "Parquet export", ...
    owns_dir: bool = False  # a directory the command replaces or tidies as its own: no input may be inside


def real(path: str | Path) -> str:
    """The absolute path with every symlink resolved (of the part that exists)."""
    return os.path.realpath(os.path.abspath(os.fspath(path)))


def same(a: str | Path, b: str | Path) -> bool:
    """The same file: the same real path, or (both existing) the same device and inode."""
    if real(a) == real(b):
        return True
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def inside(child: str | Path, parent: str | Path) -> bool:
    """``child`` lies strictly under the directory ``parent`` (real paths; the parent's device and
    inode met on the way up also count: a bind mount of it)."""
    child_real, parent_real = real(child), real(parent)
    if child_real.startswith(parent_real.rstrip(os.sep) + os.sep):
        return True
    try:
        target = os.stat(parent_real)
    except (OSError, ValueError):
        return False
    up = os.path.dirname(child_real)
    while True:
        try:
            info = os.stat(up)
            if (info.st_dev, info.st_ino) == (target.st_dev, target.st_ino):
                return True
        except (OSError, ValueError):
            pass
        parent_of_up = os.path.dirname(up)
        if parent_of_up == up:
            return False
        up = parent_of_up


def refuse_overlap(inputs: list[Input], outputs: list[Output]) -> None:
    """OverwriteError (one line, naming both paths) when an output would be written onto, inside
    or around one of the inputs; nothing is touched."""
    for out in outputs:
        if out.path is None:
            continue
        for source in inputs:
            if source.path is None:
                continue
            if same(out.path, source.path):
                reason = "is"
            elif source.holds_outputs and inside(out.path, source.path):
                reason = "is inside"
            elif out.owns_dir and inside(source.path, out.path):
                reason = "holds"
            elif source.reads and os.path.exists(out.path) and inside(out.path, source.path) \
                    and source.reads(Path(real(out.path))):
                reason = f"is {real(out.path)}, a file read from"
            else:
                continue
            raise OverwriteError(f"{os.fspath(out.path)}: the {out.what} would be written onto an input: it {reason} "
                                 f"the {source.what} {os.fspath(source.path)}; nothing was written: give another path")


_GLOB = {ord(c): f"[{c}]" for c in "*?["}  # a bracket class of one character matches it literally


def glob_literal(text: str) -> str:
    """``text`` as a glob pattern (DuckDB's or pathlib's) that matches it literally: ``*``, ``?``
    and ``[`` each in a bracket class of its own."""
    return text.translate(_GLOB)


def sql_path(path: str | Path) -> str:
    """``path`` as a SQL string literal for ``read_parquet``, its glob characters (``*``, ``?``,
    ``[``) matched literally (DuckDB expands each path of the list as a glob pattern)."""
    return "'" + glob_literal(os.fspath(path)).replace("'", "''") + "'"
