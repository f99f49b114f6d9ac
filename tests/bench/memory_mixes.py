"""Peak memory of an ingest for several event mixes, against the documented bound (a script, not a test).

    .venv/bin/python tests/bench/memory_mixes.py [--mb 40 80] [--kinds gpu gloo ...]

Each mix is written as one trace at two sizes and ingested in a subprocess (one parse worker,
the main process writes DuckDB), one at a time.  Printed per size: the JSON's size, each
process's peak RSS and its bound (``BOUND_MAIN`` or ``BOUND_WORKER`` × the JSON + ``BOUND_FIXED``,
docs/robustness.md), and the larger of the two peak / bound ratios; per mix: the slope between
the sizes (bytes of memory per byte of JSON).

* ``gpu``: alternating ``ProfilerStep#N`` annotations and NCCL kernels with stream, device and
  correlation args (a GPU trace whose every kept event is small);
* ``gloo``: minimal CPU-only ``gloo:all_reduce`` cpu_op events (every event becomes a row);
* ``nested``: a CPU-only gloo trace of deep stacks: a ProfilerStep, a ``c10d::allreduce_`` call
  around ``gloo:all_reduce``, then eight nested ``aten::`` compute ops, on two threads;
* ``kernels``: compute kernels on two streams under ProfilerSteps (the common case);
* ``tiny``: the smallest kept events (``{"ph":"X","cat":"kernel",...}``, ~60 bytes each);
* ``args``: cpu_ops with long names and large args (shapes, types, a 300-character string);
* ``flows``: runtime launches and kernels tied by correlation ids and flow (``ph`` s/f) events;
* ``python``: ``python_function`` stacks around ops and kernels (dropped without --keep-python);
* ``empty``: ``{}`` array elements (nothing kept, the most events per byte).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

DRIVER = """
import resource, sys
from scaletrace.pipeline.execute.ingest import ingest
report = ingest([sys.argv[1]], db=sys.argv[2], workers=1)
print("ERRORS", [o.line() for o in report.errors])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""

HEAD = b'{"distributedInfo":{"rank":0,"world_size":1,"backend":"nccl"},"traceEvents":['
TAIL = b"]}"
# docs/robustness.md, "Memory": peak RSS <= k x the file's JSON + 300 MB, k per process
BOUND_MAIN, BOUND_WORKER, BOUND_FIXED = 3, 6, 300e6

X = b'{"ph":"X","cat":"%s","name":"%s","pid":%d,"tid":%d,"ts":%d,"dur":%d%s}'


