"""The SQL query files of scaletrace and their loader.

Each ``*.sql`` file here is one metric (the relations every query builds on,
table macros and reference tables, are one file each under ``macros/`` and
``reference/``: see ``definitions``).  Its header is a block of ``--`` comments::

    -- name: rank_breakdown
    -- description: one line shown by `scaletrace query --list`
    -- grain: one row per run × rank
    -- param: run_id VARCHAR optional; a run_id, or NULL for every run
    -- cpu_only: what to tell a user whose selected runs are CPU-only (optional)
    -- (free text: definition, units)

Parameters are named (``$run_id``) and typed (a key of ``PARAM_TYPES``); a
BIGINT may be followed by its allowed range, ``1..`` (at least 1) or ``0..100``
(``-- param: top_n BIGINT 1.. optional; rows per run``).  The loader refuses a
query whose declared and used parameters differ, so a file cannot silently
ignore one; ``bind`` converts the values (the CLI gives strings) and refuses
one that is not of the declared type or outside its range, in one sentence
that says what the parameter is and what it takes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

QUERY_DIR = Path(__file__).parent
_PARAM_RE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


class QueryError(ValueError):
    """An unknown query, a malformed query file or bad parameters."""


BIGINT_RANGE = (-(2**63), 2**63 - 1)  # what DuckDB's BIGINT holds (a wider value would bind as another type)


_RANGE_RE = re.compile(r"(-?\d+)?\.\.(-?\d+)?")  # a BIGINT parameter's range in its header: 1.. or 0..100


def _to_int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(value)
    return int(value)


def _to_str(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(value)
    return value


def _to_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(value)


# The parameter types a query header may declare: DuckDB type -> (words for errors, converter).
PARAM_TYPES = {
    "VARCHAR": ("a string", _to_str),
    "BIGINT": ("an integer", _to_int),
    "BOOLEAN": ("true or false", _to_bool),
}


@dataclass(frozen=True)
class Param:
    type: str  # a key of PARAM_TYPES
    description: str
    bounds: tuple[int, int] = BIGINT_RANGE  # a BIGINT's allowed values, both ends included

    def words(self) -> str:
        """What the parameter takes, as a user reads it (no SQL type names)."""
        if self.type == "BIGINT":
            return f"an integer from {self.bounds[0]} to {self.bounds[1]}"
        return PARAM_TYPES[self.type][0]

    def what(self) -> str:
        """The description without the ``optional;`` every parameter's starts with."""
        text = self.description
        return text.split(";", 1)[1].strip() if text.startswith("optional;") else text.strip()


@dataclass(frozen=True)
class Query:
    name: str
    description: str
    grain: str
    params: dict[str, Param]
    sql: str
    header: str
    cpu_only: str = ""  # said when the selected runs include CPU-only traces (e.g. the hta_* queries)


def _strip_comments(sql: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in sql.splitlines())


@dataclass(frozen=True)
class Header:
    """The leading ``--`` comment block of a SQL file: its lines, ``key: value`` fields, parameters."""

    lines: list[str]
    fields: dict[str, str]
    params: dict[str, Param]  # in the order declared


def read_header(text: str, path: Path, keys: tuple[str, ...]) -> Header:
    """The header of ``text``; ``keys`` are the single-valued fields to collect (``param`` lines always)."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line[2:].strip())
    fields: dict[str, str] = {}
    params: dict[str, Param] = {}
    for line in lines:
        key, _, value = line.partition(":")
        if key == "param":
            params.update(_param(value, path))
        elif key in keys:
            fields[key] = value.strip()
    if fields.get("name") != path.stem or "description" not in fields:
        raise QueryError(f"{path}: header needs '-- name: {path.stem}' and '-- description: ...'")
    return Header(lines, fields, params)


def _param(line: str, path: Path) -> dict[str, Param]:
    """One ``param:`` line: name, type, for a BIGINT optionally its range, then the description."""
    pname, ptype, pdesc = (line.split(None, 2) + ["", ""])[:3]
    if ptype not in PARAM_TYPES:
        raise QueryError(f"{path}: parameter '{pname}' needs a type after its name "
                         f"({', '.join(PARAM_TYPES)}), got '{ptype}'")
    first, _, rest = pdesc.partition(" ")
    bounds = _RANGE_RE.fullmatch(first)
    if not bounds:
        return {pname: Param(ptype, pdesc)}
    low, high = (BIGINT_RANGE[0] if bounds[1] is None else int(bounds[1]),
                 BIGINT_RANGE[1] if bounds[2] is None else int(bounds[2]))
    if ptype != "BIGINT" or not BIGINT_RANGE[0] <= low <= high <= BIGINT_RANGE[1]:
        raise QueryError(f"{path}: parameter '{pname}': a range ({first}) is for a BIGINT, within 64 bits, low..high")
    return {pname: Param(ptype, rest.strip(), (low, high))}


def parse(text: str, path: Path) -> Query:
    header = read_header(text, path, ("name", "description", "grain", "cpu_only"))
    used = set(_PARAM_RE.findall(_strip_comments(text)))
    if used != set(header.params):
        raise QueryError(f"{path}: declared parameters {sorted(header.params)} differ from used {sorted(used)}")
    fields = header.fields
    return Query(path.stem, fields["description"], fields.get("grain", ""), header.params, text,
                 "\n".join(header.lines), fields.get("cpu_only", ""))


def names() -> list[str]:
    return sorted(p.stem for p in QUERY_DIR.glob("*.sql"))


def load(name: str) -> Query:
    path = QUERY_DIR / f"{name}.sql"
    if not path.is_file():
        raise QueryError(f"unknown query '{name}'; known: {', '.join(names())}")
    return parse(path.read_text(), path)


def bind(query: Query, given: dict[str, object]) -> dict[str, object]:
    """Parameters for DuckDB: unknown names are an error, missing ones are NULL."""
    unknown = set(given) - set(query.params)
    if unknown:
        raise QueryError(f"query '{query.name}' has no parameter {', '.join(sorted(unknown))}; "
                         f"it takes: {', '.join(query.params) or 'none'}")
    return {p: _convert(query, p, given.get(p)) for p in query.params}


def _convert(query: Query, name: str, value: object) -> object:
    if value is None:
        return None
    param = query.params[name]
    try:
        converted = PARAM_TYPES[param.type][1](value)
        if param.type == "BIGINT" and not param.bounds[0] <= converted <= param.bounds[1]:
            raise ValueError(value)
        return converted
    except ValueError:
        what = f" — {param.what()} —" if param.what() else ""
        raise QueryError(f"parameter {name} of query '{query.name}'{what} wants {param.words()}, "
                         f"got {value!r}") from None
