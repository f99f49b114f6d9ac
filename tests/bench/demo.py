"""Where `make demo`'s time goes: each run of the demo sweep, the ingest, the report (a script, not a test).

    .venv/bin/python tests/bench/demo.py [--launcher launch|torchrun|both] [--out DIR]

Runs collectors/demo_sweep.toml as `make demo` does (each run, then its
ingest, then the report with PNGs), into a temporary directory, with its own
launcher (collectors/launch.py: the ranks forked from one process that
imported torch once) or torchrun (torch imported in each rank and in
torchrun); ``both`` runs torchrun first, then the launcher, in the same
period.  Per run: wall seconds and CPU seconds (the run's processes, user +
system); CPU seconds hardly change with the machine's load, wall seconds do.
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
    db, totals = out / "demo.duckdb", [0.0, 0.0, 0.0, 0.0]
    print(f"-- launcher: {launcher}")
    for run in sweeps.plan(spec):
        result, wall, used = timed(lambda: sweeps.execute(run, spec.timeout_s))
        _, ingest_wall, ingest_cpu = timed(lambda: ingest([run.run_dir], db))
        totals = [t + x for t, x in zip(totals, (wall, used, ingest_wall, ingest_cpu))]
        print(f"{run.run_id:<22} {result.status:<5} {wall:6.1f} s wall {used:6.1f} s CPU   "
              f"ingest {ingest_wall:4.1f} s wall {ingest_cpu:4.1f} s CPU", flush=True)
    print(f"{'runs':<28} {totals[0]:6.1f} s wall {totals[1]:6.1f} s CPU   "
          f"ingest {totals[2]:4.1f} s wall {totals[3]:4.1f} s CPU")
    report, wall, used = timed(lambda: build_report(db, out / "report.html", png_dir=out / "png"))
    print(f"{'report':<28} {wall:6.1f} s wall {used:6.1f} s CPU   ({len(report.charts)} charts, "
          f"{len(report.images)} PNGs)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launcher", choices=("launch", "torchrun", "both"), default="both")
    parser.add_argument("--out", type=Path, default=None, help="keep the runs here (default: a temporary dir)")
    cli = parser.parse_args()
    launchers = ("torchrun", "launch") if cli.launcher == "both" else (cli.launcher,)
    with tempfile.TemporaryDirectory() as tmp:
        for launcher in launchers:
            demo(launcher, (cli.out or Path(tmp)) / launcher)


if __name__ == "__main__":
    main()