def events(kind: str, i: int) -> bytes:
    """The JSON of event group ``i`` of a mix."""
    ts = 1_000_000 + i * 100
    if kind == "gpu":
        return (b'{"ph":"X","cat":"user_annotation","name":"ProfilerStep#%d","pid":1,"tid":1,"ts":%d,"dur":90},'
                b'{"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce_Sum_f32_RING_LL","pid":0,"tid":7,'
                b'"ts":%d,"dur":50,"args":{"stream":7,"device":0,"correlation":%d}}' % (i, ts, ts + 10, i))
    if kind == "gloo":
        return b'{"ph":"X","cat":"cpu_op","name":"gloo:all_reduce","pid":1,"tid":2,"ts":%d,"dur":1}' % ts
    if kind == "nested":
        tid, ts = 1 + i % 2, 1_000_000 + (i // 2) * 100
        stack = [X % (b"user_annotation", b"ProfilerStep#%d" % i, 1, tid, ts, 98, b""),
                 X % (b"cpu_op", b"c10d::allreduce_", 1, tid, ts + 1, 20, b""),
                 X % (b"cpu_op", b"gloo:all_reduce", 1, tid, ts + 2, 18, b"")]
        stack += [X % (b"cpu_op", b"aten::op%d" % d, 1, tid, ts + 30 + d, 60 - 2 * d, b"") for d in range(8)]
        return b",".join(stack)
    if kind == "kernels":
        return (b'{"ph":"X","cat":"user_annotation","name":"ProfilerStep#%d","pid":1,"tid":1,"ts":%d,"dur":95},'
                b'{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":%d,"dur":4,'
                b'"args":{"correlation":%d}},'
                b'{"ph":"X","cat":"kernel","name":"sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize%d","pid":0,'
                b'"tid":%d,"ts":%d,"dur":40,"args":{"stream":%d,"device":0,"correlation":%d}}'
                % (i, ts, ts + 1, i, i % 8, 7 + i % 2, ts + 10, 7 + i % 2, i))
    if kind == "tiny":
        return b'{"ph":"X","cat":"kernel","name":"k","ts":%d,"dur":1}' % ts
    if kind == "args":
        args = (b',"args":{"External id":%d,"Input Dims":[[4096,4096],[4096,4096],[]],"Input type":["c10::BFloat16",'
                b'"c10::BFloat16","Scalar"],"Concrete Inputs":["","","1"],"Note":"%s"}' % (i, b"x" * 300))
        return X % (b"cpu_op", b"aten::some_very_long_operator_name_%d_" % (i % 50) + b"y" * 150, 1, 2, ts, 50, args)
    if kind == "flows":
        return (X % (b"cuda_runtime", b"cudaLaunchKernel", 1, 1, ts, 4, b',"args":{"correlation":%d}' % i) + b","
                + b'{"ph":"s","id":%d,"pid":1,"tid":1,"ts":%d,"cat":"ac2g","name":"ac2g"},' % (i, ts)
                + b'{"ph":"f","id":%d,"pid":0,"tid":7,"ts":%d,"cat":"ac2g","name":"ac2g","bp":"e"},' % (i, ts + 10)
                + X % (b"kernel", b"void at::native::elementwise_kernel<%d>" % (i % 16), 0, 7, ts + 10, 30,
                       b',"args":{"stream":7,"device":0,"correlation":%d,"External id":%d}' % (i, i)))
    if kind == "python":
        stack = [X % (b"python_function", b"torch/nn/modules/module.py(%d): _call_impl" % (1500 + d), 1, 1,
                      ts + d, 80 - 2 * d, b',"args":{"Python id":%d,"Python parent id":%d}' % (i * 8 + d, i * 8 + d - 1))
                 for d in range(6)]
        stack += [X % (b"cpu_op", b"aten::linear", 1, 1, ts + 10, 40, b""),
                  X % (b"cuda_runtime", b"cudaLaunchKernel", 1, 1, ts + 12, 4, b',"args":{"correlation":%d}' % i),
                  X % (b"kernel", b"sm90_gemm", 0, 7, ts + 20, 30, b',"args":{"stream":7,"device":0,"correlation":%d}' % i)]
        return b",".join(stack)
    return b"{}"


def write(kind: str, target_bytes: int, path: Path) -> int:
    """Write a trace of about ``target_bytes``; its size."""
    one = len(events(kind, 10**6)) + 1
    n = max(1, target_bytes // one)
    with open(path, "wb") as f:
        f.write(HEAD)
        for start in range(0, n, 100_000):
            f.write(b",".join(events(kind, i) for i in range(start, min(n, start + 100_000))))
            if start + 100_000 < n:
                f.write(b",")
        f.write(TAIL)
    return path.stat().st_size


def measure(run: Path, db: Path) -> tuple[int, int, float]:
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", DRIVER, str(run), str(db)], cwd=ROOT.parent,
                         capture_output=True, text=True)
    seconds = time.perf_counter() - start
    lines = out.stdout.strip().splitlines()
    if out.returncode or not lines:
        raise SystemExit(f"{run}: the ingest failed: {out.stderr.strip()[-2000:]}")
    errors = next((line for line in lines if line.startswith("ERRORS")), "")
    if errors != "ERRORS []":
        print(f"  {errors}")
    main_kb, worker_kb = map(int, lines[-1].split())
    return main_kb * 1024, worker_kb * 1024, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, nargs=2, default=(40, 80), help="the two trace sizes, MB of JSON")
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    args = parser.parse_args()
    print(f"{'mix':8} {'JSON MB':>8} {'s':>6} {'main MB':>8} {'bound':>6} {'worker MB':>9} {'bound':>6} "
          f"{'peak/bound':>10}")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for kind in args.kinds:
            points = []
            for mb in args.mb:
                run = tmp / f"{kind}-{mb:g}"
                run.mkdir()
                size = write(kind, int(mb * 1e6), run / "rank0.json")
                main_peak, worker_peak, seconds = measure(run, tmp / f"{kind}-{mb:g}.duckdb")
                main_bound, worker_bound = (k * size + BOUND_FIXED for k in (BOUND_MAIN, BOUND_WORKER))
                ratio = max(main_peak / main_bound, worker_peak / worker_bound)
                print(f"{kind:8} {size / 1e6:8.1f} {seconds:6.1f} {main_peak / 1e6:8.0f} {main_bound / 1e6:6.0f} "
                      f"{worker_peak / 1e6:9.0f} {worker_bound / 1e6:6.0f} {ratio:10.2f}"
                      f"{'' if ratio <= 1 else '  over'}", flush=True)
                points.append((size, main_peak, worker_peak))
                for path in run.iterdir():
                    path.unlink()
            (b0, m0, w0), (b1, m1, w1) = points
            print(f"{'':8} slope per JSON byte: main {(m1 - m0) / (b1 - b0):.2f} B, worker {(w1 - w0) / (b1 - b0):.2f} B")


KINDS = ("gpu", "gloo", "nested", "kernels", "tiny", "args", "flows", "python", "empty")


if __name__ == "__main__":
    main()
