"""The database: its DDL (schema.sql), opening it for writing (creating or upgrading it), and
connections that wait for another writer.  Rows are written by ``pipeline/store/write.py``."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import duckdb

from scaletrace.pipeline.common import limits, oneline
from scaletrace.pipeline.common.errors import DatabaseError
from scaletrace.pipeline.read.vocabulary import PER_TRACE_TABLES
from scaletrace.pipeline.store import migrations
from scaletrace.queries import definitions

SCHEMA_SQL = Path(__file__).with_name("schema.sql")
# The version of schema.sql, recorded in every stored file (meta: schema_version); a change of
# schema.sql bumps it and adds its entry to migrations.MIGRATIONS (tests/test_schema_versions.py).
SCHEMA_VERSION = "2"
# Every table, in DDL order (read from schema.sql: the one list; export and tests use it).
TABLES = tuple(re.findall(r"^CREATE TABLE IF NOT EXISTS (\w+)", SCHEMA_SQL.read_text(), re.MULTILINE))


LOCK_WAIT_S = limits.LOCK_WAIT_S  # how long an ingest waits for another process holding the database
# Every connection scaletrace opens: DuckDB would otherwise install and load an extension on
# its own (a --db naming a SQLite file fetches sqlite_scanner's native code from the network
# into $HOME/.duckdb); parquet and json are built into the wheel.
NO_EXTENSIONS = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}


def open_duckdb(db: str | Path = ":memory:", read_only: bool = False, config: dict | None = None
                ) -> duckdb.DuckDBPyConnection:
    """``duckdb.connect`` with extension auto-install and auto-load off (the one way scaletrace opens DuckDB)."""
    return duckdb.connect(str(db), read_only=read_only, config={**NO_EXTENSIONS, **(config or {})})


def is_lock_error(exc: Exception) -> bool:
    return "Conflicting lock" in str(exc) or "Could not set lock" in str(exc)


def lock_holder(exc: Exception) -> str:
    """Who holds the lock DuckDB's error names: ``process 123 (scaletrace sql)``."""
    match = re.search(r"\(PID (\d+)\)", str(exc))
    if not match:
        return "another process"
    command = process_command(int(match.group(1)))
    return f"process {match.group(1)}" + (f" ({command})" if command else "")


def process_command(pid: int) -> str:
    """What process ``pid`` runs, in a few words: ``scaletrace VERB`` for scaletrace (its console
    script or ``python -m scaletrace.cli``), else its program's name; "" where /proc cannot say
    (another system, a process gone or another user's)."""
    try:
        args = [arg.decode(errors="replace") for arg in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if arg]
    except OSError:
        return ""
    for i, arg in enumerate(args):
        if os.path.basename(arg) == "scaletrace" or arg == "scaletrace.cli":
            verb = next((a for a in args[i + 1:] if not a.startswith("-")), "")
            return oneline.printable(f"scaletrace {verb}".strip()[:60])
    return oneline.printable(os.path.basename(args[0])[:60]) if args else ""


def connect_waiting(db: str | Path, read_only: bool = False, wait_s: float = LOCK_WAIT_S,
                    on_wait=None) -> duckdb.DuckDBPyConnection:
    """Open ``db``; while another process holds its lock, wait up to ``wait_s`` seconds (0: not at
    all), first saying through ``on_wait`` which process holds it; then one line naming it."""
    deadline = time.monotonic() + wait_s
    told = False
    while True:
        try:
            return open_duckdb(db, read_only=read_only)
        except duckdb.IOException as exc:
            if not is_lock_error(exc):
                raise DatabaseError(f"{db}: {_not_openable(exc)}") from None
            if time.monotonic() >= deadline:
                waited = f" for more than {wait_s:g} s" if wait_s > 0 else ""
                raise DatabaseError(f"{db}: in use by {lock_holder(exc)}{waited}; try again when it has "
                                    "finished") from None
            if on_wait and not told:
                on_wait(f"{db}: waiting up to {wait_s:g} s for {lock_holder(exc)} to release the database")
                told = True
            time.sleep(0.2)
        except duckdb.Error as exc:
            raise DatabaseError(f"{db}: not a usable DuckDB file ({_first_line(exc)})") from None


