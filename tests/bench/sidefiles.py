"""Ingest speed of the collector's step and power logs (a script, not a test).

    .venv/bin/python tests/bench/sidefiles.py [--steps 200000] [--samples 200000]

Writes one rank's ``rank0.steps.jsonl`` (``--steps`` records, ~100 bytes each: 200,000 is
~20 MB) and ``rank0.power.jsonl`` beside a tiny trace, ingests the run into a new database and
prints the time and rate of the side files (read, check, insert) and of the whole ingest.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT.parent))

from scaletrace.pipeline.read import sidefiles  # noqa: E402
from scaletrace.pipeline.execute.ingest import ingest  # noqa: E402

START_NS = 1_700_000_000_000_000_000


def write_logs(run: Path, steps: int, samples: int) -> tuple[Path, Path]:
    run.mkdir(parents=True)
    (run / "rank0.json").write_text(json.dumps({"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1, "args": {"stream": 7}}]}))
    step_path, power_path = run / "rank0.steps.jsonl", run / "rank0.power.jsonl"
    with open(step_path, "w") as f:
        for i in range(steps):
            f.write(json.dumps({"step": i, "start_ns": START_NS + i * 250_000_000, "dur_ns": 249_000_000 + i % 997,
                                "tokens": 524288, "profiled": 100 <= i < 105}) + "\n")
    with open(power_path, "w") as f:
        for i in range(samples):
            f.write(json.dumps({"ts_ns": START_NS + i * 100_000_000, "watts": 300.0 + (i % 50) / 7}) + "\n")
    return step_path, power_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--samples", type=int, default=200_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        run = tmp / "run"
        paths = write_logs(run, args.steps, args.samples)
        db = tmp / "side.duckdb"
        con = duckdb.connect(str(db))
        from scaletrace.pipeline.store import schema

        con.execute(schema.SCHEMA_SQL.read_text())
        for path, kind, count in zip(paths, ("steps", "power"), (args.steps, args.samples)):
            start = time.perf_counter()
            sha, records = sidefiles.read(path, kind)
            decoded = time.perf_counter()
            sidefiles.write(con, path, "run", 0, kind, sha, records)
            seconds = time.perf_counter() - start
            size = path.stat().st_size
            print(f"{kind:5} log: {count:,} records, {size / 1e6:.1f} MB: read + check {decoded - start:.2f} s, "
                  f"insert {seconds - (decoded - start):.2f} s; {seconds:.2f} s = {count / seconds:,.0f} records/s, "
                  f"{size / 1e6 / seconds:.0f} MB/s")
        sha, records = sidefiles.read(paths[0], "steps")
        rows = records.slice(0, min(len(records), 2_000)).to_pylist()
        con.execute("DELETE FROM step_log")
        start = time.perf_counter()
        con.executemany("INSERT INTO step_log (run_id, rank, step, start_ns, dur_ns, tokens, profiled) "
                        "VALUES ('run', 0, ?, ?, ?, ?, ?)", [list(r.values()) for r in rows])
        seconds = time.perf_counter() - start
        print(f"for comparison, row by row (executemany, {len(rows):,} steps): {len(rows) / seconds:,.0f} records/s")
        con.close()
        db.unlink()
        start = time.perf_counter()
        report = ingest([run], db=tmp / "whole.duckdb", workers=1)
        seconds = time.perf_counter() - start
        assert not report.errors, [o.line() for o in report.errors]
        print(f"whole ingest of the run (a tiny trace and both logs): {seconds:.2f} s")


if __name__ == "__main__":
    main()
