"""Real CUDA runs recorded with the project's collectors on an H200 (fixtures/h200): the GPU path
end to end, every expected value derived here from the run's own files and NVIDIA's data sheet."""

from __future__ import annotations

import json
import statistics

import pytest

from conftest import FIXTURES, assert_breakdown_matches_sweep, query
from scaletrace.pipeline import connect, ingest

RUNS = FIXTURES / "h200"
# NVIDIA H200 SXM data sheet: BF16 Tensor Core 1,979 TFLOPS with sparsity (989.5 dense), FP32 67 TFLOPS
H200_PEAK = {"bf16": 989e12, "fp32": 67e12}


@pytest.fixture(scope="module")
def gpu_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("h200") / "h200.duckdb"
    report = ingest([RUNS], db=db, workers=1)
    assert not report.errors, [o.line() for o in report.errors]
    return db


def _jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("run", ["h200-ddp-1", "h200-fsdp-1", "h200-plain-1", "h200-bf16-ddp-1"])
def test_run_level_metrics_from_the_runs_own_files(gpu_db, run):
    manifest = json.loads((RUNS / run / "run.json").read_text())
    assert manifest["device"]["name"] == "NVIDIA H200" and manifest["power"]["source"] == "nvml"
    log = _jsonl(RUNS / run / "rank0.steps.jsonl")
    after_window = max(s["step"] for s in log if s["profiled"]) + 1  # the trace's export: left out
    steps = [s for s in log if not s["profiled"] and s["step"] > 0 and s["step"] != after_window]
    step_ns = statistics.median(s["dur_ns"] for s in steps)  # one rank: it is the slowest
    tokens = manifest["tokens_per_step"]
    model = manifest["model"]
    fpt = 6 * model["num_params"]
    if model["num_layers"] and model["hidden_size"] and manifest["seq_len"]:
        fpt += 12 * model["num_layers"] * model["hidden_size"] * manifest["seq_len"]
    watts = statistics.mean(s["watts"] for s in _jsonl(RUNS / run / "rank0.power.jsonl"))

    r = query(gpu_db, "run_summary", run_id=run).row(0, named=True)
    assert r["device_name"] == "NVIDIA H200"
    dtype = manifest["dtype"]  # the demo: fp32 ("highest" precision) or bf16 autocast; plain: bf16
    assert r["peak_flops_dtype"] == dtype and r["peak_flops_source"] == "table"
    assert r["peak_flops_per_gpu"] == H200_PEAK[dtype]
    assert r["step_time_source"] == "step_log" and r["step_time_ns"] == int(step_ns)
    tps = tokens / (int(step_ns) / 1e9)
    assert r["tokens_per_s"] == pytest.approx(tps, rel=1e-9)
    assert r["mfu_pct"] == pytest.approx(100 * tps * fpt / H200_PEAK[dtype], rel=1e-9)
    assert r["energy_per_token_j"] == pytest.approx(watts * (int(step_ns) / 1e9) / tokens, rel=1e-9)
    # a GPU run: the CPU-cores warning does not apply (the sanity checks may warn: tests/test_sanity.py)
    assert "CPU run" not in (r["warnings"] or "")


def test_a_world_of_one_has_collective_calls_but_no_comm_kernels(gpu_db):
    """NCCL with one rank launches no kernel for an in-place all_reduce and copies for all_gather."""
    with connect(gpu_db) as db:
        kinds = db.sql("SELECT kind, count(*) AS n FROM device_events d JOIN traces t USING (trace_id) "
                       "WHERE t.run_id = 'h200-plain-1' GROUP BY kind")
        calls = db.sql("SELECT name, count(*) AS n FROM cpu_events c JOIN traces t USING (trace_id) "
                       "WHERE t.run_id = 'h200-plain-1' AND name LIKE 'nccl:%' GROUP BY name")
    kinds = dict(kinds.iter_rows())
    assert "comm" not in kinds and kinds["memory"] > 0 and kinds["compute"] > 0
    # 3 profiled steps: an all_reduce per parameter (weight, bias), one all_gather
    assert dict(calls.iter_rows()) == {"nccl:all_reduce": 3 * 2, "nccl:_all_gather_base": 3 * 1}


def test_every_part_of_the_breakdown_matches_an_interval_sweep(gpu_db):
    """rank_breakdown and rank_step_breakdown of the four GPU runs (compute kernels, memcpy and
    memset: exposed memory > 0) against conftest.sweep_breakdown over their ingested events."""
    assert assert_breakdown_matches_sweep(gpu_db) == 4 * (1 + 3)  # 4 runs: the trace and 3 profiled steps
