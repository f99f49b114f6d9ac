"""`scaletrace collect -- CMD`: run a command with the zero-code collector (no torch import here).

While the job runs, the wrapper stands where a shell would (docs/collecting.md, "Exit status and
signals"): it exits with the job's status as a shell reports it, and Ctrl-C and Ctrl-\\ are the
job's to handle (the terminal sends them to the whole foreground process group, the job
included): the wrapper waits for the job instead of killing it (``subprocess.call`` kills the
child with SIGKILL on KeyboardInterrupt, cutting its clean-up short and losing its status).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import scaletrace
from scaletrace import collectors

BOOT_DIR = Path(collectors.__file__).resolve().parent / "_boot"
THE_JOBS = (signal.SIGINT, signal.SIGQUIT)  # the terminal's: the job gets them from the terminal itself


def _import_root() -> Path | None:
    """The directory to put on the job's PYTHONPATH so that it can ``import scaletrace``: the one
    holding the installed ``scaletrace`` package (site-packages of a wheel install).  None for an
    editable install (the package is the source tree, found through the environment's .pth file;
    adding the tree's parent would expose its unrelated folders as importable names)."""
    package = Path(scaletrace.__file__).resolve().parent
    return package.parent if package.name == "scaletrace" else None


def collect_env(out_dir: Path, run_id: str | None, steps: str, meta: dict) -> dict:
    env = dict(os.environ)
    env["SCALETRACE_COLLECT_OUT"] = str(out_dir.resolve())
    env["SCALETRACE_STEPS"] = steps
    env["SCALETRACE_META"] = json.dumps(meta)
    if run_id:
        env["SCALETRACE_RUN_ID"] = run_id
    root = _import_root()
    paths = [str(BOOT_DIR), str(root) if root else "", env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


def run(command: list[str], out_dir: Path, run_id: str | None, steps: str, meta: dict) -> int:
    """Run ``command`` profiled; returns its exit status as a shell reports it: unchanged, or
    128 + N when a signal N ended it (SIGKILL 137, SIGSEGV 139, SIGTERM 143)."""
    collectors.ProfileConfig.parse_steps(steps)  # a bad --steps is a usage error before launching
    env = collect_env(out_dir, run_id, steps, meta)
    with _terminal_signals_are_the_jobs(), subprocess.Popen(command, env=env) as job:
        return exit_status(job.wait())


@contextmanager
def _terminal_signals_are_the_jobs() -> Iterator[None]:
    """While the job runs, Ctrl-C and Ctrl-\\ do nothing to the wrapper (main thread only: the
    only one that can install handlers).  A Python handler, never SIG_IGN: exec resets a handler
    to the default in the job, an ignored signal would stay ignored there."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _theirs) for sig in THE_JOBS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _theirs(signum, frame) -> None:
    """The job's signal: the wrapper waits for the job's status."""


def exit_status(returncode: int) -> int:
    """``subprocess``'s return code as a shell's exit status: -N (killed by signal N) is 128 + N
    (``sys.exit(-9)`` would exit 247)."""
    return 128 - returncode if returncode < 0 else returncode
