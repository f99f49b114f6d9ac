"""The relations every query builds on, registered from the package on every connection.

One relation per file, as in dbt: ``macros/<name>.sql`` is a table macro and
``reference/<name>.sql`` a reference table (data: dtype sizes, device peaks).
A file holds the relation's header and its ``SELECT``; the loader writes the
``CREATE``.  Adding a macro is adding one file::

    -- name: window_breakdown
    -- description: one line: what a row says
    -- grain: one row per trace × window
    -- param: per_step BOOLEAN true: ProfilerStep windows; false: the whole trace
    -- param: run VARCHAR a run_id, or NULL for every run
    -- depends: window_unions
    -- (free text: definition, units)
    SELECT ... FROM window_unions(per_step, run) ...

``param`` lines are the macro's parameters, in order (the type documents what
to pass; DuckDB macro parameters are untyped).  ``depends`` names the other
definitions the body reads; the loader refuses a file whose declared and used
dependencies differ, one that depends on a definition no file defines, and a
cycle, and creates the definitions in dependency order (DuckDB binds a table
macro's body when the macro is created, so what it reads must exist first).

``register(con)`` creates them as TEMP macros and tables.  DuckDB allows
temporary objects on a read-only connection and looks a name up in the
temporary catalog before the database file's (DuckDB's CREATE MACRO docs:
TEMPORARY means "not to be persisted"; its catalog search path,
src/catalog/catalog_search_path.cpp, puts ``temp`` first; both checked on
DuckDB 2.0.1 and in tests/test_definitions.py), so the numbers always follow
the installed version, whatever definitions an older version stored in the
file.  ``register(con, persist=True)`` (ingest) also
writes them into the file, for the plain ``duckdb`` CLI.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import duckdb

from scaletrace.queries import QUERY_DIR, QueryError, _strip_comments, read_header

MACRO_DIR = QUERY_DIR / "macros"
REFERENCE_DIR = QUERY_DIR / "reference"
# Macros a reading connection computes once, for every run, and then reads (``share``): each takes
# one parameter, ``run``, and its rows for a run do not depend on the other runs (every part filters
# by run, every window is per run_id), so the whole result filtered to a run is the macro's answer
# for that run (tests/test_definitions.py checks it on a database of several runs).  run_metrics is
# read by most queries (run_summary, scaling, layouts, the sweep attribution) and costs 0.2-0.7 s.
SHARED_PER_RUN = ("run_metrics",)


@dataclass(frozen=True)
class Definition:
    name: str
    kind: str  # "macro" (macros/) or "table" (reference/)
    description: str
    grain: str
    params: tuple[str, ...]  # the macro's parameters, in order
    depends: tuple[str, ...]  # the other definitions its body reads, as declared
    body: str  # the SELECT
    path: Path

    def create_sql(self, temporary: bool) -> str:
        temp = "TEMP " if temporary else ""
        if self.kind == "macro":
            return f"CREATE OR REPLACE {temp}MACRO {self.name}({', '.join(self.params)}) AS TABLE\n{self.body}"
        return f"CREATE OR REPLACE {temp}TABLE {self.name} AS\n{self.body}"


def parse(text: str, path: Path, kind: str) -> Definition:
    header = read_header(text, path, ("name", "description", "grain", "depends"))
    if kind == "table" and header.params:
        raise QueryError(f"{path}: a reference table takes no parameters")
    body = "\n".join(text.splitlines()[len(header.lines):]).strip().rstrip(";").strip()
    if not one_query(body):
        raise QueryError(f"{path}: the body must be one SELECT after the header (the loader writes the CREATE)")
    depends = tuple(d.strip() for d in header.fields.get("depends", "").split(",") if d.strip())
    return Definition(path.stem, kind, header.fields["description"], header.fields.get("grain", ""),
                      tuple(header.params), depends, body, path)


# what can hide a ';' (string literals, quoted names, comments), and the ';' itself
_SQL_SPANS = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?\*/|;", re.DOTALL)
_QUERY_START = re.compile(r"\s*(\(|SELECT\b|WITH\b|FROM\b|VALUES\b)", re.IGNORECASE)


def one_query(body: str) -> bool:
    """Whether ``body`` is one query: it begins as a query does and holds no ``;`` outside
    literals, quoted names and comments (so that ``CREATE ... AS`` it creates one object and runs
    nothing else).  A lexical check, ~100x cheaper than DuckDB's parser (4 ms a file, paid by
    every connection's first load); tests/test_definitions.py parses every file with DuckDB too."""
    bare = _SQL_SPANS.sub(lambda m: ";" if m.group() == ";" else " ", body)
    return ";" not in bare and _QUERY_START.match(bare) is not None


def _files() -> list[tuple[Path, str]]:
    return [(p, "macro") for p in sorted(MACRO_DIR.glob("*.sql"))] + \
           [(p, "table") for p in sorted(REFERENCE_DIR.glob("*.sql"))]


