"""The device peak table: the name Kineto / NVML reports for each device -> its data-sheet peak.

Expected figures are transcribed here from the vendors' data sheets (dense, i.e. the "with
sparsity" figure halved), independently of queries/reference/device_peaks.sql."""

from __future__ import annotations

import json

import pytest

from conftest import cpu, kernel, query, write_trace
from scaletrace.pipeline import ingest

T = 1e12
CASES = [  # (name as torch.cuda.get_device_name / NVML / Kineto deviceProperties report it, dtype, peak)
    ("NVIDIA A100-SXM4-80GB", "bf16", 312 * T), ("NVIDIA A100-SXM4-40GB", "fp32", 19.5 * T),
    ("NVIDIA A100-PCIE-40GB", "bf16", 312 * T), ("NVIDIA A100 80GB PCIe", "tf32", 156 * T),
    ("NVIDIA A100-PG509-200", "bf16", 312 * T),  # the name in ../shared/traces/hta-a100-2rank
    ("NVIDIA A10", "bf16", 125 * T), ("NVIDIA A10G", "bf16", None),  # no public data sheet
    ("NVIDIA A30", "bf16", 165 * T), ("NVIDIA L4", "bf16", 121 * T), ("NVIDIA L4", "fp32", 30.3 * T),
    ("NVIDIA L40", "bf16", 181 * T), ("NVIDIA L40S", "bf16", 362 * T), ("NVIDIA L40S", "tf32", 183 * T),
    ("Tesla V100-SXM2-32GB", None, 125 * T),  # no bf16: its fp16 tensor peak
    ("Tesla V100-SXM2-32GB", "bf16", None), ("Tesla V100-SXM2-32GB", "fp32", 15.7 * T),
    ("NVIDIA H100 80GB HBM3", "bf16", 989 * T), ("NVIDIA H100 80GB HBM3", "fp32", 67 * T),
    ("NVIDIA H100 80GB HBM3", "tf32", 494 * T),
    ("NVIDIA H100 PCIe", "bf16", 756 * T), ("NVIDIA H100 NVL", "bf16", 835.5 * T),
    ("NVIDIA H800", "bf16", 989 * T),
    ("NVIDIA H200", "bf16", 989 * T), ("NVIDIA H200", "float32", 67 * T), ("NVIDIA H200 NVL", "bf16", 835.5 * T),
    ("NVIDIA GH200 480GB", "bf16", 989 * T),
    ("NVIDIA B200", "bf16", 2250 * T), ("NVIDIA B200", "fp32", 75 * T), ("NVIDIA GB200", "bfloat16", 2500 * T),
    ("AMD Instinct MI250X", "bf16", 383 * T), ("AMD Instinct MI250X / MI250", "bf16", 383 * T),
    ("AMD Instinct MI250", "fp16", 362.1 * T), ("AMD Instinct MI250X", "tf32", None),  # CDNA2: no TF32
    ("AMD Instinct MI300X", "bf16", 1307.4 * T), ("AMD Instinct MI300X", "fp32", 163.4 * T),
    ("AMD Instinct MI300A", "bf16", 980.6 * T), ("AMD Instinct MI325X", "bf16", 1307.4 * T),
]


@pytest.fixture(scope="module")
def peaks_db(tmp_path_factory):
    root = tmp_path_factory.mktemp("peaks")
    for i, (name, dtype, _) in enumerate(CASES):
        run = root / f"case{i:02d}"
        write_trace(run / "rank0.json", [cpu("ProfilerStep#1", 0, 100), kernel("gemm", 10, 50)], rank=0,
                    deviceProperties=[{"id": 0, "name": name}])
        (run / "run.json").write_text(json.dumps({"dtype": dtype, "tokens_per_step": 1000, "world_size": 1,
                                                  "model": {"num_params": 1e6}}))
    db = root / "peaks.duckdb"
    assert not ingest([root], db=db, workers=1).errors
    return {r["run_id"]: r for r in query(db, "run_summary").iter_rows(named=True)}


@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{n}-{d}" for n, d, _ in CASES])
def test_device_name_to_peak(peaks_db, i):
    name, dtype, peak = CASES[i]
    r = peaks_db[f"case{i:02d}"]
    assert r["device_name"] == name
    assert r["peak_flops_per_gpu"] == (pytest.approx(peak) if peak else None)
    if peak is None:
        assert r["mfu_pct"] is None and "set device.peak_flops" in r["null_reasons"]
        return
    # MFU uses that peak: tokens/s × 6 N / peak, with the ProfilerStep (100 µs) as step time
    assert r["mfu_pct"] == pytest.approx(100 * (1000 / 100e-6) * 6e6 / peak)
    assert r["peak_flops_source"] == "table" and "data sheet" in r["peak_flops_basis"]
    used = {"float32": "fp32", "bfloat16": "bf16", None: "fp16" if "V100" in name else "bf16"}.get(dtype, dtype)
    assert r["peak_flops_dtype"] == used
    assert ("dtype is unknown" in r["peak_flops_basis"]) is (dtype is None)
