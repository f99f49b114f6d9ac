"""Issue 21, items 10-19: hangs, escapes, resources and one-liners through the CLI (README, "Robustness")."""

from __future__ import annotations

import signal
import sys

import pytest
from click.testing import CliRunner

from scaletrace.cli import main


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV, signal.SIGTERM])
def test_collect_passes_a_signal_through_as_a_shell_does(tmp_path, sig):
    # a shell reports a child killed by signal N as 128 + N (SIGKILL 137, SIGSEGV 139, SIGTERM 143)
    command = [sys.executable, "-c", f"import os; os.kill(os.getpid(), {int(sig)})"]
    result = CliRunner().invoke(main, ["collect", "--out", str(tmp_path / "run"), "--", *command])
    assert result.exit_code == 128 + sig, result.output
