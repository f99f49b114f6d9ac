"""Files scaletrace keeps in the user's cache directory to skip work done before: a new database's
template (pipeline/store/template.py) and the report's JavaScript bundle (reports/html.py).

The directory is ``$SCALETRACE_CACHE_DIR``, else ``$XDG_CACHE_HOME/scaletrace``, else
``~/.cache/scaletrace``.  Each file is named ``<kind>.<key>.<sha256 of its bytes>.<suffix>``: the key
says what it was made from (a version), and a file whose bytes do not hash to its name is never used
(removed, and made again).  Only the newest few of a kind are kept.  The caller treats any OSError
as "no cache": the work is done again, as it always was.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

KEEP = 4  # files of one kind kept (the newest): a few installed versions share the directory


def cache_dir() -> Path:
    """``$SCALETRACE_CACHE_DIR``, else ``$XDG_CACHE_HOME/scaletrace``, else ``~/.cache/scaletrace``."""
    if os.environ.get("SCALETRACE_CACHE_DIR"):
        return Path(os.environ["SCALETRACE_CACHE_DIR"])
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "scaletrace"


def digest(data: bytes) -> str:
    """The part of a cached file's name that its bytes must hash to."""
    return hashlib.sha256(data).hexdigest()[:32]


def key_of(*parts: str) -> str:
    """A short key for what a file was made from (versions, digests)."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def read(folder: Path, pattern: str) -> bytes | None:
    """The bytes of the first file matching ``pattern`` whose bytes hash to its name; a file that
    does not is removed.  None when there is none."""
    for found in sorted(folder.glob(pattern)):
        data = found.read_bytes()
        if digest(data) == found.name.rsplit(".", 2)[-2]:
            return data
        found.unlink()
    return None


def write(folder: Path, kind: str, key: str, suffix: str, data: bytes) -> Path:
    """``data`` as ``folder/<kind>.<key>.<digest>.<suffix>``, written whole under another name and
    renamed into place (a reader never sees half a file); then only the KEEP newest ``kind`` files
    are kept."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{kind}.{key}.{digest(data)}.{suffix}"
    staged = folder / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}"
    try:
        staged.write_bytes(data)
        os.replace(staged, path)
    finally:
        staged.unlink(missing_ok=True)
    prune(folder, f"{kind}.*.{suffix}")
    return path


def prune(folder: Path, pattern: str, keep: int = KEEP) -> None:
    """Keep the ``keep`` newest files matching ``pattern``."""
    dated = []
    for path in folder.glob(pattern):
        try:
            dated.append((path.stat().st_mtime, path))
        except OSError:  # removed meanwhile by another process
            pass
    for _, old in sorted(dated, reverse=True)[keep:]:
        try:
            old.unlink()
        except OSError:
            pass
