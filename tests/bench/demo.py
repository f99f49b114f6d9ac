"""Where `make demo`'s time goes: each run of the demo sweep, the ingest, the report (a script, not a test).

    .venv/bin/python tests/bench/demo.py [--launcher warm|launch|torchrun ...] [--out DIR]

Runs collectors/demo_sweep.toml as `make demo` does (each run, then its
ingest, then the report with PNGs), into a temporary directory, with one or
more launchers in turn, in the same period: ``warm`` (as the sweep does now:
one launcher process imports torch once for the whole sweep and forks each
run's ranks), ``launch`` (collectors/launch.py started once per run: torch
imported once per run) or ``torchrun`` (torch imported in each rank and in
torchrun).  Default: ``launch`` then ``warm``.  Per run: wall seconds and
CPU seconds (the run's processes, user + system; under ``warm`` not counting
the warm launcher's one import, which the sweep's total counts); CPU seconds
hardly change with the machine's load, wall seconds do.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

TORCHRUN = ["torchrun", "--standalone", "--nproc-per-node", "{world_size}"]


def cpu() -> float:
    """CPU seconds of this process and of its children waited for (a run's ranks, ingest's workers)."""
    both = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return sum(u.ru_utime + u.ru_stime for u in both)


def timed(fn):
    wall, start = time.perf_counter(), cpu()
    result = fn()
    return result, time.perf_counter() - wall, cpu() - start


def demo(launcher: str, out: Path) -> None:
    from scaletrace.collectors import sweep as sweeps
    from scaletrace.pipeline.execute.ingest import ingest
    from scaletrace.reports import build_report

    spec = sweeps.load(Path(__file__).resolve().parents[2] / "collectors" / "demo_sweep.toml")
    spec.out_dir = out / "runs"
    if launcher == "torchrun":
        spec.launcher = TORCHRUN
    runs, db, totals = sweeps.plan(spec), out / "demo.duckdb", [0.0, 0.0, 0.0, 0.0]
    warm, warm_cpu = (sweeps.warm_launcher(runs) if launcher == "warm" else None), []
    if warm is not None:
        inner = warm.run

        def counted(*args, **kwargs):  # the run's CPU, as the warm launcher measured it
            status, used = inner(*args, **kwargs)
            warm_cpu.append(used)
            return status, used
        warm.run = counted
    print(f"-- launcher: {launcher}")
    sweep_wall, sweep_cpu = time.perf_counter(), cpu()
    for run in runs:
        result, wall, used = timed(lambda: sweeps.execute(run, spec.timeout_s, warm))
        used = warm_cpu[-1] if warm is not None else used
        _, ingest_wall, ingest_cpu = timed(lambda: ingest([run.run_dir], db))
        totals = [t + x for t, x in zip(totals, (wall, used, ingest_wall, ingest_cpu))]
        print(f"{run.run_id:<22} {result.status:<5} {wall:6.1f} s wall {used:6.1f} s CPU   "
              f"ingest {ingest_wall:4.1f} s wall {ingest_cpu:4.1f} s CPU", flush=True)
    if warm is not None:
        warm.close()  # its CPU (the one import, and every run's) is counted once it has exited
    print(f"{'runs':<28} {totals[0]:6.1f} s wall {totals[1]:6.1f} s CPU   "
          f"ingest {totals[2]:4.1f} s wall {totals[3]:4.1f} s CPU")
    print(f"{'sweep (runs + ingests)':<28} {time.perf_counter() - sweep_wall:6.1f} s wall "
          f"{cpu() - sweep_cpu:6.1f} s CPU")
    report, wall, used = timed(lambda: build_report(db, out / "report.html", png_dir=out / "png"))
    print(f"{'report':<28} {wall:6.1f} s wall {used:6.1f} s CPU   ({len(report.charts)} charts, "
          f"{len(report.images)} PNGs)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launcher", choices=("warm", "launch", "torchrun"), nargs="+", default=["launch", "warm"])
    parser.add_argument("--out", type=Path, default=None, help="keep the runs here (default: a temporary dir)")
    cli = parser.parse_args()
    launchers = cli.launcher
    with tempfile.TemporaryDirectory() as tmp:
        for launcher in launchers:
            demo(launcher, (cli.out or Path(tmp)) / launcher)


if __name__ == "__main__":
    main()
