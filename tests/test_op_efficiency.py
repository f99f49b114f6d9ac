"""op_flops / op_efficiency / compute_efficiency: FLOPs of hand-written ops derived here from their
shapes, and plausibility on the real H200 bf16 trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import FIXTURES, cpu, kernel, query, write_trace
from scaletrace.pipeline import connect, ingest

US = 1000
H200_BF16_PEAK = 989e12  # NVIDIA H200 data sheet, dense bf16


def op(name, ts, dur, dims, types, concrete=None, corr=None, kernel_us=None):
    """A CPU op with recorded shapes, and (with corr) one runtime call inside it launching a kernel."""
    args = {"Input Dims": dims, "Input type": types, "Concrete Inputs": concrete or [""] * len(dims)}
    events = [cpu(name, ts, dur, **args)]
    if corr is not None:
        events += [cpu("cudaLaunchKernel", ts + 1, 1, cat="cuda_runtime", correlation=corr),
                   kernel(f"k_{corr}", 10_000 + ts, kernel_us, corr=corr)]
    return events


CASES = [  # (ops, family, pass, FLOPs derived by hand)
    (op("aten::mm", 0, 10, [[64, 32], [32, 16]], ["c10::BFloat16"] * 2, corr=1, kernel_us=4),
     "gemm", "any", 2 * 64 * 32 * 16),
    # linear over addmm: only the inner addmm counts (bias first: A = [64, 32], B = [32, 16])
    (op("aten::linear", 0, 20, [[64, 32], [16, 32], [16]], ["float"] * 3)
     + op("aten::addmm", 2, 10, [[16], [64, 32], [32, 16]], ["c10::BFloat16"] * 3, corr=1, kernel_us=4),
     "gemm", "any", 2 * 64 * 32 * 16),
    (op("aten::bmm", 0, 10, [[4, 64, 32], [4, 32, 16]], ["c10::BFloat16"] * 2, corr=1, kernel_us=4),
     "gemm", "any", 2 * 4 * 64 * 32 * 16),
    (op("aten::baddbmm", 0, 10, [[4, 64, 16], [4, 64, 32], [4, 32, 16], [], []], ["c10::Half"] * 3 + ["Scalar"] * 2,
        corr=1, kernel_us=4), "gemm", "any", 2 * 4 * 64 * 32 * 16),
    # a matmul with nothing under it: A [2, 64, 32] @ B [32, 16] = 2 · (2·64) · 32 · 16
    (op("aten::matmul", 0, 10, [[2, 64, 32], [32, 16]], ["float"] * 2, corr=1, kernel_us=4),
     "gemm", "any", 2 * 2 * 64 * 32 * 16),
    # SDPA forward, causal (is_causal = arg 5): 4·B·H·S·S·D ÷ 2
    (op("aten::scaled_dot_product_attention", 0, 30, [[2, 8, 128, 64]] * 3 + [[], [], [], [], []],
        ["c10::BFloat16"] * 3 + ["", "Scalar", "Scalar", "", "Scalar"],
        ["", "", "", "", "0.", "True", "", "False"])
     + op("aten::_scaled_dot_product_flash_attention", 2, 20, [[2, 8, 128, 64]] * 3 + [[], [], [], []],
          ["c10::BFloat16"] * 3 + ["Scalar"] * 4, ["", "", "", "0.", "True", "False", ""], corr=1, kernel_us=4),
     "attention", "forward", 4 * 2 * 8 * 128 * 128 * 64 // 2),
    # cuDNN attention backward, not causal (arg 14), S_kv 256 ≠ S_q 128: 2.5 · 4·B·H·S_q·S_kv·D
    (op("aten::_scaled_dot_product_cudnn_attention_backward", 0, 10,
        [[2, 8, 128, 64], [2, 8, 128, 64], [2, 8, 256, 64]] + [[]] * 13, ["c10::BFloat16"] * 16,
        [""] * 14 + ["False", ""], corr=1, kernel_us=4),
     "attention", "backward", 2.5 * 4 * 2 * 8 * 128 * 256 * 64),
    # conv2d forward: N 2, C_in 3 → C_out 16, 3×3 kernel, stride 2, padding 1 on 32×32: out 16×16
    (op("aten::convolution", 0, 10, [[2, 3, 32, 32], [16, 3, 3, 3], [16], [], [], [], [], [], []],
        ["float"] * 3 + ["ScalarList"] * 3 + ["Scalar", "ScalarList", "Scalar"],
        ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"], corr=1, kernel_us=4),
     "conv", "forward", 2 * 2 * (16 * 16) * (16 * 3 * 3 * 3)),
    # its backward, grad input and grad weight asked for: twice the forward
    (op("aten::convolution_backward", 0, 10, [[2, 16, 16, 16], [2, 3, 32, 32], [16, 3, 3, 3]] + [[]] * 8,
        ["float"] * 3 + [""] * 8, [""] * 10 + ["[True, True, False]"], corr=1, kernel_us=4),
     "conv", "backward", 2 * 2 * 2 * (16 * 16) * (16 * 3 * 3 * 3)),
]


@pytest.mark.parametrize("events, family, pass_, flops", CASES,
                         ids=[c[0][0]["name"].removeprefix("aten::") + f"-{c[2]}" for c in CASES])
def test_flops_from_shapes(tmp_path, events, family, pass_, flops):
    write_trace(tmp_path / "run" / "rank0.json", events, rank=0,
                deviceProperties=[{"name": "NVIDIA H200"}])
    ingest([tmp_path / "run"], db=tmp_path / "db.duckdb")
    (r,) = query(tmp_path / "db.duckdb", "op_efficiency").iter_rows(named=True)
    assert (r["family"], r["pass"], r["num_ops"]) == (family, pass_, 1)
    assert r["flops"] == pytest.approx(flops, rel=1e-12)
    assert r["gpu_ns"] == 4 * US  # the one kernel its runtime call launched
    assert r["achieved_tflops"] == pytest.approx(flops / (4 * US) / 1e3)
    peak = {"bf16": 989, "fp16": 989, "fp32": 67}[r["dtype"]]
    assert r["achieved_pct_of_peak"] == pytest.approx(100 * flops / 4e-6 / (peak * 1e12))


def test_compute_efficiency_is_flops_weighted(tmp_path):
    # a bf16 mm of F1 = 2·64·32·16 FLOPs in 4 µs and a bf16 bmm of F2 = 4·F1 in 2 µs
    events = (op("aten::mm", 0, 10, [[64, 32], [32, 16]], ["c10::BFloat16"] * 2, corr=1, kernel_us=4)
              + op("aten::bmm", 20, 10, [[4, 64, 32], [4, 32, 16]], ["c10::BFloat16"] * 2, corr=2, kernel_us=2))
    write_trace(tmp_path / "run" / "rank0.json", events, rank=0, deviceProperties=[{"name": "NVIDIA H200"}])
    ingest([tmp_path / "run"], db=tmp_path / "db.duckdb")
    (r,) = query(tmp_path / "db.duckdb", "compute_efficiency").iter_rows(named=True)
    f1, f2 = 2 * 64 * 32 * 16, 4 * 2 * 64 * 32 * 16
    pct = (f1 + f2) / 6e-6 / H200_BF16_PEAK * 100  # one (gemm, any, bf16) group: its own % of peak
    assert r["flops"] == f1 + f2 and r["gpu_ns"] == 6 * US
    assert r["compute_efficiency_pct_of_peak"] == pytest.approx(pct)
    assert r["flops_pct_of_counted_gemm"] == 100


@pytest.fixture(scope="module")
def h200_db(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("h200") / "h200.duckdb"
    report = ingest([FIXTURES / "h200" / "h200-bf16-ddp-1"], db=db, workers=1)
    assert not report.errors
    return db


def test_h200_bf16_gemm_and_attention_are_plausible(h200_db):
    """Real H200 trace (bf16 autocast GPT, hidden 2048, seq 2048, micro-batch 8, cuDNN SDPA):
    GEMM and attention TFLOP/s between 0 and the dense bf16 peak, every op with FLOPs."""
    rows = {(r["family"], r["pass"]): r for r in query(h200_db, "op_efficiency").iter_rows(named=True)}
    assert set(rows) == {("gemm", "any"), ("attention", "forward"), ("attention", "backward")}
    for r in rows.values():
        assert r["dtype"] == "bf16" and r["num_ops_without_flops"] == 0
        assert 0 < r["achieved_tflops"] * 1e12 < H200_BF16_PEAK, r
    # one causal forward attention call: 4·B·H·S·S·D ÷ 2 with B 8, H 16, S 2048, D 128
    fwd = rows[("attention", "forward")]
    assert fwd["flops"] == pytest.approx(fwd["num_ops"] * 4 * 8 * 16 * 2048 * 2048 * 128 / 2)
    (c,) = query(h200_db, "compute_efficiency").iter_rows(named=True)
    assert 0 < c["compute_efficiency_pct_of_peak"] < 100
