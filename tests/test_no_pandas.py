"""An ingest never imports pandas, in the main process or in a parse worker.

pyarrow's ``pa.array`` and ``Array.to_numpy`` import pandas on their first call (0.2-0.3 s of
start-up in every process), which the ingest never uses; pipeline/read/arrays.py builds arrays
without them.  Each case ingests in a fresh subprocess with an import hook that records every
attempt to import pandas, with the process and the stack, so a failure names the line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scaletrace.pipeline.synth import SynthRun, write_run

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"

DRIVER = r"""
import os, sys, traceback
log = sys.argv[3]

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            with open(log, "a") as f:
                f.write(f"pid {os.getpid()} imports {name}:\n" + "".join(traceback.format_stack(limit=8)) + "\n")
        return None

sys.meta_path.insert(0, Watch())
from scaletrace.pipeline.execute.ingest import ingest
report = ingest([sys.argv[1]], db=sys.argv[2], workers=2)
assert not report.errors, [o.line() for o in report.errors]
assert report.count("ok") >= 2, [o.line() for o in report.outcomes]
print("MAIN_HAS_PANDAS", "pandas" in sys.modules)
"""


def _ingest_without_pandas(run: Path, tmp_path: Path, **env) -> None:
    log = tmp_path / "pandas.log"
    out = subprocess.run([sys.executable, "-c", DRIVER, str(run), str(tmp_path / "t.duckdb"), str(log)],
                         cwd=ROOT.parent, capture_output=True, text=True, env={**os.environ, **env}, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert not log.exists(), log.read_text()[:4000]
    assert "MAIN_HAS_PANDAS False" in out.stdout


def _synth(tmp_path: Path, **kw) -> Path:
    return write_run(tmp_path / "runs", SynthRun("np", ranks=2, steps=3, step_us=2000, compute_us=600,
                                                 kernels_per_step=6, workload="w", **kw))


def test_gpu_run_with_side_files(tmp_path):
    run = _synth(tmp_path, power_watts=300.0)
    (run / "rank0.steps.jsonl").write_text("".join(
        json.dumps({"step": i, "start_ns": 10**18 + i * 10**6, "dur_ns": 10**6, "tokens": 512}) + "\n"
        for i in range(4)))
    _ingest_without_pandas(run, tmp_path)


def test_reference_extractor(tmp_path):
    _ingest_without_pandas(_synth(tmp_path), tmp_path, SCALETRACE_EXTRACTOR="python")


def test_cpu_only_trace(tmp_path):
    run = tmp_path / "cpu"
    run.mkdir()
    for rank in (0, 1):
        events = [{"ph": "X", "cat": "cpu_op", "name": "gloo:all_reduce", "pid": 1, "tid": 2,
                   "ts": 1000 + 10 * i, "dur": 5} for i in range(5)]
        events += [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1000, "dur": 40}]
        (run / f"rank{rank}.json").write_text(json.dumps({"distributedInfo": {"rank": rank, "world_size": 2},
                                                          "traceEvents": events}))
    _ingest_without_pandas(run, tmp_path)


@pytest.mark.skipif(not (SHARED / "param-dlrm-8rank").is_dir(), reason="the shared real traces are absent")
def test_real_run(tmp_path):
    _ingest_without_pandas(SHARED / "param-dlrm-8rank", tmp_path)
