"""Issue 21, items 10-19: hangs, escapes, resources and one-liners through the CLI (README, "Robustness")."""

from __future__ import annotations

import signal
import sys

import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from scaletrace.cli import main


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV, signal.SIGTERM])
def test_collect_passes_a_signal_through_as_a_shell_does(tmp_path, sig):
    # a shell reports a child killed by signal N as 128 + N (SIGKILL 137, SIGSEGV 139, SIGTERM 143)
    command = [sys.executable, "-c", f"import os; os.kill(os.getpid(), {int(sig)})"]
    result = CliRunner().invoke(main, ["collect", "--out", str(tmp_path / "run"), "--", *command])
    assert result.exit_code == 128 + sig, result.output


def _scaletrace(*args, env=None, **kw):
    import os
    import subprocess

    return subprocess.run([sys.executable, "-m", "scaletrace.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120, **kw)


@pytest.mark.parametrize("command", [["query", "run_summary"], ["sql", "SELECT 1"], ["report", "-o", "r.html"],
                                     ["ingest", str(FIXTURES / "micro-overlap")], ["export", "--parquet", "pq"]])
def test_a_sqlite_db_is_one_line_and_no_extension_is_installed(tmp_path, command):
    import sqlite3

    db = tmp_path / "other.db"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE t (a)")
    before = db.read_bytes()
    result = _scaletrace(*command, "--db", str(db), env={"HOME": str(tmp_path)}, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().count("\n") == 0 and "not a DuckDB file" in result.stderr, result.stderr
    assert not (tmp_path / ".duckdb").exists()  # DuckDB's extension directory: nothing installed or fetched
    assert db.read_bytes() == before



# The console entry point as pip writes it (`from scaletrace.cli import main; sys.exit(main())`), after
# a line that says the interpreter is up: before that, Python's own start-up (site, the editable
# install's finder) is out of scaletrace's reach.
ENTRY_POINT = ("import os, sys; sys.argv[0] = 'scaletrace'; os.write(1, b'up\\n'); "
               "from scaletrace.cli import main; sys.exit(main())")


def _interrupt_after(delay_s: float, *args):
    import os
    import subprocess
    import time

    proc = subprocess.Popen([sys.executable, "-c", ENTRY_POINT, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"})
    assert proc.stdout.readline() == "up\n"
    time.sleep(delay_s)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


@pytest.mark.parametrize("delay_s", [0.01, 0.02, 0.03, 0.06, 0.1, 0.15, 0.25, 0.4])
def test_ctrl_c_at_start_up_is_one_line_and_130(tmp_path, delay_s):
    rc, _, err = _interrupt_after(delay_s, "ingest", str(FIXTURES), "--db", str(tmp_path / "t.duckdb"))
    assert rc == 130, err
    assert err.count("\n") == 1 and err.startswith("interrupted"), err
