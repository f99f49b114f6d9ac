"""Peak memory of ingesting one large trace (a script, not a test).

    .venv/bin/python tests/bench/memory.py [--steps 10000] [--kernels 50]

Generates one rank's trace with pipeline/synth.py (about 100 events and
15 kB of JSON per step at 50 kernels per step), ingests it in a subprocess
and prints its peak RSS against the target: 2 × the JSON size + 300 MB.
``--steps 62000`` gives a ~1 GB trace.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scaletrace.pipeline.synth import SynthRun, write_run  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--kernels", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = write_run(Path(tmp), SynthRun("big", ranks=1, steps=args.steps, step_us=2000, compute_us=600,
                                            kernels_per_step=args.kernels, workload="m"))
        size = (run / "rank0.json").stat().st_size
        code = ("import resource, sys; from pipeline import ingest; r = ingest([sys.argv[1]], db=sys.argv[2]); "
                "assert not r.errors; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", code, str(run), str(Path(tmp) / "m.duckdb")], cwd=ROOT,
                             capture_output=True, text=True, check=True)
        seconds = time.perf_counter() - start
    peak = int(out.stdout.split()[-1]) * 1024
    bound = 2 * size + 300e6
    print(f"trace: {size / 1e6:.0f} MB JSON; ingest {seconds:.1f} s; peak RSS {peak / 1e6:.0f} MB "
          f"({peak / size:.1f}× the file); target 2 × file + 300 MB = {bound / 1e6:.0f} MB: "
          f"{'met' if peak <= bound else 'NOT met'}")


if __name__ == "__main__":
    main()
