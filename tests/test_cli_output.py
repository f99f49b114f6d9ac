"""The CLI's output formats on results that arrive in several batches and on nested columns: a table
of a multi-batch `sql` result, and `--format csv` of every query (nested values as JSON, one per cell)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from scaletrace import queries
from scaletrace.cli import main
from scaletrace.pipeline import ingest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture(scope="module")
def micro_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("out") / "t.duckdb"
    assert not ingest([FIXTURES / "micro-2rank"], db=db, workers=1).errors
    return db


def test_a_table_of_a_result_in_several_batches(micro_db):
    """A UNION ALL arrives as one batch per side: the table holds both, in order (0, 1, 2, 0, 1, 2)."""
    result = CliRunner().invoke(main, ["sql", "SELECT * FROM range(3) UNION ALL SELECT * FROM range(3)",
                                       "--db", str(micro_db)])
    assert result.exit_code == 0, result.output
    cells = [line.strip("│ ") for line in result.output.splitlines() if line.startswith("│")]
    assert cells == ["0", "1", "2", "0", "1", "2"]  # the rows of both sides (the header is drawn with ┃)


def _rows(output: str, fmt: str) -> list[dict]:
    return json.loads(output) if fmt == "json" else list(csv.DictReader(io.StringIO(output, newline="")))


def test_every_query_writes_csv_and_nested_cells_are_their_json(micro_db):
    """Every query that runs without parameters writes CSV; a nested column's cell decodes (JSON) to the
    value --format json gives for it (critical_path_summary's by_rank, a list of structs, among them)."""
    nested_seen = set()
    for name in queries.names():
        runs = {fmt: CliRunner().invoke(main, ["query", name, "--db", str(micro_db), "--format", fmt])
                for fmt in ("json", "csv")}
        if runs["json"].exit_code != 0:  # a query that needs a parameter: not this test's subject
            continue
        assert runs["csv"].exit_code == 0, (name, runs["csv"].output)
        as_json, as_csv = (_rows(runs[f].stdout, f) for f in ("json", "csv"))
        assert len(as_csv) == len(as_json), name
        for j, c in zip(as_json, as_csv):
            for column, value in j.items():
                if isinstance(value, (list, dict)):
                    nested_seen.add((name, column))
                    assert json.loads(c[column]) == value, (name, column)
    assert ("critical_path_summary", "by_rank") in nested_seen


def test_sql_csv_writes_lists_and_structs_as_json(micro_db):
    """`sql` and `query` write nested values alike: '[1, 2]' and '{"a": 1, "b": ["x,y"]}' (the comma inside
    the string stays in its cell)."""
    result = CliRunner().invoke(main, ["sql", "SELECT [1, 2] AS l, {'a': 1, 'b': ['x,y']} AS s", "--db",
                                       str(micro_db), "--format", "csv"])
    assert result.exit_code == 0, result.output
    (row,) = list(csv.DictReader(io.StringIO(result.stdout, newline="")))
    assert json.loads(row["l"]) == [1, 2] and json.loads(row["s"]) == {"a": 1, "b": ["x,y"]}
