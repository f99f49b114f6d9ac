"""Ray engine scaling: Parquet-dataset ingest throughput with 1 and 2 Ray nodes, in one run.

Not a test (pytest does not collect tests/bench).  Usage:

    .venv/bin/python tests/bench/ray_scaling.py [--copies 4] [--traces ../shared/traces]

Starts a real Ray cluster on this machine (tests/raycluster.py: a head of one CPU), ingests a
trace set (each real run folder copied ``--copies`` times; a generated sweep where the real
traces are absent) with ``--engine ray``, joins a second one-CPU node, ingests the same set into
a fresh dataset, and prints MB/s (uncompressed JSON) for both, their ratio, the local engine on
the same set for comparison, the driver's per-trace commit time, and the arithmetic of an
estimate for 1,000 ranks x 200 MB.
Each configuration is warmed up first (Ray starts a node's workers on its first tasks).
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT.parent))  # the scaletrace package is the repository root
sys.path.insert(0, str(ROOT / "tests"))

import ray  # noqa: E402

from raycluster import LocalCluster  # noqa: E402
from scaletrace.pipeline.execute.dataset import ingest_parquet  # noqa: E402
from scaletrace.pipeline.synth import sweep_specs, write_run  # noqa: E402

REAL_RUNS = ["hta-a100-2rank", "hta-mi250-rocm", "hta-ns-resolution", "hta-triton", "hta-ws128-sampled",
             "param-dlrm-8rank", "tracelens-b200"]


def build_set(src: Path, dest: Path, copies: int) -> list[Path]:
    if not src.is_dir():
        for spec in sweep_specs([64, 128], steps=4, kernels_per_step=200, tp=2, workload="bench"):
            write_run(dest, spec)
        return [dest]
    for copy in range(copies):
        for name in REAL_RUNS:
            shutil.copytree(src / name, dest / f"{name}-copy{copy}")
    return [dest]


def json_mb(root: Path) -> float:
    total = 0
    for f in root.rglob("*.json*"):
        if f.name == "run.json":
            continue
        data = f.read_bytes()
        total += len(gzip.decompress(data)) if data[:2] == b"\x1f\x8b" else len(data)
    return total / 1e6


def timed(paths, out: Path, **kwargs) -> float:
    start = time.perf_counter()
    report = ingest_parquet(paths, out, **kwargs)
    elapsed = time.perf_counter() - start
    assert not report.errors, [o.line() for o in report.errors][:3]
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--traces", type=Path, default=ROOT.parent / "shared" / "traces")
    args = parser.parse_args()
    warm = [ROOT / "fixtures" / "micro-2rank"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        paths = build_set(args.traces, tmp / "set", args.copies)
        mb = json_mb(tmp / "set")
        files = sum(1 for f in (tmp / "set").rglob("*.json*") if f.name != "run.json")
        print(f"machine: {os.cpu_count()} cores; set: {files} traces, {mb:.1f} MB JSON")
        t_local = timed(paths, tmp / "local", engine="local", workers=2)
        with LocalCluster(cpus=1) as cluster:
            ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
            timed(warm, tmp / "warm1", engine="ray")
            t1 = timed(paths, tmp / "one", engine="ray")
            cluster.add_node()
            deadline = time.monotonic() + 60
            while ray.cluster_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
                time.sleep(0.2)
            for i in range(4):  # tasks reach the new node's workers
                timed(warm, tmp / f"warm2-{i}", engine="ray")
            t2 = timed(paths, tmp / "two", engine="ray")
        per_worker = mb / t1
        commit_s = time_commit(tmp / "one")
        print(f"local engine, 2 processes:  {t_local:6.2f} s  {mb / t_local:6.1f} MB/s")
        print(f"ray, 1 node x 1 CPU:        {t1:6.2f} s  {mb / t1:6.1f} MB/s")
        print(f"ray, 2 nodes x 1 CPU:       {t2:6.2f} s  {mb / t2:6.1f} MB/s")
        print(f"2 nodes / 1 node:           {t1 / t2:6.2f} x  (this machine has 2 cores for both nodes' tasks, "
              "the driver, two raylets and the GCS)")
        print(f"driver: {commit_s * 1e3:.1f} ms to commit one trace (its record in traces/)")
        traces, total_mb = 1000, 1000 * 200
        print(f"\nestimate, {traces:,} ranks x 200 MB = {total_mb / 1e3:,.0f} GB of JSON: tasks are independent, so "
              f"time = max(MB / ({per_worker:.1f} MB/s per worker x workers), traces x {commit_s * 1e3:.1f} ms "
              "of driver commits)")
        for nodes, cores in ((1, 32), (8, 32), (32, 32), (128, 32)):
            parse = total_mb / (per_worker * nodes * cores)
            print(f"  {nodes:4d} nodes x {cores} cores: max({total_mb:,} / ({per_worker:.1f} x {nodes * cores}), "
                  f"{traces} x {commit_s:.4f}) = {max(parse, traces * commit_s) / 60:7.2f} min")


def time_commit(dataset: Path, repeat: int = 200) -> float:
    """Seconds the driver takes to write one trace's record (the per-trace serial work)."""
    from scaletrace.pipeline.execute.dataset import Dataset

    ds = Dataset(dataset)
    con = ds.load_state()
    row = con.sql("SELECT * FROM traces LIMIT 1").fetchall()[0]
    trace_id, path = row[0], row[1]
    start = time.perf_counter()
    for _ in range(repeat):
        ds.commit(con, type("T", (), {"path": path})(), trace_id)
    return (time.perf_counter() - start) / repeat

if __name__ == "__main__":
    main()
