"""`scaletrace collect -- CMD`: run a command with the zero-code collector (no torch import here)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import scaletrace
from scaletrace import collectors

BOOT_DIR = Path(collectors.__file__).resolve().parent / "_boot"


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
    return exit_status(subprocess.call(command, env=collect_env(out_dir, run_id, steps, meta)))


def exit_status(returncode: int) -> int:
    """``subprocess``'s return code as a shell's exit status: -N (killed by signal N) is 128 + N
    (``sys.exit(-9)`` would exit 247)."""
    return 128 - returncode if returncode < 0 else returncode
