"""Peak memory per JSON byte and per event, for the README's robustness section (a script, not a test).

    .venv/bin/python tests/bench/memory_bound.py [--scale 1.0]

Four kinds of trace, each at two sizes, each ingested in a subprocess with ``--workers 2``
(the parse runs in a worker process, the main process writes DuckDB): a realistic trace from
pipeline/synth.py, minimal kept events (``{"ph":"X","cat":"kernel",...}``, ~57 bytes each),
empty array elements (``{}``, 3 bytes each, skipped) and one event with a huge name.  Prints
each process's peak RSS and the slope between the two sizes: bytes of memory per byte of JSON
and per event.  Every subprocess runs under a 3 GiB data-memory cap.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

DRIVER = """
import resource, sys
from scaletrace.pipeline import ingest
report = ingest([sys.argv[1]], db=sys.argv[2], workers=2)
assert not report.errors, [o.line() for o in report.errors]
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def write(kind: str, n: int, run: Path) -> tuple[int, int]:
    """Write rank0.json (and rank1.json, so that the pool starts) of ``kind``; (JSON bytes, events)."""
    run.mkdir(parents=True)
    head = b'{"distributedInfo":{"rank":%d},"traceEvents":['
    one = b'{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":1}'
    for rank in (0, 1):
        with open(run / f"rank{rank}.json", "wb") as f:
            f.write(head % rank)
            if rank == 1 or kind == "small":
                f.write(one)
            elif kind == "minimal":
                f.write(b",".join(b'{"ph":"X","cat":"kernel","name":"k","ts":%d,"dur":1}' % i for i in range(n)))
            elif kind == "empty":
                f.write(one + b"," + b",".join([b"{}"] * n))
            elif kind == "name":
                f.write(b'{"ph":"X","cat":"kernel","name":"' + b"a" * n + b'","ts":1,"dur":1}')
            f.write(b"]}")
    events = {"minimal": n, "empty": n + 1, "name": 1, "small": 1}[kind]
    return (run / "rank0.json").stat().st_size, events


def write_synth(steps: int, run_root: Path) -> tuple[int, int]:
    from scaletrace.pipeline.synth import SynthRun, write_run

    run = write_run(run_root, SynthRun("big", ranks=2, steps=steps, step_us=2000, compute_us=600,
                                       kernels_per_step=50, workload="m"))
    trace = json.loads((run / "rank0.json").read_text())
    (run / "rank1.json").write_text(json.dumps({**trace, "traceEvents": trace["traceEvents"][:10],
                                                "distributedInfo": {"rank": 1}}))
    return (run / "rank0.json").stat().st_size, len(trace["traceEvents"])


def measure(run: Path, tmp: Path) -> tuple[int, int]:
    cap = 3 << 30
    out = subprocess.run([sys.executable, "-c", DRIVER, str(run), str(tmp / f"{run.parent.name}-{run.name}.duckdb")],
                         capture_output=True, text=True, check=True,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_DATA, (cap, cap)))
    main_kb, worker_kb = map(int, out.stdout.split()[-2:])
    return main_kb * 1024, worker_kb * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    args = parser.parse_args()
    sizes = {"synth": (2000, 4000), "minimal": (500_000, 1_000_000), "empty": (2_000_000, 4_000_000),
             "name": (100_000_000, 200_000_000)}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        write("small", 0, tmp / "small")
        base = measure(tmp / "small", tmp)
        print(f"baseline (two tiny traces): main {base[0] / 1e6:.0f} MB, worker {base[1] / 1e6:.0f} MB")
        print(f"{'kind':8} {'JSON MB':>8} {'events':>10} {'main MB':>8} {'worker MB':>9}")
        for kind, (small, large) in sizes.items():
            points = []
            for n in (int(small * args.scale), int(large * args.scale)):
                run = tmp / f"{kind}-{n}"
                size, events = write_synth(n, run) if kind == "synth" else write(kind, n, run)
                if kind == "synth":
                    run = run / "big"
                peak = measure(run, tmp)
                points.append((size, events, *peak))
                print(f"{kind:8} {size / 1e6:8.1f} {events:10,} {peak[0] / 1e6:8.0f} {peak[1] / 1e6:9.0f}")
            (b0, e0, m0, w0), (b1, e1, m1, w1) = points
            print(f"{'':8} slope: main {(m1 - m0) / (b1 - b0):.2f} B/byte"
                  + (f", {(m1 - m0) / (e1 - e0):.0f} B/event" if e1 != e0 else "")
                  + f"; worker {(w1 - w0) / (b1 - b0):.2f} B/byte"
                  + (f", {(w1 - w0) / (e1 - e0):.0f} B/event" if e1 != e0 else ""))


if __name__ == "__main__":
    main()
