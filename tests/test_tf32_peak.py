"""An fp32 matmul that ran on TF32 tensor cores is rated against the TF32 peak, and a % of peak above
100 is a warning wherever it is shown (op_efficiency, op_shape_efficiency, compute_efficiency, the
explain sentence), never a silent number.

The trace records such an op as float whatever math mode ran it; only the kernel's name shows TF32
(queries/reference/tensor_core_kernels.sql).  Expected figures are worked out from the A100 data
sheet's dense peaks: TF32 156 TFLOP/s, FP32 19.5 TFLOP/s.
"""

from __future__ import annotations

import polars as pl
import pytest

from conftest import cpu, kernel, query, spec_values, write_trace
from scaletrace.pipeline import ingest
from scaletrace.queries.analysis.efficiency import efficiency_per_run
from scaletrace.reports.run_explain import compute_sentence

A100_TF32, A100_FP32 = 156e12, 19.5e12
BIG, SMALL = 4096, 1024  # square fp32 matmuls
BIG_US, SMALL_US = 1100, 200
TF32_KERNEL = ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nt_align4>"
               "(cutlass_80_tensorop_s1688gemm_256x64_16x4_nt_align4::Params)")
SIMT_KERNEL = "ampere_sgemm_128x64_nn"


def mm(ts, n, corr, kernel_name, kernel_us):
    """One fp32 aten::mm [n, n] @ [n, n], its launch and its kernel."""
    return [cpu("aten::mm", ts, 5, **{"Input Dims": [[n, n], [n, n]], "Input type": ["float", "float"],
                                      "Concrete Inputs": ["", ""]}),
            cpu("cudaLaunchKernel", ts + 1, 1, cat="cuda_runtime", correlation=corr),
            kernel(kernel_name, ts + 10, kernel_us, corr=corr)]


RUNS = {
    # the big matmul on TF32 tensor cores, the small one on the FP32 pipes
    "tf32": mm(0, BIG, 1, TF32_KERNEL, BIG_US) + mm(2000, SMALL, 2, SIMT_KERNEL, SMALL_US),
    # the big matmul as fast, but its kernel's name shows no TF32: 640 % of the FP32 peak
    "impossible": mm(0, BIG, 1, SIMT_KERNEL, BIG_US),
}


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    root = tmp_path_factory.mktemp("tf32")
    for run_id, events in RUNS.items():
        write_trace(root / run_id / "rank0.json", events, rank=0,
                    deviceProperties=[{"name": "NVIDIA A100-SXM4-80GB"}])
    path = root / "t.duckdb"
    report = ingest([root / run_id for run_id in RUNS], db=path, workers=1)
    assert not report.errors, [o.line() for o in report.errors]
    return path


def pct(n: int, us: int, peak: float) -> float:
    return 100 * (2.0 * n ** 3) / (us / 1e6) / peak  # 2·M·N·K FLOPs over the kernel's time


def test_tf32_kernel_is_rated_against_the_tf32_peak(db):
    rows = {r["dtype"]: r for r in query(db, "op_efficiency", run_id="tf32").iter_rows(named=True)}
    assert set(rows) == {"tf32", "fp32"}
    assert rows["tf32"]["peak_tflops"] == A100_TF32 / 1e12
    assert rows["tf32"]["achieved_pct_of_peak"] == pytest.approx(pct(BIG, BIG_US, A100_TF32))  # 80 %, not 640 %
    assert rows["fp32"]["achieved_pct_of_peak"] == pytest.approx(pct(SMALL, SMALL_US, A100_FP32))  # 55 %
    assert all(r["warning"] is None for r in rows.values())
    run = query(db, "compute_efficiency", run_id="tf32").row(0, named=True)
    big, small = 2.0 * BIG ** 3, 2.0 * SMALL ** 3  # FLOPs-weighted mean of the two
    expected = (big * pct(BIG, BIG_US, A100_TF32) + small * pct(SMALL, SMALL_US, A100_FP32)) / (big + small)
    assert run["compute_efficiency_pct_of_peak"] == pytest.approx(expected)
    assert run["warning"] is None


def test_above_peak_is_a_warning_everywhere(db):
    above = pct(BIG, BIG_US, A100_FP32)
    assert above > 100  # the premise: 640 % of the FP32 peak
    op = query(db, "op_efficiency", run_id="impossible").row(0, named=True)
    assert op["achieved_pct_of_peak"] == pytest.approx(above)
    assert op["warning"] and f"{above:.0f} % of the fp32 peak" in op["warning"]
    shape = query(db, "op_shape_efficiency", run_id="impossible").row(0, named=True)
    assert shape["warning"] == op["warning"]
    compute = query(db, "compute_efficiency", run_id="impossible")
    run = compute.row(0, named=True)
    assert run["warning"] and f"gemm any (fp32) at {above:.0f} % of its peak" in run["warning"]
    best = pl.DataFrame({"run_id": ["impossible"], "sweep": ["s"], "world_size": [1]})
    ops = query(db, "op_efficiency", run_id="impossible")
    sentence = compute_sentence(efficiency_per_run(compute, ops, best), ops)
    assert f"{above:.0f} %" in sentence and "Warning: " + run["warning"] in sentence


def test_run_summary_warns_where_its_kernel_efficiency_is_above_peak(db):
    run = query(db, "run_summary", run_id="impossible").row(0, named=True)
    above = pct(BIG, BIG_US, A100_FP32)  # the one counted op is the run's whole kernel efficiency
    assert run["kernel_efficiency_pct_of_peak"] == pytest.approx(above)
    assert f"kernels reach {above:.0f} % of their peak" in run["warnings"]
    assert "of their peak" not in (query(db, "run_summary", run_id="tf32").row(0, named=True)["warnings"] or "")


def test_the_report_chart_flags_a_bar_above_peak(db):
    from scaletrace.reports.charts_explain import build_compute_efficiency

    best = pl.DataFrame({"run_id": ["impossible"], "sweep": ["s"], "world_size": [1]})
    ops = query(db, "op_efficiency", run_id="impossible")
    eff = efficiency_per_run(query(db, "compute_efficiency", run_id="impossible"), ops, best)
    spec = build_compute_efficiency(eff).to_dict()
    layers = spec["layer"]
    label = next(t["calculate"] for layer in layers for t in layer.get("transform", []) if t["as"] == "label_text")
    assert "datum.pct_of_peak > 100" in label and "above the peak" in label
    tooltips = [t["field"] for layer in layers for t in layer.get("encoding", {}).get("tooltip", [])]
    assert "warning" in tooltips
    rows = spec_values(spec)
    assert any(r.get("warning") and r["pct_of_peak"] > 100 for r in rows)  # the bar carries its warning
