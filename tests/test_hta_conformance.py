"""hta_temporal_breakdown / hta_comm_comp_overlap against HTA itself on the shared real traces.

HTA (holistictraceanalysis, a dev dependency) runs in the test on the same
trace folder; where it fails, scaletrace must still ingest the run and give
numbers.
"""

from __future__ import annotations

import copy
import functools
import logging
import math

import pytest

from conftest import query, shared_runs


@functools.lru_cache(maxsize=1)
def _loaded(run_dir):
    """HTA's TraceAnalysis of one run folder, or the exception HTA raised: loaded once for the two tests
    of a run (tests/conftest.py schedules them together), each of which works on its own deep copy, as
    on a fresh load."""
    hta = pytest.importorskip("hta.trace_analysis")
    logging.getLogger("hta").setLevel(logging.ERROR)
    try:
        return hta.TraceAnalysis(trace_dir=str(run_dir))
    except Exception as exc:  # HTA's failures are data here, not test errors
        return exc


def analysis_of(run_dir):
    """A fresh TraceAnalysis of ``run_dir`` (a copy of the loaded one); raises what loading it raised."""
    loaded = _loaded(run_dir)
    if isinstance(loaded, Exception):
        raise loaded
    return copy.deepcopy(loaded)


def hta_results(run_dir):
    """HTA's two tables for one run folder, or the exception HTA raised."""
    try:
        analysis = analysis_of(run_dir)
        temporal = analysis.get_temporal_breakdown(visualize=False)
        overlap = analysis.get_comm_comp_overlap(visualize=False)
    except Exception as exc:  # HTA's failures are data here, not test errors
        return exc
    return temporal, overlap


@pytest.mark.parametrize("run_id", shared_runs())
def test_matches_hta(run_id, shared_db, shared_traces):
    result = hta_results(shared_traces / run_id)
    ours = query(shared_db, "rank_breakdown", run_id=run_id)
    assert ours.height >= 1 and ours["span_ns"].null_count() == 0, "every run must give numbers"
    if isinstance(result, Exception):
        pytest.skip(f"HTA fails on {run_id} ({type(result).__name__}); scaletrace gave numbers")
    temporal, overlap = result
    mine = {r["rank"]: r for r in query(shared_db, "hta_temporal_breakdown", run_id=run_id).iter_rows(named=True)}
    assert set(mine) == set(int(r) for r in temporal["rank"])
    for r in temporal.to_dict("records"):
        m = mine[int(r["rank"])]
        for col in ("idle_time", "compute_time", "non_compute_time", "kernel_time"):
            assert m[f"{col}_us"] == pytest.approx(float(r[f"{col}(us)"]), abs=1e-6), (col, r)  # exact: same µs
        for col in ("idle_time", "compute_time", "non_compute_time"):  # HTA's *_pctg: ÷ its kernel_time
            assert m[f"{col}_pct_of_kernel_time"] == pytest.approx(float(r[f"{col}_pctg"]), abs=0.01), (col, r)
    mine_ov = {r["rank"]: r["comp_comm_overlap_pct_of_comm"]
               for r in query(shared_db, "hta_comm_comp_overlap", run_id=run_id).iter_rows(named=True)}
    for r in overlap.to_dict("records"):
        theirs = float(r["comp_comm_overlap_pctg"])
        if math.isnan(theirs):
            assert mine_ov[int(r["rank"])] is None
        else:
            assert mine_ov[int(r["rank"])] == pytest.approx(theirs, abs=0.01)


def hta_idle(run_dir):
    """HTA's get_idle_time_breakdown over every rank of one run, or the exception HTA raised."""
    try:
        analysis = analysis_of(run_dir)
        idle, _ = analysis.get_idle_time_breakdown(ranks=sorted(analysis.t.traces), visualize=False)
    except Exception as exc:  # HTA's failures are data here, not test errors
        return exc
    return idle


@pytest.mark.parametrize("run_id", shared_runs())
def test_idle_matches_hta(run_id, shared_db, shared_traces):
    result = hta_idle(shared_traces / run_id)
    if isinstance(result, Exception):
        pytest.skip(f"HTA fails on {run_id} ({type(result).__name__}); idle_breakdown answers there")
    if (result["idle_time"] < 0).any():
        pytest.skip(f"HTA reports negative idle time on {run_id}; idle_breakdown gives the sane answer")
    mine = {(r["rank"], r["stream"], r["idle_category"]): r
            for r in query(shared_db, "hta_idle_time_breakdown", run_id=run_id).iter_rows(named=True)}
    theirs = {(int(r["rank"]), int(r["stream"]), r["idle_category"]): r for r in result.to_dict("records")}
    assert set(mine) == set(theirs)
    for key, r in theirs.items():
        assert mine[key]["idle_time_us"] == pytest.approx(float(r["idle_time"]), abs=1e-6), key  # exact: same µs
        if math.isnan(r["idle_time_ratio"]):
            assert mine[key]["idle_time_ratio"] is None, key
        else:  # both rounded to 2 decimals (numpy: half to even; DuckDB: half away from zero)
            assert mine[key]["idle_time_ratio"] == pytest.approx(float(r["idle_time_ratio"]), abs=0.0100001), key
