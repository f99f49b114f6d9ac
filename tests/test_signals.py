"""Signals through the command line: `collect -- CMD` exits as a shell would for CMD, and an ingest
stopped by SIGINT or SIGTERM at its parse, write or commit is one line, 130 / 143, leaves nothing
half-written and is finished by the next ingest (docs/robustness.md, "Signals")."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time

import pytest

SCALETRACE = [sys.executable, "-m", "scaletrace.cli"]

# --- `scaletrace collect -- CMD` ------------------------------------------------------------------

DIES_OF = {  # each dies of its signal, as a training job does
    signal.SIGTERM: "import os, signal; os.kill(os.getpid(), signal.SIGTERM)",
    signal.SIGKILL: "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
    signal.SIGSEGV: "import ctypes; ctypes.string_at(0)",  # a real invalid read, not a sent signal
}


def _shell_status(command: list[str]) -> int:
    """The status bash reports for ``command`` (its `$?`)."""
    script = f"{shlex.join(command)}; echo $?"
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60).stdout
    return int(out.split()[-1])


@pytest.mark.parametrize("sig", list(DIES_OF), ids=lambda s: s.name)
def test_collect_exits_as_a_shell_reports_the_job(tmp_path, sig):
    command = [sys.executable, "-c", DIES_OF[sig]]
    expected = _shell_status(command)
    assert expected == 128 + sig  # bash's rule for a job a signal ended: what the wrapper must match
    result = subprocess.run([*SCALETRACE, "collect", "--out", str(tmp_path / "run"), "--", *command],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == expected, result.stderr
    # and a shell running the wrapper sees the same $? as for the job itself
    assert _shell_status([*SCALETRACE, "collect", "--out", str(tmp_path / "run"), "--", *command]) == expected


CLEANS_UP = """
import signal, sys, time
def stop(signum, frame):
    time.sleep(0.3)  # the job's own clean-up takes a while
    print("cleaned up", flush=True)
    sys.exit(3)
signal.signal(signal.SIGINT, stop)
print("ready", flush=True)
time.sleep(60)
"""


def _ctrl_c(command: list[str]) -> tuple[int, str]:
    """Run ``command`` in a process group of its own, press Ctrl-C (SIGINT to the group) once the
    job says ready; (exit status, stdout)."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, out


@pytest.mark.parametrize("handles_ctrl_c", [True, False], ids=["job-cleans-up", "job-dies-of-it"])
def test_ctrl_c_is_the_jobs_and_collect_exits_with_its_status(tmp_path, handles_ctrl_c):
    """Ctrl-C reaches the whole foreground group: the job decides.  The wrapper used to kill the
    job (SIGKILL, its clean-up cut short) and exit 130 with `interrupted`."""
    script = CLEANS_UP if handles_ctrl_c else "import time; print('ready', flush=True); time.sleep(60)"
    job = [sys.executable, "-c", script]
    alone_code, alone_out = _ctrl_c(job)
    alone_status = 128 - alone_code if alone_code < 0 else alone_code  # as a shell reports it
    assert alone_status == (3 if handles_ctrl_c else 128 + signal.SIGINT)  # sys.exit(3); Python's re-raised SIGINT
    wrapped_status, wrapped_out = _ctrl_c([*SCALETRACE, "collect", "--out", str(tmp_path / "run"), "--", *job])
    assert wrapped_status == alone_status
    assert wrapped_out == alone_out  # the job's clean-up ran to its end
