"""idle_breakdown (scaletrace's own) and hta_idle_time_breakdown on hand-written traces and the
shared real ones; expected values derived here."""

from __future__ import annotations

import pytest

from conftest import cpu, kernel, query, shared_runs, write_trace
from scaletrace.pipeline import connect, ingest
from scaletrace.pipeline.read.intervals import merge

US = 1000  # ns per µs
PARTS = ("host_wait_ns", "dependency_wait_ns", "other_idle_ns")


def launched(name, ts, dur, launch_ts, corr, stream=7):
    """A kernel and the runtime call that launched it (same correlation)."""
    return [cpu("cudaLaunchKernel", launch_ts, 2, cat="cuda_runtime", correlation=corr),
            kernel(name, ts, dur, stream=stream, corr=corr)]


def gaps_trace():
    """One step [0, 200) µs; kernels on stream 7 (µs):
    k1 [10,30) launched at 5; k2 [50,60) launched at 40 (after the gap [30,50) began: host wait);
    k3 [100,120) launched at 20 (before the gap [60,100) began: dependency wait);
    k4 [130,140) on stream 8 with no launching call (the gap [120,130): other);
    k5 [135,150) on stream 7 launched at 125: overlaps k4, so no gap before it."""
    return [cpu("ProfilerStep#1", 0, 200),
            *launched("k1", 10, 20, 5, 1), *launched("k2", 50, 10, 40, 2),
            *launched("k3", 100, 20, 20, 3), kernel("k4", 130, 10, stream=8, corr=99),
            *launched("k5", 135, 15, 125, 5)]


def test_gaps_classified_by_the_launch_of_the_kernel_that_ends_them(tmp_path):
    write_trace(tmp_path / "run" / "rank0.json", gaps_trace(), rank=0)
    ingest([tmp_path / "run"], db=tmp_path / "db.duckdb")
    (r,) = query(tmp_path / "db.duckdb", "idle_breakdown").iter_rows(named=True)
    host, dependency, other = 50 - 30, 100 - 60, 130 - 120
    span = 150 - 10
    assert (r["step"], r["span_ns"]) == (1, span * US)
    assert {c: r[c] for c in PARTS} == {"host_wait_ns": host * US, "dependency_wait_ns": dependency * US,
                                        "other_idle_ns": other * US}
    assert r["idle_ns"] == (host + dependency + other) * US
    assert r["host_wait_pct"] == pytest.approx(100 * host / span)


def test_hta_idle_per_stream_on_the_same_trace(tmp_path):
    write_trace(tmp_path / "run" / "rank0.json", gaps_trace(), rank=0)
    ingest([tmp_path / "run"], db=tmp_path / "db.duckdb")
    got = {(r["stream"], r["idle_category"]): r["idle_time_us"]
           for r in query(tmp_path / "db.duckdb", "hta_idle_time_breakdown").iter_rows(named=True)}
    # stream 7: k2 after k1 (gap 20, launched at 40 > 30: host wait), k3 after k2 (gap 40,
    # launched at 20 < 60, 40 ≥ 30: other), k5 after k3 (gap 15, launched at 125 > 120: host
    # wait); the first kernel is 'other' with no interval.  stream 8: k4 alone.
    assert got == {(7, "host_wait"): 20 + 15, (7, "other"): 40, (8, "other"): 0}


def test_trace_without_steps_has_one_whole_trace_row(tmp_path):
    events = [e for e in gaps_trace() if e["name"] != "ProfilerStep#1"]
    write_trace(tmp_path / "run" / "rank0.json", events, rank=0)
    ingest([tmp_path / "run"], db=tmp_path / "db.duckdb")
    (r,) = query(tmp_path / "db.duckdb", "idle_breakdown").iter_rows(named=True)
    assert r["step"] is None and r["idle_ns"] == (20 + 40 + 10) * US


def test_cpu_only_gaps_are_host_wait(fixtures_db):
    rows = query(fixtures_db, "idle_breakdown", run_id="micro-cpu-gloo").to_dicts()
    assert rows and all(r["dependency_wait_ns"] == r["other_idle_ns"] == 0 for r in rows)
    assert all(r["host_wait_ns"] == r["idle_ns"] for r in rows)


def device_slots(db_path, run_id):
    """(rank, step) -> (slot start, slot end, idle in the slot, idle before the step's own first event),
    from the device events in Python (the step model, docs/metrics.md): a step's slot runs from the
    end of the rank's earlier steps' device work to the end of its own; its idle is the slot less the
    merged intervals of every profiled step's events inside it, whichever step launched them."""
    with connect(db_path) as db:
        events = db.sql("SELECT t.rank, d.step, d.ts_ns, d.ts_ns + d.dur_ns AS end_ns FROM device_events d "
                        "JOIN traces t USING (trace_id) WHERE t.run_id = $run AND d.step IS NOT NULL",
                        {"run": run_id}).to_dicts()
    out = {}
    for rank in {e["rank"] for e in events}:
        mine = [e for e in events if e["rank"] == rank]
        bounds = {}
        for e in mine:
            lo, hi = bounds.get(e["step"], (e["ts_ns"], e["end_ns"]))
            bounds[e["step"]] = (min(lo, e["ts_ns"]), max(hi, e["end_ns"]))
        bounds = {s: b for s, b in sorted(bounds.items()) if b[1] > b[0]}
        busy = merge([(e["ts_ns"], e["end_ns"]) for e in mine if e["end_ns"] > e["ts_ns"]])

        def covered(lo, hi):
            return sum(max(0, min(e, hi) - max(s, lo)) for s, e in busy)

        start = min(b[0] for b in bounds.values()) if bounds else None
        for step, (first, last) in bounds.items():
            end = max(start, last) if out.get((rank, "end")) is None else max(out[(rank, "end")], last)
            lo = start if out.get((rank, "end")) is None else out[(rank, "end")]
            before = max(lo, min(first, end))
            out[(rank, step)] = (lo, end, (end - lo) - covered(lo, end), (before - lo) - covered(lo, before))
            out[(rank, "end")] = end
    return out


@pytest.mark.parametrize("run_id", shared_runs())
def test_parts_sum_to_the_idle_of_the_device_timeline(run_id, shared_db):
    """Every shared trace gets an answer (HTA fails on some); the parts, from the gaps between
    merged events in SQL, sum to idle_ns, which is the step's device slot less the merged device
    events inside it (computed here in Python, an independent computation), per step, or the
    whole trace's idle (interval unions of ingest) where it has no steps; idle ≤ the step's slot."""
    rows = query(shared_db, "idle_breakdown", run_id=run_id).to_dicts()
    assert rows, "every trace must give an answer"
    whole = {r["rank"]: r["idle_ns"] for r in query(shared_db, "rank_breakdown", run_id=run_id).iter_rows(named=True)}
    slots = device_slots(shared_db, run_id)
    for r in rows:
        assert all(r[c] >= 0 for c in PARTS), r
        if r["step"] is None:
            assert r["between_steps_ns"] == 0 and sum(r[c] for c in PARTS) == whole[r["rank"]] == r["idle_ns"], r
            continue
        lo, hi, idle, before = slots[(r["rank"], r["step"])]
        assert (r["span_ns"], r["between_steps_ns"]) == (hi - lo, before), r
        assert sum(r[c] for c in PARTS) == idle == r["idle_ns"] <= r["span_ns"], r