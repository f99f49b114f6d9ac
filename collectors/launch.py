"""`python -m scaletrace.collectors.launch`: the ranks of one host, forked from one warm process.

    python -m scaletrace.collectors.launch --nproc 4 --preload torch.distributed.fsdp -m my.train --lr 3e-4
    python -m scaletrace.collectors.launch --nproc 2 train.py

Sets torchrun's variables (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` = 127.0.0.1, ``MASTER_PORT`` = a free
port) in each rank and runs the module or script as ``__main__`` there.  The
``--preload`` modules are imported once, before the fork, so N ranks cost one
``import torch`` instead of torchrun's N + 1 (seconds each on a small CPU
machine).  No rendezvous, restarts or multi-node: a single-host launcher for
short jobs such as the demo sweep; torchrun remains the general one.  Exit
status 0 when every rank exits 0; otherwise the remaining ranks are
terminated and the status is 1 (as torchrun).  Fork before any CUDA call:
preload modules that only import.
"""

from __future__ import annotations

import argparse
import os
import runpy
import signal
import socket
import sys


def parse_args(argv=None):
    """The launcher's own options, then ``-m MODULE ARGS...`` or ``SCRIPT ARGS...`` (passed on untouched)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="python -m scaletrace.collectors.launch",
                                description=__doc__.splitlines()[0],
                                usage="%(prog)s --nproc N [--preload MODULES] (-m MODULE | SCRIPT) [ARGS...]")
    p.add_argument("--nproc", type=int, required=True, help="ranks on this host (the world size)")
    p.add_argument("--preload", default="", help="modules to import once before forking, comma-separated")
    own, module, target = _split(argv)
    args = p.parse_args(own)
    if args.nproc < 1:
        p.error("--nproc must be at least 1")
    if module is None and not target:
        p.error("give a script or -m MODULE")
    args.module, args.target = module, target
    return args


def _split(argv: list[str]) -> tuple[list[str], str | None, list[str]]:
    """(launcher options, module or None, the target's argv): the first ``-m`` or first word that
    is not an option or an option's value ends the launcher's part."""
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "-m":
            return argv[:i], (argv[i + 1] if i + 1 < len(argv) else None), argv[i + 2:]
        if word in ("--nproc", "--preload"):
            i += 2
        elif word.startswith("-"):
            i += 1
        else:
            return argv[:i], None, argv[i:]
    return argv, None, []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank: int, world: int, port: int) -> dict[str, str]:
    """torchrun's variables for one rank of a single-host world."""
    return {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(world), "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port)}


def _die_with_parent() -> None:
    """Linux: the kernel kills this rank if the launcher dies (a sweep's timeout kills the launcher)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _run_rank(args, env: dict[str, str]) -> None:
    """In the forked child: become the rank and run the target as __main__; never returns."""
    _die_with_parent()
    os.environ.update(env)
    if args.module:
        sys.argv = [args.module, *args.target]
        runpy.run_module(args.module, run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(args.target)
        sys.path.insert(0, os.path.dirname(os.path.abspath(args.target[0])))
        runpy.run_path(args.target[0], run_name="__main__")
    raise SystemExit(0)  # SystemExit from the target (or this) ends the child as a normal exit


def _wait_all(pids: list[int]) -> int:
    """Wait for every rank; on the first failure terminate the others.  0, or 1 if any failed."""
    failed, live = False, set(pids)
    while live:
        pid, status = os.wait()
        if pid not in live:
            continue
        live.discard(pid)
        if os.waitstatus_to_exitcode(status) != 0 and not failed:
            failed = True
            for other in live:
                try:
                    os.kill(other, signal.SIGTERM)
                except ProcessLookupError:
                    pass
    return 1 if failed else 0


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # as torchrun: one thread per rank unless told
    for name in filter(None, (m.strip() for m in args.preload.split(","))):
        try:
            __import__(name)
        except ImportError as exc:
            print(f"launch: cannot preload {name}: {exc}", file=sys.stderr)
            return 1
    port = free_port()
    sys.stdout.flush()
    sys.stderr.flush()
    pids = []
    for rank in range(args.nproc):
        pid = os.fork()
        if pid == 0:
            _run_rank(args, rank_env(rank, args.nproc, port))
        pids.append(pid)
    return _wait_all(pids)


if __name__ == "__main__":
    sys.exit(main())
