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
