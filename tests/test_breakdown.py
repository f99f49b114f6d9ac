"""rank_breakdown / rank_step_breakdown on hand-written traces; expected values derived here."""

from __future__ import annotations

import pytest

from conftest import assert_breakdown_matches_sweep, cpu, kernel, query, write_trace
from scaletrace.pipeline import ingest

US = 1000  # ns per µs


def row(df, **keys):
    for key, value in keys.items():
        df = df.filter(df[key] == value)
    assert df.height == 1, df
    return df.row(0, named=True)


def test_micro_2rank_rank0_whole_trace(fixtures_db):
    r = row(query(fixtures_db, "rank_breakdown", run_id="micro-2rank"), rank=0)
    # compute [10,110) [160,210) [310,400); comm [90,180) [380,450); memcpy [220,240)  (µs)
    compute = 100 + 50 + 90
    comm = 90 + 70
    overlap = (110 - 90) + (180 - 160) + (400 - 380)
    span = 450 - 10
    busy = (210 - 10) + (240 - 220) + (450 - 310)
    assert r["compute_ns"] == compute * US
    assert r["comm_ns"] == comm * US
    assert r["memory_ns"] == 20 * US
    assert r["overlap_ns"] == overlap * US
    assert r["exposed_comm_ns"] == (comm - overlap) * US
    assert r["exposed_memory_ns"] == 20 * US  # memcpy overlaps neither compute nor comm
    assert r["span_ns"] == span * US
    assert r["busy_ns"] == busy * US
    assert r["idle_ns"] == (span - busy) * US
    assert r["overlap_pct_of_comm"] == pytest.approx(100 * overlap / comm)
    assert r["exposed_comm_pct"] == pytest.approx(100 * (comm - overlap) / span)


def test_micro_2rank_steps_follow_the_launch(fixtures_db):
    df = query(fixtures_db, "rank_step_breakdown", run_id="micro-2rank").filter(rank=0)
    step1, step2 = row(df, step=1), row(df, step=2)
    # step 1: compute [10,110) [160,210), comm [90,180), memcpy [220,240)
    assert step1["compute_ns"] == (100 + 50) * US
    assert step1["exposed_comm_ns"] == (90 - 20 - 20) * US
    assert step1["span_ns"] == (240 - 10) * US
    # step 2: compute [310,400), comm [380,450)
    assert step2["overlap_ns"] == (400 - 380) * US
    assert step2["exposed_comm_ns"] == (450 - 400) * US
    assert step2["step_cpu_ns"] == 300 * US


def test_issue_example_overlap_40_exposed_50(tmp_path):
    # compute [0,100) and [150,200), comm [80,170) -> overlap 20 + 20 = 40, exposed 90 - 40 = 50
    write_trace(tmp_path / "run" / "rank0.json", [
        kernel("gemm", 0, 100), kernel("gemm", 150, 50),
        kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 80, 90, stream=20),
    ], rank=0)
    db = tmp_path / "t.duckdb"
    assert not ingest([tmp_path / "run"], db=db, workers=1).errors
    r = query(db, "rank_breakdown").row(0, named=True)
    assert (r["overlap_ns"], r["exposed_comm_ns"]) == (40 * US, 50 * US)


def test_kernel_running_in_next_step_belongs_to_launching_step(tmp_path):
    events = [
        cpu("ProfilerStep#1", 0, 100, cat="user_annotation"),
        cpu("ProfilerStep#2", 100, 100, cat="user_annotation"),
        cpu("cudaLaunchKernel", 90, 2, cat="cuda_runtime", correlation=5),
        kernel("gemm", 150, 30, corr=5),  # runs during step 2, launched in step 1
    ]
    write_trace(tmp_path / "run" / "rank0.json", events, rank=0)
    db = tmp_path / "t.duckdb"
    assert not ingest([tmp_path / "run"], db=db, workers=1).errors
    df = query(db, "rank_step_breakdown")
    assert df["step"].to_list() == [1]
    assert df["compute_ns"].to_list() == [30 * US]


def test_cpu_only_gloo_lanes(fixtures_db):
    r = row(query(fixtures_db, "rank_breakdown", run_id="micro-cpu-gloo"), rank=0)
    # main thread: linear [1010.5,1110.5) (addmm inside), mul [1200.5,1350.5);
    # c10d::allreduce_ [1120.5,1150.5) and the copy_ inside it are dispatch, not compute.
    # gloo thread: gloo:all_reduce [1130.5,1250.5); aten::zeros on it is not compute.
    compute = 100 + 150
    comm = 120
    overlap = 1250.5 - 1200.5
    assert r["compute_ns"] == compute * US
    assert r["comm_ns"] == comm * US
    assert r["exposed_comm_ns"] == (comm - overlap) * US
    assert r["span_ns"] == (1350.5 - 1010.5) * US


def test_2021_schema_bare_array_string_tids(fixtures_db):
    r = row(query(fixtures_db, "rank_breakdown", run_id="micro-2021"), rank=1)  # rank from "rank-1"
    # Kernel [130,330), Memcpy [300,350): memory 50 of which 20 exposed
    assert (r["compute_ns"], r["memory_ns"], r["exposed_memory_ns"]) == (200 * US, 50 * US, 20 * US)


def test_every_part_matches_an_interval_sweep_on_every_fixture(fixtures_db):
    """Every column of every trace and step of the micro fixtures against conftest.sweep_breakdown
    over the ingested events (the parts sum to the span by construction: each is checked on its own)."""
    assert assert_breakdown_matches_sweep(fixtures_db) == 4 + 5  # windows: 4 traces, 5 (trace, step) pairs