def _not_openable(exc: Exception) -> str:
    """Why DuckDB could not open a file: one DuckDB would read with an extension (SQLite's) is foreign."""
    extension = re.search(r"[Ee]xtension \"?[^\"]*?(\w+?)(?:_scanner)?(?:\.duckdb_extension)?\"", str(exc))
    if extension:
        return (f"not a DuckDB file (DuckDB reads it with its {extension.group(1)} extension, which scaletrace "
                "never installs or loads); left as it was")
    return f"cannot open ({_first_line(exc)})"


@dataclass(frozen=True)
class Setup:
    """What a database file holds of scaletrace's set-up: its tables, and its ``meta`` rows (none
    in a new file), as :func:`read_setup` reads it: ``dbcheck``'s check and :func:`open_for_write`
    share one read; :func:`set_up_definitions` reads it again (on the writer's connection)."""

    tables: frozenset[str]  # the file's own tables (schema main)
    meta: dict[str, str]

    def by_this_version(self) -> bool:
        """Set up by this very version: its ``setup_sha256`` is this version's digest (schema.sql,
        the schema version, the definition files) and it still holds each of its tables."""
        return set(TABLES) <= self.tables and self.meta.get("setup_sha256") == setup_digest()


def read_setup(con: duckdb.DuckDBPyConnection) -> Setup:
    """The file's :class:`Setup`: one query, two when it has a ``meta`` table."""
    tables = frozenset(name for (name,) in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND NOT temporary").fetchall())
    meta = dict(con.execute("SELECT key, value FROM meta").fetchall()) if "meta" in tables else {}
    return Setup(tables, meta)


def open_for_write(db: str | Path, wait_s: float = LOCK_WAIT_S, on_wait=None,
                   con: duckdb.DuckDBPyConnection | None = None, setup: Setup | None = None
                   ) -> duckdb.DuckDBPyConnection:
    """A connection to ``db`` (``con``, else a new one) with this version's tables; its stored
    definitions are :func:`set_up_definitions`'.  A file set up by this version
    (``Setup.by_this_version``; ``setup``: the caller's read of it) is left as it is: a no-op
    ingest costs a query or two here, not the DDL."""
    con = con or connect_waiting(db, wait_s=wait_s, on_wait=on_wait)
    setup = setup or read_setup(con)
    if not setup.by_this_version():
        bring_up_to_date(con, setup)  # setup_sha256 is written with the definitions: until then, set up again
    return con


def bring_up_to_date(con: duckdb.DuckDBPyConnection, setup: Setup) -> None:
    """Give a file (new, or of an older schema version) this version's tables and columns, its
    older rows their values (``migrations.data_sql``) and this version's number: one transaction,
    so that the file is of its old version or of this one, never between.  A table's columns
    that the file lacks are added whether schema.sql adds them with ALTER or in its CREATE."""
    con.execute("BEGIN")
    try:
        con.execute(SCHEMA_SQL.read_text())
        present = set(con.execute("SELECT table_name, column_name FROM duckdb_columns() WHERE database_name = "
                                  "current_database() AND schema_name = 'main'").fetchall())
        for table, columns in expected_columns().items():
            for name, kind in columns:
                if (table, name) not in present:
                    con.execute(f'ALTER TABLE {table} ADD COLUMN "{name}" {kind}')
        since = migrations.version_of(setup.meta)
        if since is not None:
            for sql in migrations.data_sql(since, int(SCHEMA_VERSION)):
                con.execute(sql)
        con.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [SCHEMA_VERSION])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


@lru_cache(maxsize=1)
def expected_columns() -> dict[str, tuple[tuple[str, str], ...]]:
    """(column, type) of every table of schema.sql, in its order."""
    con = open_duckdb()
    try:
        con.execute(SCHEMA_SQL.read_text())
        expected: dict[str, list[tuple[str, str]]] = {}
        for table, name, kind in con.execute(
                "SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE database_name = "
                "current_database() AND schema_name = 'main' ORDER BY table_name, column_index").fetchall():
            expected.setdefault(table, []).append((name, kind))
        return {table: tuple(columns) for table, columns in expected.items()}
    finally:
        con.close()


