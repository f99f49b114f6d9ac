"""A new database file starts as a copy of a template: this version's empty tables and stored
definitions, set up once per version and machine (docs/ingest.md, "A new database").

Setting a new file up costs ~0.3 s (the tables' DDL, then DuckDB binds each stored table macro
as it is created); copying the 2 MB file that the set-up writes costs a few milliseconds.  The
template lives in the user's cache directory (pipeline/common/cachefiles.py), named by the DuckDB
version and ``schema.setup_digest()`` and by the sha256 of its bytes: one that does not hash to its
name is never copied.

Anything that goes wrong here (no cache directory, a read-only file system, a disk full, a file
system without hard links) only means the new file is set up in place, as it always was.  Where
the disk the new file is on is full, that set-up fails too, and the ingest removes what it left
(``pipeline/execute/ingest.py``, ``_open``).
"""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

import duckdb

from scaletrace.pipeline.common import cachefiles
from scaletrace.pipeline.store import schema

KIND = "template"


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
    folder = cachefiles.cache_dir()
    key = cachefiles.key_of(duckdb.__version__, schema.setup_digest())
    try:
        data = cachefiles.read(folder, f"{KIND}.{key}.*.duckdb")  # a damaged one is removed: built again below
        if data is not None:
            return data
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
        os.replace(db, folder / f"{KIND}.{key}.{cachefiles.digest(data)}.duckdb")
    finally:
        for leftover in staged.iterdir():
            leftover.unlink()
        staged.rmdir()
    cachefiles.prune(folder, "*.duckdb")  # every template, those named before the kind prefix too
    return data
