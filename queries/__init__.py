"""The SQL query files of scaletrace and their loader.

Each ``*.sql`` file here (not ``macros.sql``) is one metric.  Its header is a
block of ``--`` comments::

    -- name: rank_breakdown
    -- description: one line shown by `scaletrace query --list`
    -- grain: one row per run × rank
    -- param: run_id  optional; a run_id, or NULL for every run
    -- (free text: definition, units)

Parameters are named (``$run_id``).  The loader refuses a query whose
declared and used parameters differ, so a file cannot silently ignore one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

QUERY_DIR = Path(__file__).parent
_PARAM_RE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
NOT_QUERIES = {"macros", "reference"}


class QueryError(ValueError):
    """An unknown query, a malformed query file or bad parameters."""


@dataclass(frozen=True)
class Query:
    name: str
    description: str
    grain: str
    params: dict[str, str]  # name -> description
    sql: str
    header: str


def _strip_comments(sql: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in sql.splitlines())


def parse(text: str, path: Path) -> Query:
    header_lines = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        header_lines.append(line[2:].strip())
    fields: dict[str, str] = {}
    params: dict[str, str] = {}
    for line in header_lines:
        key, _, value = line.partition(":")
        if key == "param":
            pname, _, pdesc = value.strip().partition(" ")
            params[pname] = pdesc.strip()
        elif key in ("name", "description", "grain"):
            fields[key] = value.strip()
    if fields.get("name") != path.stem or "description" not in fields:
        raise QueryError(f"{path}: header needs '-- name: {path.stem}' and '-- description: ...'")
    used = set(_PARAM_RE.findall(_strip_comments(text)))
    if used != set(params):
        raise QueryError(f"{path}: declared parameters {sorted(params)} differ from used {sorted(used)}")
    return Query(path.stem, fields["description"], fields.get("grain", ""), params, text,
                 "\n".join(header_lines))


def names() -> list[str]:
    return sorted(p.stem for p in QUERY_DIR.glob("*.sql") if p.stem not in NOT_QUERIES)


def load(name: str) -> Query:
    path = QUERY_DIR / f"{name}.sql"
    if name in NOT_QUERIES or not path.is_file():
        raise QueryError(f"unknown query '{name}'; known: {', '.join(names())}")
    return parse(path.read_text(), path)


def bind(query: Query, given: dict[str, object]) -> dict[str, object]:
    """Parameters for DuckDB: unknown names are an error, missing ones are NULL."""
    unknown = set(given) - set(query.params)
    if unknown:
        raise QueryError(f"query '{query.name}' has no parameter {', '.join(sorted(unknown))}; "
                         f"it takes: {', '.join(query.params) or 'none'}")
    return {p: given.get(p) for p in query.params}
