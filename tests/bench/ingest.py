"""Ingest benchmark: scaletrace vs HTA's TraceAnalysis load vs the decode floor, in one run.

Not a test (pytest does not collect tests/bench).  Usage:

    .venv/bin/python tests/bench/ingest.py [--copies 4] [--traces ../shared/traces]

Builds a trace set from the real traces HTA can load (each run folder copied
``--copies`` times as separate runs), then times, on the same files:

* HTA: ``TraceAnalysis(trace_dir=...)`` for every run folder (its own parse);
* floor: gunzip + msgspec decode of the fields scaletrace uses, nothing else,
  over the same process pool size scaletrace uses;
* scaletrace: ``scaletrace ingest`` into a fresh database (a subprocess, so its
  peak RSS, the largest of the main process and each worker, is measured).

Prints MB/s (uncompressed JSON), the ratios, and peak RSS against the largest
single file, for 1 copy and ``--copies`` copies: RSS should not grow with the
number of files.
"""

from __future__ import annotations

import argparse
import gzip
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from typing import Optional, Union  # noqa: E402

import msgspec  # noqa: E402

from scaletrace.pipeline.decode import Event  # noqa: E402  the exact typed event struct ingest decodes


class FloorDoc(msgspec.Struct):
    traceEvents: Optional[list[Event]] = None


FLOOR = msgspec.json.Decoder(Union[FloorDoc, list[Event]])

HTA_LOADABLE = ["hta-a100-2rank", "hta-mi250-rocm", "hta-ns-resolution", "hta-triton",
                "hta-ws128-sampled", "param-dlrm-8rank", "tracelens-b200"]


def build_set(src: Path, dest: Path, copies: int) -> list[Path]:
    runs = []
    for copy in range(copies):
        for name in HTA_LOADABLE:
            run = dest / f"{name}-copy{copy}"
            shutil.copytree(src / name, run)
            runs.append(run)
    return runs


def json_bytes(files: list[Path]) -> int:
    return sum(len(gzip.decompress(f.read_bytes())) for f in files)


def floor_one(path: str) -> int:
    data = gzip.decompress(Path(path).read_bytes())
    doc = FLOOR.decode(data)  # every event's fields, typed, in one call: nothing else
    return len(doc.traceEvents if isinstance(doc, FloorDoc) else doc)


def time_floor(files: list[Path], workers: int) -> float:
    start = time.perf_counter()
    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(floor_one, [str(f) for f in files]))
    return time.perf_counter() - start


def time_hta(runs: list[Path]) -> float:
    from hta.trace_analysis import TraceAnalysis
    logging.disable(logging.WARNING)
    start = time.perf_counter()
    for run in runs:
        TraceAnalysis(trace_dir=str(run))
    return time.perf_counter() - start


def time_scaletrace(paths: list[Path], db: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of the largest process of one ingest."""
    code = ("import resource, sys; from scaletrace import ingest; "
            "r = ingest(sys.argv[1:-1], db=sys.argv[-1]); "
            "assert not r.errors, [o.line() for o in r.errors]; "
            "print(max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
            "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))")
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code, *map(str, paths), str(db)], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    return time.perf_counter() - start, int(out.stdout.strip().splitlines()[-1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--traces", type=Path, default=ROOT.parent / "shared" / "traces")
    args = parser.parse_args()
    workers = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        runs = build_set(args.traces, tmp / "set", args.copies)
        files = sorted(p for r in runs for p in r.iterdir())
        largest = max(len(gzip.decompress(f.read_bytes())) for f in files) / 1e6
        mb = json_bytes(files) / 1e6
        print(f"machine: {os.uname().machine}, {workers} cores; python {sys.version.split()[0]}")
        print(f"set: {len(files)} traces in {len(runs)} runs, {mb:.1f} MB JSON "
              f"(largest file {largest:.1f} MB), {args.copies} copies of {len(HTA_LOADABLE)} real runs")
        t_hta = time_hta(runs)
        t_floor = time_floor(files, workers)
        t_ours, rss = time_scaletrace(runs, tmp / "bench.duckdb")
        one_copy = [r for r in runs if r.name.endswith("-copy0")]
        _, rss_one = time_scaletrace(one_copy, tmp / "one.duckdb")
        print(f"HTA TraceAnalysis load: {t_hta:7.2f} s  {mb / t_hta:7.1f} MB/s")
        print(f"decode floor:           {t_floor:7.2f} s  {mb / t_floor:7.1f} MB/s  ({workers} processes)")
        print(f"scaletrace ingest:      {t_ours:7.2f} s  {mb / t_ours:7.1f} MB/s  (incl. interpreter start)")
        print(f"speed-up vs HTA:        {t_hta / t_ours:7.1f} x   (target >= 10 x)")
        print(f"ratio to the floor:     {t_ours / t_floor:7.2f} x   (target <= 2 x)")
        print(f"peak RSS: {rss:.0f} MB with {len(files)} files, {rss_one:.0f} MB with {len(one_copy)} "
              f"(largest file {largest:.1f} MB JSON)")


if __name__ == "__main__":
    main()
