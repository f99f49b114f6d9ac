"""Hostile environments and values: non-finite numbers of seconds, a closed or full stdout, a Latin-1
locale, a small memory or file limit, Ctrl-C at the first instant. Each is one line, never a traceback."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from scaletrace.cli import main


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e999"])
@pytest.mark.parametrize("args", [["sql", "SELECT 1", "--timeout"], ["query", "run_summary", "--timeout"],
                                  ["ingest", str(FIXTURES / "micro-2rank"), "--wait"]], ids=["sql", "query", "ingest"])
def test_a_number_of_seconds_must_be_finite(tmp_path, args, value):
    """nan compared with anything is false, so a range check let it through: --wait nan waited for
    ever and --timeout nan meant no limit. Refused before anything is opened: a usage error, exit 2."""
    db = tmp_path / "t.duckdb"
    result = CliRunner().invoke(main, [*args, value, "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert "--timeout" in result.output or "--wait" in result.output
    assert not db.exists()


@pytest.mark.parametrize("fact", ["world_size=abc", "parallel.tp=two", "scaling=sideways", "tp=2"])
def test_collect_checks_its_facts_before_the_job_starts(tmp_path, fact):
    """A bad --meta fact was found only when rank 0 wrote run.json after training, and then every fact
    was lost: it is one line and exit 1 before the command runs (the job's marker file never appears)."""
    import sys

    marker = tmp_path / "ran"
    result = CliRunner().invoke(main, ["collect", "--out", str(tmp_path / "run"), "--meta", "workload=w",
                                       "--meta", fact, "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"error: --meta {fact.split('=')[0]}") and result.output.count("\n") == 1
    assert not marker.exists() and not (tmp_path / "run").exists()