def _stamps() -> tuple:
    """Each definition file's path, kind, mtime and size: the state of the files."""
    return tuple((path, kind, stat.st_mtime_ns, stat.st_size)
                 for path, kind in _files() for stat in [path.stat()])


def load() -> list[Definition]:
    """Every definition, checked, in creation order (each after what it depends on)."""
    # parsed once per state of the files (every connection registers them; an edit is seen)
    return list(_load(_stamps()))


@functools.lru_cache(maxsize=8)
def _load(stamps: tuple) -> tuple[Definition, ...]:
    defs: dict[str, Definition] = {}
    for path, kind, *_ in stamps:
        d = parse(path.read_text(), path, kind)
        if d.name in defs:
            raise QueryError(f"{path}: '{d.name}' is also defined by {defs[d.name].path}")
        defs[d.name] = d
    for d in defs.values():
        _check_depends(d, defs)
    try:
        order = list(TopologicalSorter({n: d.depends for n, d in defs.items()}).static_order())
    except CycleError as exc:
        raise QueryError(f"definitions depend on each other in a cycle: {' -> '.join(exc.args[1])}") from None
    return tuple(defs[n] for n in order)


def _check_depends(d: Definition, defs: dict[str, Definition]) -> None:
    missing = [n for n in d.depends if n not in defs]
    if missing:
        raise QueryError(f"{d.path}: depends on {', '.join(missing)}, which no file in "
                         f"{MACRO_DIR.name}/ or {REFERENCE_DIR.name}/ defines")
    words = set(re.findall(r"\w+", _strip_comments(d.body)))  # a name is used where it is a whole word
    used = {n for n in defs if n != d.name and n in words}
    if used != set(d.depends):
        raise QueryError(f"{d.path}: declared dependencies {sorted(d.depends)} differ from the "
                         f"definitions it uses {sorted(used)} (header line: -- depends: {', '.join(sorted(used))})")


def digest() -> str:
    """sha256 of every definition file's name and text: what the stored copies were written from
    (an ingest asks several times: computed once per state of the files, as :func:`load` parses)."""
    return _digest(_stamps())


@functools.lru_cache(maxsize=8)
def _digest(stamps: tuple) -> str:
    h = hashlib.sha256()
    for path, kind, *_ in stamps:
        h.update(f"{kind}:{path.name}\0".encode())
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def stored_fingerprint(con: duckdb.DuckDBPyConnection) -> str | None:
    """md5 of the definitions stored in ``con``'s file as they are now: each table macro's tokens
    and each reference table's rows (None when one is missing).  One query: an ingest compares it
    with what it recorded when it wrote them, and rewrites them only when they differ."""
    tables = [p.stem for p, kind in _files() if kind == "table"]
    # a macro's text as a sorted bag of its tokens: DuckDB writes some lists (EXCLUDE) in no fixed order
    parts = ["(SELECT string_agg(function_name || chr(1) || array_to_string(list_sort("
             "string_split_regex(macro_definition, '[\\s,()]+')), ' '), chr(2) ORDER BY function_name) "
             "FROM duckdb_functions() WHERE database_name = current_database() AND schema_name = 'main' "
             "AND function_type = 'table_macro')"]
    parts += [f"(SELECT count(*)::VARCHAR || chr(1) || coalesce(string_agg(t::VARCHAR, chr(2) ORDER BY t::VARCHAR), '') "
              f"FROM main.{name} t)" for name in tables]
    try:
        (value,), = con.execute(f"SELECT md5(concat_ws(chr(3), {', '.join(parts)}))").fetchall()
    except duckdb.Error:
        return None
    return value


def register(con: duckdb.DuckDBPyConnection, persist: bool = False) -> None:
    """Create every definition on ``con`` as a TEMP macro / table (a reading connection); with
    ``persist``, (re)write the stored copies in the database file instead (an ingest's
    connection, which reads none of them; the caller holds the transaction)."""
    for d in load():
        con.execute(d.create_sql(temporary=not persist))


def readers(name: str) -> frozenset[str]:
    """``name`` and every definition that reads it, directly or through others."""
    found = {name}
    for d in load():  # creation order: what a definition reads comes before it
        if found & set(d.depends):
            found.add(d.name)
    return frozenset(found)


def reads(sql: str, name: str) -> bool:
    """Whether ``sql`` reads the definition ``name``, directly or through others (a whole word)."""
    return bool(readers(name) & set(re.findall(r"\w+", _strip_comments(sql))))


def share(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """Compute the SHARED_PER_RUN macro ``name`` for every run into a TEMP table and make the macro
    read it (every definition that calls the macro then reads the table): one computation per
    connection instead of one per query."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE {name}__all AS SELECT * FROM {name}(NULL)")
    con.execute(f"CREATE OR REPLACE TEMP MACRO {name}(run) AS TABLE "
                f"SELECT * FROM {name}__all WHERE run IS NULL OR run_id = run")