def columns_digest() -> str:
    """sha256 of schema.sql's tables and columns (names and types, in order): what a schema version
    is (migrations.MIGRATIONS records it per version; comments and layout of the file are not in it)."""
    import hashlib

    text = "\n".join(f"{table}.{name} {kind}" for table in TABLES for name, kind in expected_columns()[table])
    return hashlib.sha256(text.encode()).hexdigest()


def set_up_definitions(con: duckdb.DuckDBPyConnection) -> None:
    """(Re)write the stored definitions (for the plain duckdb CLI, and for reading connections, which
    use them while they are current: :func:`register_definitions`) unless the file was set up by
    this version and they are as written then (``definitions_md5``: the plain duckdb CLI may have
    replaced one).  Split from the tables'
    DDL so that an ingest writes them while its workers parse."""
    if stored_definitions_current(con):
        return
    con.execute("BEGIN")
    definitions.register(con, persist=True)  # schema_version is open_for_write's, with the tables
    con.execute("INSERT OR REPLACE INTO meta VALUES ('setup_sha256', ?)", [setup_digest()])
    con.execute("INSERT OR REPLACE INTO meta VALUES ('definitions_md5', ?)", [definitions.stored_fingerprint(con)])
    con.execute("COMMIT")


def stored_definitions_current(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the definitions stored in the file are this version's, as it wrote them: the file
    was set up by this version (its ``setup_sha256`` covers the definition files) and no macro or
    reference table was replaced since (``definitions_md5``, e.g. by the plain duckdb CLI).  One
    query, ~0.05 s; creating the TEMP copies is ~0.15 s."""
    setup = read_setup(con)
    stored = setup.meta.get("definitions_md5")
    return setup.by_this_version() and stored is not None and stored == definitions.stored_fingerprint(con)


_CURRENT: dict[tuple[str, str, str, str], bool] = {}  # stored_definitions_current by file state, in this process


def _definitions_current(con: duckdb.DuckDBPyConnection, source: str | Path) -> bool:
    """:func:`stored_definitions_current`, asked once per state of a database file in this process
    (~35 ms of each connection saved where a process opens one file many times): the answer is
    kept under the file's stat key and its write-ahead log's (``runsync.stat_key``: size, times,
    inode; none for a file changed within the last ``RACY_NS``, which is asked every time) and the
    package's definitions' digest, so a file written since, by any process, or definitions edited
    since, are asked again.  Not kept for what is not a regular file
    (a Parquet dataset's folder)."""
    from scaletrace.pipeline.store.runsync import current_stat_key

    path = str(source)
    key = current_stat_key(path) if os.path.isfile(path) else None
    wal = f"{path}.wal"
    wal_key = current_stat_key(wal) if os.path.lexists(wal) else "absent"
    if key is None or wal_key is None:
        return stored_definitions_current(con)
    state = (os.path.realpath(path), key, wal_key, definitions.digest())  # and what this version's are
    if state not in _CURRENT:
        _CURRENT[state] = stored_definitions_current(con)
    return _CURRENT[state]


def setup_digest() -> str:
    """What a database set up by this version records (schema.sql, its version, the definitions)."""
    import hashlib

    text = f"{SCHEMA_VERSION}\0{SCHEMA_SQL.read_text()}\0{definitions.digest()}"
    return hashlib.sha256(text.encode()).hexdigest()


def register_definitions(con: duckdb.DuckDBPyConnection, source: str | Path) -> None:
    """The package's macros and reference tables on a reading connection (TEMP: they shadow
    whatever an older version stored in the file, and need no write access), unless the file's
    stored copies are this version's (:func:`stored_definitions_current`): then those are read."""
    if _definitions_current(con, source):
        return
    try:
        definitions.register(con)
    except duckdb.Error as exc:
        # DuckDB binds a macro when it is created: a database without a table the
        # definitions read (written by a much older version) fails here
        raise DatabaseError(f"{source}: lacks what this version's definitions read ({_first_line(exc)}); "
                            "ingest its traces again") from None


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
