"""`scaletrace sweep SWEEP.toml`: the same job over a matrix of runs, resumable.

A sweep file::

    workload = "demo-gpt"                  # run.json workload: the runs form one sweep
    out_dir = "runs/demo"                  # one directory per run below it
    run_id = "{workload}-{layout}-{world_size}"
    launcher = ["torchrun", "--standalone", "--nproc-per-node", "{world_size}"]
    command = ["-m", "scaletrace.collectors.demo", "--layout", "{layout}", "--out", "{run_dir}",
               "--run-id", "{run_id}", "--workload", "{workload}"]
    timeout_s = 600

    [matrix]                               # every combination is one run
    world_size = [1, 2, 4]
    layout = ["ddp", "fsdp", "tp", "fsdp_tp"]

    [[exclude]]                            # combinations to leave out
    layout = "fsdp_tp"
    world_size = 1

``{name}`` in ``run_id``, ``launcher`` and ``command`` is replaced by the
matrix value, ``{workload}``, ``{run_dir}`` or ``{run_id}``.  A run that exits
0 gets a ``.scaletrace-done`` marker and is skipped next time unless
``force``; a job that cannot run a combination writes its reason into
``{run_dir}/.scaletrace-not-applicable`` and exits 0 (torchrun turns other exit
codes into 1); any other exit is a failure, with the job's last error line
from ``launch.log`` as the reason.  When every run's launcher is scaletrace's own
(``python -m scaletrace.collectors.launch``), one launcher process is kept warm for
the whole sweep (:func:`warm_launcher`): the preloads are imported once per sweep.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from scaletrace.collectors import launch

DONE_MARKER = ".scaletrace-done"
# A job that cannot run this combination writes its reason here and exits 0.
NOT_APPLICABLE_MARKER = ".scaletrace-not-applicable"


@dataclass
class SweepSpec:
    workload: str
    out_dir: Path
    command: list[str]
    matrix: dict[str, list]
    launcher: list[str] = field(default_factory=lambda: ["torchrun", "--standalone", "--nproc-per-node", "{world_size}"])
    run_id: str = ""
    exclude: list[dict] = field(default_factory=list)
    timeout_s: float = 1800


@dataclass
class PlannedRun:
    run_id: str
    run_dir: Path
    params: dict
    argv: list[str]


@dataclass
class RunResult:
    run_id: str
    status: str  # done | skipped | not_applicable | failed
    seconds: float = 0.0
    message: str = ""


class SweepError(ValueError):
    """A sweep file that cannot be used; ``problems`` holds one line per mistake."""

    def __init__(self, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.problems = problems or [message]


# The sweep file's schema: key -> (what it must be, its check).  One place: load() checks every key
# against it and reports every mistake at once, one line each, before anything runs.
def _is_text(v) -> bool:
    return isinstance(v, str) and v.strip() != ""


def _is_text_list(v) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, str) for x in v)


def _is_scalar(v) -> bool:
    return isinstance(v, (str, int, float, bool))


def _is_timeout(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


SCHEMA: dict[str, tuple[str, Callable[[object], bool]]] = {
    "workload": ("a non-empty string", _is_text),
    "out_dir": ("a non-empty string (a directory, relative to the sweep file)", _is_text),
    "command": ('a non-empty list of strings, e.g. ["train.py", "--layout", "{layout}"]', _is_text_list),
    "matrix": ("a table of non-empty lists of strings or numbers, e.g. [matrix] world_size = [1, 2]",
               lambda v: isinstance(v, dict) and bool(v)),
    "launcher": ('a list of strings, e.g. ["torchrun", "--nproc-per-node", "{world_size}"] ([]: the command '
                 'runs as it is)', lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)),
    "run_id": ('a non-empty string, e.g. "{workload}-{world_size}"', _is_text),
    "exclude": ("a list of tables ([[exclude]]) of matrix names to values", lambda v: isinstance(v, list)),
    "timeout_s": ("a positive number of seconds", _is_timeout),
}
REQUIRED = ("workload", "out_dir", "command", "matrix")


def _kind(value) -> str:
    """The TOML kind of a value, for a mistake's line."""
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
             dict: "a table"}
    return next((n for t, n in names.items() if isinstance(value, t)), type(value).__name__)


