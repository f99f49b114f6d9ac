"""The CLI through click's CliRunner: help, formats, exit codes."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from scaletrace.cli import main

COMMANDS = sorted(main.commands)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_an_example(command):
    result = CliRunner().invoke(main, [command, "-h"])
    assert result.exit_code == 0
    assert "Example:" in result.output and f"scaletrace {command}" in result.output


def test_query_list_names_every_query_with_a_description():
    out = CliRunner().invoke(main, ["query", "--list"]).output
    for name in ("rank_breakdown", "rank_step_breakdown", "hta_temporal_breakdown", "hta_comm_comp_overlap"):
        line = next(line for line in out.splitlines() if line.startswith(name))
        assert len(line.split(None, 1)[1]) > 20


def test_query_formats(fixtures_db):
    args = ["query", "rank_breakdown", "--db", str(fixtures_db), "-p", "run_id", "micro-2rank"]
    rows = json.loads(CliRunner().invoke(main, args + ["--format", "json"]).output)
    assert isinstance(rows, list) and {r["rank"] for r in rows} == {0, 1}
    assert rows[0]["run_id"] == "micro-2rank" and "exposed_comm_ns" in rows[0]
    csv = CliRunner().invoke(main, args + ["--format", "csv"]).output.splitlines()
    assert csv[0].startswith("run_id,rank,span_ns") and len(csv) == 3
    table = CliRunner().invoke(main, args).output
    assert "micro-2rank" in table and "exposed_comm_ns" in table


def test_sql_is_read_only(fixtures_db):
    result = CliRunner().invoke(main, ["sql", "DELETE FROM traces", "--db", str(fixtures_db)])
    assert result.exit_code == 1 and "read-only" in result.stderr.lower()
    count = CliRunner().invoke(main, ["sql", "SELECT count(*) AS n FROM traces", "--db", str(fixtures_db),
                                      "--format", "json"])
    assert json.loads(count.output)[0]["n"] == 4


def test_user_mistakes_exit_1_without_traceback(fixtures_db, tmp_path):
    cases = [
        ["query", "no_such_query", "--db", str(fixtures_db)],
        ["query", "rank_breakdown", "--db", str(fixtures_db), "-p", "bogus", "1"],
        ["query", "rank_breakdown", "--db", str(tmp_path / "missing.duckdb")],
        ["sql", "SELEC nonsense", "--db", str(fixtures_db)],
    ]
    for args in cases:
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1, (args, result.output)
        assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1
        assert "Traceback" not in result.output


def test_usage_errors_exit_2():
    assert CliRunner().invoke(main, ["query"]).exit_code == 2
    assert CliRunner().invoke(main, ["ingest"]).exit_code == 2
    assert CliRunner().invoke(main, ["query", "rank_breakdown", "--format", "xml"]).exit_code == 2


def test_table_output_shows_trace_names_literally(tmp_path):
    from conftest import kernel, write_trace

    name = "[bold red]evil[/] [/nope] <b>x</b>"
    write_trace(tmp_path / "run" / "rank0.json", [kernel(name, 0, 10)], rank=0)
    db = tmp_path / "t.duckdb"
    assert CliRunner().invoke(main, ["ingest", str(tmp_path / "run"), "--db", str(db), "-q"]).exit_code == 0
    result = CliRunner().invoke(main, ["sql", "SELECT name FROM device_events", "--db", str(db)])
    assert result.exit_code == 0 and name in result.output


def test_messages_show_paths_literally(tmp_path):
    from conftest import kernel, write_trace

    odd = tmp_path / "runs[/bold]x"
    write_trace(odd / "run" / "rank0.json", [kernel("gemm", 0, 10)], rank=0)
    db = odd / "t.duckdb"
    result = CliRunner().invoke(main, ["ingest", str(odd / "run"), "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert f"1 ingested, 0 unchanged, 0 failed -> {db}" in result.stderr
