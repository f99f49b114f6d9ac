"""Helpers of the hostile-input tests (issue 11): the CLI in a subprocess under a memory cap or
without root's permission override, and the processes of a process tree."""

from __future__ import annotations

import ctypes
import os
import resource
import subprocess
import sys
from pathlib import Path

SCALETRACE = [sys.executable, "-m", "scaletrace.cli"]
PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2


def _limits(memory_bytes: int | None, as_user: bool):
    def apply() -> None:
        if memory_bytes:  # private writable memory (heap, anonymous maps): the process's real appetite
            resource.setrlimit(resource.RLIMIT_DATA, (memory_bytes, memory_bytes))
        if as_user and os.geteuid() == 0:  # root reads everything: drop that, so file modes apply
            libc = ctypes.CDLL(None, use_errno=True)
            for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
                if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                    raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
    return apply


def cli(*args, memory_bytes: int | None = None, as_user: bool = False, timeout: float = 120,
        cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``scaletrace ARGS`` in a subprocess; ``memory_bytes`` caps its data memory (RLIMIT_DATA),
    ``as_user`` makes file permissions apply even when the tests run as root."""
    return subprocess.run([*SCALETRACE, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          preexec_fn=_limits(memory_bytes, as_user), cwd=cwd)


def children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]