def problems(data: dict) -> list[str]:
    """Every mistake of a sweep file's contents against SCHEMA, one line each (empty: usable)."""
    found = [f"missing key '{key}' ({SCHEMA[key][0]})" for key in REQUIRED if key not in data]
    for key, value in data.items():
        if key not in SCHEMA:
            found.append(f"unknown key '{key}' (known: {', '.join(SCHEMA)})")
        elif not SCHEMA[key][1](value):
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            found.append(f"'{key}' must be {SCHEMA[key][0]}, not {_kind(value)} {shown}")
    matrix = data.get("matrix")
    if isinstance(matrix, dict):
        for name, values in matrix.items():
            if not (isinstance(values, list) and values and all(_is_scalar(v) for v in values)):
                found.append(f"matrix '{name}' must be a non-empty list of strings or numbers, not "
                             f"{_kind(values)} {values!r}"[:300])
    exclude = data.get("exclude")
    if isinstance(exclude, list):
        for i, rule in enumerate(exclude, 1):
            if not isinstance(rule, dict) or not rule:
                found.append(f"exclude #{i} must be a table ([[exclude]]) of matrix names to values, not {_kind(rule)}")
                continue
            for name, value in rule.items():
                if isinstance(matrix, dict) and name not in matrix:
                    found.append(f"exclude #{i} names '{name}', which is not in [matrix] "
                                 f"({', '.join(matrix) or 'empty'})")
                elif not (_is_scalar(value) or (isinstance(value, list) and all(_is_scalar(v) for v in value))):
                    found.append(f"exclude #{i} '{name}' must be a value or a list of values, not {_kind(value)}")
    return found


def load(path: str | Path) -> SweepSpec:
    """The sweep file, checked whole against SCHEMA: every mistake is one line of the SweepError."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SweepError(f"{path}: {exc}") from None
    found = problems(data)
    if found:
        lines = [f"{path}: {problem}" for problem in found]
        raise SweepError(lines[0] if len(lines) == 1 else f"{path}: {len(lines)} mistakes", lines)
    base = path.parent
    spec = SweepSpec(workload=data["workload"], out_dir=(base / data["out_dir"]).resolve(),
                     command=list(data["command"]), matrix=data["matrix"],
                     exclude=list(data.get("exclude", [])), timeout_s=float(data.get("timeout_s", 1800)))
    if "launcher" in data:
        spec.launcher = list(data["launcher"])
    spec.run_id = data.get("run_id") or "{workload}-" + "-".join(f"{{{k}}}" for k in data["matrix"])
    return spec


def _excluded(params: dict, exclude: list[dict]) -> bool:
    def matches(rule: dict) -> bool:
        return all(params.get(k) in (v if isinstance(v, list) else [v]) for k, v in rule.items())
    return any(matches(rule) for rule in exclude)


def plan(spec: SweepSpec) -> list[PlannedRun]:
    keys = list(spec.matrix)
    runs = []
    for values in itertools.product(*(spec.matrix[k] for k in keys)):
        params = dict(zip(keys, values))
        if _excluded(params, spec.exclude):
            continue
        fill = {**params, "workload": spec.workload}
        try:
            run_id = spec.run_id.format(**fill)
            run_dir = spec.out_dir / run_id
            fill.update(run_id=run_id, run_dir=str(run_dir))
            argv = [part.format(**fill) for part in spec.launcher + spec.command]
        except KeyError as exc:
            raise SweepError(f"unknown placeholder {exc} (known: {', '.join(sorted(fill))})") from None
        except (IndexError, ValueError) as exc:  # "{0}", a lone "{": str.format's own words
            raise SweepError(f"a placeholder cannot be filled: {exc} (write {{{{ and }}}} for a literal brace)") from None
        runs.append(PlannedRun(run_id, run_dir, params, argv))
    return runs


def _resolve(argv: list[str]) -> list[str]:
    """torchrun / python from the running interpreter's environment when not on PATH."""
    bindir = Path(sys.executable).parent
    if argv and argv[0] in ("torchrun", "python") and (bindir / argv[0]).exists():
        return [str(bindir / argv[0])] + argv[1:]
    return argv


_LAUNCHER_NOISE = ("W1", "W0", "E1", "E0", "I1", "I0", "USDT", "*****", "Traceback", "File ", "[0]", "[1]",
                   "Failures:", "Root Cause", "time ", "host ", "rank ", "exitcode", "error_file", "traceback ",
                   "To enable traceback", "raise ", "return ", "torch.distributed.elastic")


