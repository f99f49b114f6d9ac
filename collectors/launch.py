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

``--serve`` keeps one such process warm for many launches (a sweep's runs):
it imports the preloads once, then reads one JSON request per line on stdin
and runs each launch in a child forked for it (:class:`WarmLauncher` is the
other end; see :func:`serve`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import runpy
import signal
import socket
import subprocess
import sys
import time
import traceback

MODULE = "scaletrace.collectors.launch"


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


def launcher_args(argv: list[str]) -> list[str] | None:
    """The launcher's arguments when ``argv`` is ``PYTHON -m scaletrace.collectors.launch ARGS...``, else None."""
    return list(argv[3:]) if len(argv) >= 3 and argv[1:3] == ["-m", MODULE] else None


def preloads(args: list[str]) -> list[str]:
    """The ``--preload`` modules named in the launcher arguments ``args`` (none if they cannot be read)."""
    own, _, _ = _split(args)
    named = [own[i + 1] for i, word in enumerate(own[:-1]) if word == "--preload"]
    return [m.strip() for value in named for m in value.split(",") if m.strip()]


def _import_quietly(names: list[str]) -> None:
    """The server's preload: a module that cannot be imported is left to the launch that names it
    (its ``main`` reports it in that launch's log and fails it)."""
    for name in names:
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - any import failure is the launch's to report
            pass


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _launch_in_child(request: dict, replies) -> None:
    """In the child forked for one launch: its cwd, environment and log, then :func:`main`; ends
    with the launch's exit status.  The ranks it forks leave through here as a normal exit."""
    me, code = os.getpid(), 1
    try:
        _die_with_parent()
        replies.close()  # the ranks must not hold the server's reply pipe
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        null = os.open(os.devnull, os.O_RDONLY)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(null, 0)  # stdin is the server's request pipe
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)
        code = main(request["argv"])
    except SystemExit as exc:
        if os.getpid() != me:
            raise
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    except BaseException:
        if os.getpid() != me:
            raise
        traceback.print_exc()
    finally:
        if os.getpid() == me:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)


def _wait_until(pid: int, timeout_s: float) -> int | None:
    """``pid``'s exit status; None if it ran past ``timeout_s`` (then it is killed, and its ranks with it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.05)


def serve(preload: str) -> int:
    """``--serve``: import ``preload`` once, then for each line on stdin, a JSON request
    ``{"argv": [launcher arguments], "cwd", "env", "log", "timeout_s"}``, fork a child that runs
    :func:`main` on ``argv`` there (output to ``log``), and answer one JSON line
    ``{"status": exit status, or null when it ran past timeout_s and was killed, "cpu_s": CPU
    seconds of the launch's processes}``.  Launches run one at a time; each starts from the state
    after the preload, never from an earlier launch's.  Exits at the end of stdin, or when the
    process that started it dies."""
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # what an import prints must not mix with the replies
    _die_with_parent()
    _import_quietly([m.strip() for m in preload.split(",") if m.strip()])
    for line in sys.stdin:
        request = json.loads(line)
        before = _children_cpu()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _launch_in_child(request, replies)
        status = _wait_until(pid, request["timeout_s"])
        replies.write(json.dumps({"status": status, "cpu_s": round(_children_cpu() - before, 3)}) + "\n")
    return 0


class WarmLauncher:
    """The sweep's end of ``--serve``: one server started with ``python`` (the interpreter the
    launches name) and the environment ``env``, importing ``preload`` once; :meth:`run` launches
    through it, starting a new server if the last one died."""

    def __init__(self, python: str, preload: list[str], env: dict[str, str]):
        self.command = [python, "-m", MODULE, "--serve", "--preload", ",".join(preload)]
        self.env = env
        self.proc: subprocess.Popen | None = None

    def run(self, args: list[str], log: str, timeout_s: float, cwd: str | None = None,
            env: dict[str, str] | None = None) -> tuple[int | None, float]:
        """(exit status or None when timed out, CPU seconds) of the launch ``args`` (launcher
        arguments), its output in ``log``.  OSError when the server cannot be started or dies."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, env=self.env, text=True)
        request = {"argv": list(args), "log": str(log), "timeout_s": timeout_s,
                   "cwd": cwd or os.getcwd(), "env": dict(os.environ if env is None else env)}
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except OSError:
            line = ""
        if not line:
            self.close()
            raise OSError("the warm launcher exited")
        reply = json.loads(line)
        return reply["status"], reply["cpu_s"]

    def close(self) -> None:
        """End the server (it exits at the end of its input)."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _cli(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--serve"]:
        serve(preload=",".join(preloads(argv[1:])))
        return 0
    return main(argv)


if __name__ == "__main__":
    sys.exit(_cli())
