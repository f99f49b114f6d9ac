"""hta_temporal_breakdown on ns-resolution traces whose sub-µs kernels invert under HTA's rounding.

HTA rounds an ns-resolution event to [ceil(ts), floor(ts + dur)] µs: a kernel shorter than a µs that
crosses no whole µs becomes [k + 1, k], -1 µs long, and HTA's arithmetic then gives a kernel time of
-1 µs and compute at 200 % (it raises on its own check) or a negative compute time (it does not).
The query keeps HTA's figures wherever they are possible and otherwise takes each inverted kernel as
zero length; the expected figures are worked out below from the rounded intervals.
"""

from __future__ import annotations

import logging

import pytest

from conftest import kernel, query, write_trace
from scaletrace.pipeline import ingest

T0 = 1_000_000  # µs: whole-µs starts stay exact in a double and HTA's int32 columns

RUNS = {
    # two compute kernels inside the µs (T0+10, T0+11): each rounds to [T0+11, T0+10]
    "inverted-only": [kernel("gemm_a", T0 + 10.2, 0.5, corr=1), kernel("gemm_b", T0 + 10.4, 0.5, corr=2)],
    # the same two, then a 30 µs NCCL kernel [T0+20, T0+50]
    "inverted-and-comm": [kernel("gemm_a", T0 + 10.2, 0.5, corr=1), kernel("gemm_b", T0 + 10.4, 0.5, corr=2),
                          kernel("ncclKernel_AllReduce_RING_LL_Sum_float", T0 + 20, 30.0, corr=3)],
    # [T0, T0+100], an inverted one [T0+101, T0+100], [T0+102, T0+200]: HTA's figures are possible
    "inverted-inside": [kernel("gemm_a", T0, 100.0, corr=1), kernel("gemm_b", T0 + 100.2, 0.5, corr=2),
                        kernel("gemm_c", T0 + 102, 98.0, corr=3)],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ns-rounding")
    for run_id, events in RUNS.items():
        write_trace(root / run_id / "rank0.json", events, rank=0)
    db = root / "t.duckdb"
    report = ingest([root / run_id for run_id in RUNS], db=db, workers=1)
    assert not report.errors, [o.line() for o in report.errors]
    return root, {r["run_id"]: r for r in query(db, "hta_temporal_breakdown").iter_rows(named=True)}


def hta_temporal(run_dir):
    hta = pytest.importorskip("hta.trace_analysis")
    logging.getLogger("hta").setLevel(logging.ERROR)
    try:
        return hta.TraceAnalysis(trace_dir=str(run_dir)).get_temporal_breakdown(visualize=False).iloc[0]
    except AssertionError as exc:  # HTA's own check of its figures
        return exc


def test_every_kernel_inverted_gives_zero_not_minus_one(runs):
    _, rows = runs
    row = rows["inverted-only"]
    # HTA's arithmetic: groups [T0+11, T0+10] twice -> busy -2, kernel time T0+10 - (T0+11) = -1, compute -2
    # (200 % of the kernel time).  Zero length at T0+11 each: kernel time 0, busy 0, compute 0.
    assert (row["kernel_time_us"], row["idle_time_us"], row["compute_time_us"], row["non_compute_time_us"]) == (0, 0, 0, 0)
    assert row["compute_time_pct_of_kernel_time"] is None  # 0 ÷ 0 (HTA: NaN)
    assert row["clamped"] is True


def test_negative_compute_is_clamped_where_hta_lets_it_through(runs):
    root, rows = runs
    row = rows["inverted-and-comm"]
    # zero-length kernels at T0+11, the NCCL kernel [T0+20, T0+50]: kernel time 50 - 11 = 39,
    # busy 30, idle 39 - 30 = 9, compute 0, non-compute 30 - 0 = 30
    assert row["kernel_time_us"] == 39 and row["idle_time_us"] == 9
    assert row["compute_time_us"] == 0 and row["non_compute_time_us"] == 30
    assert row["non_compute_time_pct_of_kernel_time"] == round(100 * 30 / 39, 2)
    assert row["clamped"] is True
    theirs = hta_temporal(root / "inverted-and-comm")
    if not isinstance(theirs, Exception):  # HTA: compute -1 - 1 = -2 µs, the impossible figure replaced
        assert theirs["compute_time(us)"] == -2


def test_hta_figures_kept_where_possible(runs):
    root, rows = runs
    row = rows["inverted-inside"]
    # HTA's arithmetic, kept: groups [T0, T0+100], [T0+101, T0+100], [T0+102, T0+200]:
    # busy 100 - 1 + 98 = 197, kernel time 200, idle 3, compute 197
    assert (row["kernel_time_us"], row["idle_time_us"], row["compute_time_us"]) == (200, 3, 197)
    assert row["clamped"] is False
    theirs = hta_temporal(root / "inverted-inside")
    if isinstance(theirs, Exception):
        pytest.fail(f"HTA raised on a trace whose figures are possible: {theirs!r}")
    for col in ("idle_time", "compute_time", "non_compute_time", "kernel_time"):
        assert row[f"{col}_us"] == float(theirs[f"{col}(us)"]), col