def _reason(log: Path) -> str:
    """The most telling line of a failed run's log: the job's last error, not torchrun's summary."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    useful = [ln for ln in lines if not ln.startswith(_LAUNCHER_NOISE) and set(ln) - set("=-*")
              and "ChildFailedError" not in ln and "elastic" not in ln]
    errors = [ln for ln in useful if "rror" in ln]
    return ((errors or useful or lines or ["no output"])[-1])[:300]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}


def warm_launcher(runs: list[PlannedRun]) -> launch.WarmLauncher | None:
    """One launcher kept warm for the whole sweep when every run's launcher is scaletrace's
    (``python -m scaletrace.collectors.launch ...``, one interpreter): it imports the union of
    the runs' ``--preload`` modules once instead of once per run.  None otherwise."""
    pythons = {_resolve(r.argv)[0] for r in runs}
    args = [launch.launcher_args(r.argv) for r in runs]
    if not runs or len(pythons) != 1 or any(a is None for a in args):
        return None
    preload = list(dict.fromkeys(m for a in args for m in launch.preloads(a)))
    return launch.WarmLauncher(pythons.pop(), preload, _env())


def _call(run: PlannedRun, log: Path, timeout_s: float, warm: launch.WarmLauncher | None) -> int | None:
    """The run's exit status, None when it ran past ``timeout_s`` (then it is killed)."""
    if warm is not None:
        return warm.run(launch.launcher_args(run.argv), log, timeout_s, env=_env())[0]
    try:
        with log.open("w") as out:
            return subprocess.call(_resolve(run.argv), stdout=out, stderr=subprocess.STDOUT, env=_env(),
                                   timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None


def execute(run: PlannedRun, timeout_s: float, warm: launch.WarmLauncher | None = None) -> RunResult:
    """Run one planned run, through ``warm`` (see :func:`warm_launcher`) when given, else as its own process."""
    run.run_dir.mkdir(parents=True, exist_ok=True)
    log = run.run_dir / "launch.log"
    start = time.perf_counter()
    try:
        rc = _call(run, log, timeout_s, warm)
    except OSError as exc:
        return RunResult(run.run_id, "failed", time.perf_counter() - start, f"cannot launch: {exc}")
    if rc is None:
        return RunResult(run.run_id, "failed", time.perf_counter() - start, f"timed out after {timeout_s:.0f} s")
    seconds = time.perf_counter() - start
    if rc != 0:
        return RunResult(run.run_id, "failed", seconds, f"exit {rc}: {_reason(log)}")
    marker = run.run_dir / NOT_APPLICABLE_MARKER
    status = "not_applicable" if marker.exists() else "done"
    (run.run_dir / DONE_MARKER).write_text(json.dumps({"status": status, "argv": run.argv,
                                                       "seconds": round(seconds, 1)}) + "\n")
    return RunResult(run.run_id, status, seconds, marker.read_text().strip() if marker.exists() else "")


def plan_lines(runs: list[PlannedRun]) -> list[str]:
    """``--dry-run``: one line per run, the commands starting in one column."""
    width = max((len(r.run_id) for r in runs), default=0) + 1
    return [f"{r.run_id + ':':<{width}} {' '.join(r.argv)}" for r in runs]


STATUS_WIDTH = max(len(s) for s in ("done", "skipped", "not_applicable", "failed"))


def result_line(result: RunResult, id_width: int) -> str:
    """One progress line: status, run_id padded to ``id_width``, seconds, message; columns line up."""
    return (f"{result.status:>{STATUS_WIDTH}}  {result.run_id:<{id_width}}  {result.seconds:7.1f} s  "
            f"{result.message}").rstrip()


def run_sweep(spec: SweepSpec, force: bool = False,
              on_result: Callable[[PlannedRun, RunResult], None] | None = None,
              on_start: Callable[[PlannedRun], None] | None = None,
              ingest_db: str | Path | None = None) -> list[RunResult]:
    """Run every planned run (skipping finished ones unless ``force``); with ``ingest_db``, ingest
    each finished or skipped run into that database as it goes (ingest is idempotent), a failed
    ingest becoming the run's message.  ``on_result`` sees each result after its ingest."""
    runs = plan(spec)
    warm = warm_launcher(runs)  # started at the first run that is not skipped
    try:
        return _run_all(runs, spec.timeout_s, force, on_result, on_start, ingest_db, warm)
    finally:
        if warm is not None:
            warm.close()


def _run_all(runs, timeout_s, force, on_result, on_start, ingest_db, warm) -> list[RunResult]:
    results = []
    for run in runs:
        if (run.run_dir / DONE_MARKER).exists() and not force:
            result = RunResult(run.run_id, "skipped", 0.0, "finished earlier (use --force to rerun)")
        else:
            if on_start:
                on_start(run)
            result = execute(run, timeout_s, warm)
        if ingest_db is not None and result.status in ("done", "skipped"):
            from scaletrace.pipeline.execute.ingest import ingest  # only here: collecting needs no DuckDB

            report = ingest([run.run_dir], ingest_db)
            if report.errors:
                result.message = f"ingest: {report.errors[0].line()}"
        results.append(result)
        if on_result:
            on_result(run, result)
    return results
