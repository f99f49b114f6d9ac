"""CLI messages a user can act on (issue 20, item 8): one line, no traceback, exit 1 for bad input
and 2 for a usage error, and each says what to do (the known runs, `scaletrace ingest`)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from scaletrace.cli import main
from scaletrace.pipeline import ingest

from conftest import FIXTURES

MICRO_RUNS = ["micro-2021", "micro-2rank", "micro-cpu-gloo"]  # micro-2rank's run.json has workload 'micro'


def run(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    return result


def one_line(result, code: int = 1) -> str:
    assert result.exit_code == code, result.output
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr
    return result.stderr


def test_diff_with_an_unknown_run_lists_the_known_runs(fixtures_db):
    for args in (["nope", "micro-2rank"], ["micro-2rank", "nope"]):
        line = one_line(run("diff", *args, "--db", fixtures_db))
        assert "no run 'nope'" in line and all(r in line for r in MICRO_RUNS), line
        assert "Invalid Input Error" not in line and "run_a" not in line


@pytest.mark.parametrize("top", ["-3", "0"])
def test_diff_refuses_a_top_below_one(fixtures_db, top):
    result = run("diff", "micro-2rank", "micro-2021", "--db", fixtures_db, "--top", top)
    assert result.exit_code == 2 and "--top" in result.output, result.output


@pytest.mark.parametrize("target", [FIXTURES / "micro-2rank" / "rank0.json", FIXTURES / "micro-2021"])
@pytest.mark.parametrize("command", [["diff", "a", "b"], ["query", "run_summary"], ["report"], ["explain"]])
def test_db_naming_traces_says_ingest_them(target, command, tmp_path):
    line = one_line(run(*command, "--db", target, *(["-o", tmp_path / "r.html"] if command == ["report"] else [])))
    what = "a trace file" if target.is_file() else "a folder of traces"
    assert f"{target}: {what}, not a scaletrace database" in line, line
    assert f"scaletrace ingest {target} --db runs.duckdb" in line and "export" not in line, line


def test_db_naming_a_gzipped_trace_without_a_trace_name(tmp_path):
    import gzip

    odd = tmp_path / "trace.bin"
    odd.write_bytes(gzip.compress((FIXTURES / "micro-2rank" / "rank0.json").read_bytes()))
    assert "a trace file, not a scaletrace database" in one_line(run("query", "run_summary", "--db", odd))


@pytest.mark.parametrize("name", ["scaling", "layouts"])
def test_sweep_queries_name_the_runs_without_a_workload(fixtures_db, name):
    result = run("query", name, "--db", fixtures_db)
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1, result.stderr
    # micro-2rank has a workload; the other two do not
    assert "2 runs without a workload in run.json" in notes[0] and f"not in '{name}'" in notes[0]
    assert "micro-2021, micro-cpu-gloo" in notes[0] and "micro-2rank" not in notes[0]
    assert "--meta workload=NAME" in notes[0]


def test_project_on_many_unidentifiable_sweeps_is_a_summary(tmp_path):
    db = tmp_path / "many.duckdb"
    report = ingest(sorted(FIXTURES.glob("micro-*")) + [FIXTURES / "h200"], db=db, workers=1)
    assert not report.errors
    line = one_line(run("project", "--db", db))
    # 7 sweeps left out (2 runs without a workload, 5 sweeps of one GPU count): one summary line, not 7 reasons
    assert line.startswith("error: no sweep could be projected: 2 runs without a workload"), line
    assert line.count("projection not identifiable") == 0 and len(line) < 600, line
    assert "the model needs at least 3 measured GPU counts per sweep" in line
