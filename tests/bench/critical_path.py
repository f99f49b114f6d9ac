"""The critical path at scale: 1,024 generated ranks × a few steps (a script, not a test).

    .venv/bin/python tests/bench/critical_path.py [--ranks 1024] [--steps 3] [--kernels 20] [--db PATH] [--sync-events]

Generates one run with pipeline/synth.py (a straggler rank 3 that arrives 200 µs late at every
all_reduce; each step ends in a cudaDeviceSynchronize added here), ingests it (skipped when --db names an existing database), then times, each on a fresh
connection: the graph (critical_path_graph: every node and its predecessors), the walk
(queries/analysis/critical_path.segments) and the two queries.  Prints the node count, the
segments, the seconds of each part and what the path says (it must run through rank 3).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _with_syncs(run_dir: Path, spec, waits: bool = False) -> None:
    """Each generated step ends in a cudaDeviceSynchronize that returns 2 µs after the all_reduce ends
    (a training step waits for its GPU work; the generator's host does not), so the path crosses the GPU.
    ``waits``: each step's all_reduce also waits (cudaStreamWaitEvent, a `Stream Wait Event` sync
    event) for an event recorded after the step's first compute kernel, as DDP's comm stream does;
    correlation ids are multiplied by 10 to leave room for the record and wait calls between launches."""
    import gzip

    import msgspec

    for rank in range(spec.ranks):
        path = run_dir / f"rank{rank}.json.gz"
        doc = msgspec.json.decode(gzip.decompress(path.read_bytes()))
        if waits:
            _add_waits(doc["traceEvents"], 1000 + rank)
        for step in range(spec.steps):
            begin = step * spec.step_us + 3
            end = spec.allreduce(step)[rank][1] + 2
            doc["traceEvents"].append({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize",
                                       "pid": 1000 + rank, "tid": 1000 + rank, "ts": begin, "dur": end - begin,
                                       "args": {}})
        path.write_bytes(gzip.compress(msgspec.json.encode(doc), compresslevel=1))


def _add_waits(events: list, tid: int) -> None:
    for e in events:
        if isinstance(e.get("args"), dict) and "correlation" in e["args"]:
            e["args"]["correlation"] *= 10
    kernels = sorted(((e["args"]["correlation"], e) for e in events if e.get("cat") == "kernel"), key=lambda k: k[0])
    launches = {e["args"]["correlation"]: e["ts"] for e in events if e.get("cat") == "cuda_runtime"}
    for corr, comm in [(c, e) for c, e in kernels if e["args"]["stream"] == 20]:
        done = [c for c, e in kernels if e["args"]["stream"] == 7 and c < corr and e["ts"] + e["dur"] <= comm["ts"]]
        if not done:
            continue
        first = max(done)  # the last compute kernel launched before the all_reduce that ended before it
        ts = launches[corr]  # the record and the wait are called just before the all_reduce's launch
        events += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaEventRecord", "pid": tid, "tid": tid, "ts": ts,
                    "dur": 0, "args": {"correlation": first + 1}},
                   {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamWaitEvent", "pid": tid, "tid": tid, "ts": ts,
                    "dur": 0, "args": {"correlation": corr - 1}},
                   {"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": 20, "ts": ts, "dur": 0,
                    "args": {"device": 0, "stream": 20, "correlation": corr - 1, "wait_on_stream": 7,
                             "wait_on_cuda_event_record_corr_id": first + 1}}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--kernels", type=int, default=20)
    parser.add_argument("--db", type=Path, help="a database to reuse (written there when absent)")
    parser.add_argument("--sync-events", action="store_true", help="each all_reduce waits on a recorded CUDA event")
    cli = parser.parse_args()

    from scaletrace.pipeline import connect, ingest, synth
    from scaletrace.queries.analysis import critical_path

    db = cli.db or Path(tempfile.mkdtemp()) / "cp.duckdb"
    run_id = f"cp-{cli.ranks}"
    if not db.exists():
        root = Path(tempfile.mkdtemp())
        t0 = time.perf_counter()
        spec = synth.SynthRun(run_id, ranks=cli.ranks, steps=cli.steps, step_us=1000, compute_us=600,
                              kernels_per_step=cli.kernels, straggler_rank=3, straggler_delay_us=200, gzip=True)
        _with_syncs(synth.write_run(root, spec), spec, cli.sync_events)
        t1 = time.perf_counter()
        report = ingest([root / run_id], db=db)
        assert not report.errors, [o.line() for o in report.errors][:3]
        print(f"generated {cli.ranks} ranks × {cli.steps} steps in {t1 - t0:.1f} s, ingested in "
              f"{time.perf_counter() - t1:.1f} s")

    with connect(db) as database:
        t0 = time.perf_counter()
        nodes = database.con.sql("SELECT count(*) FROM critical_path_graph(NULL)").fetchall()[0][0]
        t1 = time.perf_counter()
        table = critical_path.segments(database)
        t2 = time.perf_counter()
    print(f"graph: {nodes:,} nodes in {t1 - t0:.2f} s; graph + walk: {table.num_rows:,} segments in {t2 - t1:.2f} s")
    for name in ("critical_path", "critical_path_summary"):
        with connect(db) as database:
            t0 = time.perf_counter()
            result = database.query(name)
            print(f"query {name}: {result.height:,} rows in {time.perf_counter() - t0:.2f} s")
    for row in result.iter_rows(named=True):
        print(f"  step {row['step']}: path {row['path_ns'] / 1e3:.0f} µs = step {row['step_ns'] / 1e3:.0f} µs; "
              f"compute {row['compute_kernel_ns'] / 1e3:.0f}, transfer {row['comm_transfer_ns'] / 1e3:.0f}, "
              f"host gap {row['host_gap_ns'] / 1e3:.0f} µs; top rank {row['top_rank']}, top op "
              f"{row['top_op_kind']} {row['top_op'][:40]} on rank {row['top_op_rank']}")
        assert row["path_ns"] == row["step_ns"] and 3 in [r["rank"] for r in row["by_rank"]]


if __name__ == "__main__":
    main()
