"""A new database file starts as a copy of a template: this version's empty tables and stored
definitions, set up once per version and machine (docs/ingest.md, "A new database").

Setting a new file up costs ~0.3 s (the tables' DDL, then DuckDB binds each stored table macro
as it is created); copying the 2 MB file that the set-up writes costs a few milliseconds.  The
template lives in the user's cache directory (``$SCALETRACE_CACHE_DIR``, else
``$XDG_CACHE_HOME/scaletrace``, else ``~/.cache/scaletrace``), named by the DuckDB version and
``schema.setup_digest()`` and by the sha256 of its bytes: one that does not hash to its name
is never copied.

Anything that goes wrong here (no cache directory, a read-only file system, a disk full, a file
system without hard links) only means the new file is set up in place, as it always was.  Where
the disk the new file is on is full, that set-up fails too, and the ingest removes what it left
(``pipeline/execute/ingest.py``, ``_open``).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import tempfile
from pathlib import Path

import duckdb

from scaletrace.pipeline.store import schema

KEEP = 4  # templates kept in the cache (the newest): a few installed versions share it


def cache_dir() -> Path:
    """``$SCALETRACE_CACHE_DIR``, else ``$XDG_CACHE_HOME/scaletrace``, else ``~/.cache/scaletrace``."""
    if os.environ.get("SCALETRACE_CACHE_DIR"):
        return Path(os.environ["SCALETRACE_CACHE_DIR"])
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "scaletrace"


def place(db: str | Path) -> bool:
    """Copy the template to ``db`` when no file (nor DuckDB write-ahead log) is there yet; True
    when it did.  The copy is linked into place, so a file another process created meanwhile
    is never replaced."""
    path = Path(db)
    if str(db) == ":memory:" or os.path.lexists(path) or os.path.lexists(f"{path}.wal"):
        return False
    data = _template()
    if data is None:
        return False
    staged = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.new")
    try:
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as to DuckDB's
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.link(staged, path)  # FileExistsError: another ingest created it first
        return True
    except OSError:
        return False
    finally:
        try:
            os.unlink(staged)
        except OSError:
            pass


def _template() -> bytes | None:
    """This version's template's bytes (built when missing or damaged), or None where it cannot be."""
    folder = cache_dir()
    key = hashlib.sha256(f"{duckdb.__version__}\0{schema.setup_digest()}".encode()).hexdigest()[:16]
    try:
        for found in sorted(folder.glob(f"{key}.*.duckdb")):
            data = found.read_bytes()
            if hashlib.sha256(data).hexdigest()[:32] == found.stem.rsplit(".", 1)[-1]:
                return data
            found.unlink()  # damaged: built again below
        folder.mkdir(parents=True, exist_ok=True)
        return _build(folder, key)
    except (OSError, duckdb.Error):
        return None


def _build(folder: Path, key: str) -> bytes:
    """Set up a new file in ``folder`` as an ingest would set up a new database, name it, and
    return its bytes."""
    staged = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=folder))
    try:
        db = staged / "template.duckdb"
        con = schema.open_duckdb(db)
        try:
            schema.open_for_write(db, con=con)
            schema.set_up_definitions(con)
        finally:
            con.close()  # a checkpoint: the file holds everything, no write-ahead log is left
        if os.path.lexists(f"{db}.wal"):
            raise OSError("the template's write-ahead log was left")
        data = db.read_bytes()
        os.replace(db, folder / f"{key}.{hashlib.sha256(data).hexdigest()[:32]}.duckdb")
    finally:
        for leftover in staged.iterdir():
            leftover.unlink()
        staged.rmdir()
    _prune(folder)
    return data


def _prune(folder: Path) -> None:
    """Keep the KEEP newest templates."""
    dated = []
    for path in folder.glob("*.duckdb"):
        try:
            dated.append((path.stat().st_mtime, path))
        except OSError:  # removed meanwhile by another process
            pass
    for _, old in sorted(dated, reverse=True)[KEEP:]:
        try:
            old.unlink()
        except OSError:
            pass
