"""Schema versions: what each added, and how a file of an older one is brought up to this one
(docs/schema.md, "Versions").

A stored file (a DuckDB database, a Parquet dataset or export) records the schema version that
wrote it (``meta``: ``schema_version``).  What an older file lacks is of two kinds:

* **tables and columns** (DDL): an ingest into an older DuckDB file adds them, all in one
  transaction with the new version number (``schema.open_for_write``), so the file is of the old
  version or of this one, never between; rows stored before hold NULL there, unless the version's
  ``sql`` gives them a value the file itself holds.  A Parquet reader reads a column its files lack
  as NULL.
* **rows made from the traces**: a column whose values come from the trace is filled only by
  reading the trace again.  Each stored trace records the extract that made its rows
  (``traces.extract_version``, ``pipeline/read/version.py``); one made by another is *stale*.
  Readers refuse a file that holds a stale trace (one line, and the ingest command that reads its
  run directories again); an ingest into it must read every stale trace again, or it is refused
  before anything is written (``dbcheck.check_whole``): never a file in which some runs have the
  new rows and others the old.

Registering a change of ``schema.sql``: bump ``schema.SCHEMA_VERSION`` and add its entry here
(tests/test_schema_versions.py fails until the entry's digest is the schema's); a column made
from the trace also bumps ``EXTRACT_VERSION``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Migration:
    """One schema version: the digest of its tables' columns (``schema.columns_digest()``), what it
    changed, and the statements that give rows of the previous version their values (run after the
    missing tables and columns are added; none: NULL is right for them)."""

    columns_sha256: str
    what: str
    sql: tuple[str, ...] = ()


# Every file written before versions were counted says "1", whatever its columns (the schema.sql of
# any commit up to this mechanism's; tests/data/schemas holds each): its missing columns are added,
# and every trace it holds is stale (no extract_version, or an older one) or current as stored.
MIGRATIONS: dict[int, Migration] = {
    1: Migration("", "every file written before the version was counted: the columns of the release that wrote it"),
    2: Migration("7eab22f4a2c8faea12eb19317a0bec3c6a0ddc13c999fa0c833ebf3e67ef82a9",
                 "the version is counted; an ingest adds what an older file lacks, in one transaction"),
}


def version_of(meta: dict[str, str]) -> int | None:
    """The schema version a file's ``meta`` says; None when it says none a scaletrace wrote."""
    value = meta.get("schema_version")
    return int(value) if value is not None and value.isdigit() else None


def data_sql(since: int, until: int) -> list[str]:
    """The statements that bring rows of version ``since`` to ``until``, in order."""
    return [sql for version in range(since + 1, until + 1) for sql in MIGRATIONS[version].sql]
