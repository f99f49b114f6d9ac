"""Interval queries and the report at 1024 ranks (a script, not a test).

    .venv/bin/python tests/bench/queries.py [--ranks 1024] [--steps 20] [--kernels 20]

Generates a seeded trace set (pipeline/synth.py: a kernel mix, DP × TP
process groups, a straggler, clock offsets), ingests it, then times, in this
one run, each interval query against a full-scan aggregate over the same
device_events table (the cheapest query that reads every row), and the
report's generation time and HTML size.  Prints the ratios.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scaletrace.pipeline import connect, ingest  # noqa: E402
from scaletrace.pipeline.synth import SynthRun, write_run  # noqa: E402
from scaletrace.reports import build_report  # noqa: E402

FULL_SCAN = "SELECT trace_id, kind, count(*) AS n, sum(dur_ns) AS ns FROM device_events GROUP BY ALL"


def timed(fn, repeat=7) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--kernels", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        start = time.perf_counter()
        write_run(tmp / "traces", SynthRun("big", ranks=args.ranks, steps=args.steps, step_us=2000,
                                           compute_us=600, kernels_per_step=args.kernels, tp=8, tp_comm_us=40,
                                           straggler_rank=3, straggler_delay_us=150, clock_offset_us=7,
                                           workload="big", gzip=True))
        print(f"generated {args.ranks} ranks × {args.steps} steps in {time.perf_counter() - start:.1f} s")
        db = tmp / "big.duckdb"
        start = time.perf_counter()
        assert not ingest([tmp / "traces"], db=db).errors
        print(f"ingest: {time.perf_counter() - start:.1f} s")
        with connect(db) as d:
            events = d.sql("SELECT count(*) FROM device_events").item()
            print(f"device events: {events:,}")
            base = timed(lambda: d.sql(FULL_SCAN))
            print(f"full-scan aggregate: {base:.3f} s")
            for name in ("rank_breakdown", "rank_step_breakdown", "collective_skew", "rank_wait"):
                t = timed(lambda name=name: d.query(name))
                print(f"{name:22s} {t:7.3f} s   {t / base:6.1f} × the full scan (target <= 5 ×)")
        start = time.perf_counter()
        result = build_report(db, tmp / "report.html")
        print(f"report: {time.perf_counter() - start:.1f} s, {result.bytes / 1e6:.2f} MB, "
              f"{len(result.charts)} charts")


if __name__ == "__main__":
    main()
