"""The step model (docs/metrics.md "The step model"): a step's CPU window, device window and device
slot, on generated traces where the device runs behind the host; every per-step figure (idle,
compute, the idle sentence of explain, the run's shares) on the slots; the CPU/device mismatch check
in both directions.  Expected figures derived here by hand."""

from __future__ import annotations

import polars as pl
import pytest

from conftest import SHARED_TRACES, cpu, kernel, query, write_trace
from scaletrace.pipeline import connect, ingest
from scaletrace.reports.run_explain import idle_sentence, step_sentence
from scaletrace.reports.words import duration

US = 1000  # ns per µs
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def launch(name, ts, dur, at, corr, stream):
    """A kernel on ``stream`` and the runtime call that launched it at ``at`` (same correlation)."""
    return [cpu("cudaLaunchKernel", at, 1, cat="cuda_runtime", correlation=corr),
            kernel(name, ts, dur, stream=stream, corr=corr)]


def behind_trace():
    """Three 100 µs ProfilerSteps [0,100) [100,200) [200,300); the device runs behind the host.
    Step n (n = 0, 1, 2) launches, µs: a GEMM on stream 7 at 10 + 100n, running [20 + 100n, 80 + 100n),
    and an all-reduce on stream 8 at 50 + 100n, running [130 + 100n, 160 + 100n) (waiting on a peer):
    GEMMs [20,80) [120,180) [220,280), all-reduces [130,160) [230,260) [330,360), so each step's
    all-reduce runs under the next step's GEMM, the last one alone."""
    events = [cpu(f"ProfilerStep#{n + 1}", 100 * n, 100, cat="user_annotation") for n in range(3)]
    for n in range(3):
        events += launch("gemm", 20 + 100 * n, 60, 10 + 100 * n, 10 + n, stream=7)
        events += launch(NCCL, 130 + 100 * n, 30, 50 + 100 * n, 20 + n, stream=8)
    return events


@pytest.fixture(scope="module")
def behind_db(tmp_path_factory):
    root = tmp_path_factory.mktemp("behind")
    write_trace(root / "behind" / "rank0.json", behind_trace(), rank=0)
    db = root / "b.duckdb"
    assert not ingest([root / "behind"], db=db, workers=1).errors
    return db


def test_windows_of_each_step(behind_db):
    """Own device windows (the events the step launched): step 1 [20,160), step 2 [120,260),
    step 3 [220,360): each overlaps the next.  Slots: from the end of the earlier steps' work
    (160, 260) to the end of the step's own: [20,160), [160,260), [260,360) — they tile [20,360)."""
    rows = query(behind_db, "rank_step_breakdown").sort("step").to_dicts()
    assert [(r["step"], r["step_cpu_ns"], r["device_window_ns"], r["span_ns"], r["device_lag_ns"]) for r in rows] == [
        (1, 100 * US, (160 - 20) * US, (160 - 20) * US, (160 - 100) * US),
        (2, 100 * US, (260 - 120) * US, (260 - 160) * US, (260 - 200) * US),
        (3, 100 * US, (360 - 220) * US, (360 - 260) * US, (360 - 300) * US)]


def test_per_step_idle_never_counts_a_neighbours_kernel(behind_db):
    """The device timeline: GEMMs [20,80) [120,180) [220,280), all-reduces [130,160) [230,260) [330,360).
    Slot 1 [20,160): busy [20,80) + [120,160) = 100, idle [80,120) = 40 (the old per-step window of
    step 1's own events [20,160) called step 2's GEMM [120,130) idle: 50).  Slot 2 [160,260): busy
    [160,180) + [220,260) = 60, idle [180,220) = 40.  Slot 3 [260,360): busy [260,280) + [330,360) = 50,
    idle [280,330) = 50.  Compute: 100, 20 + 40 = 60, 20; comm 30 each, exposed only step 3's (30)."""
    rows = {r["step"]: r for r in query(behind_db, "rank_step_breakdown").to_dicts()}
    got = {n: (r["idle_ns"], r["compute_ns"], r["comm_ns"], r["exposed_comm_ns"]) for n, r in rows.items()}
    assert got == {1: (40 * US, 100 * US, 30 * US, 0), 2: (40 * US, 60 * US, 30 * US, 0),
                   3: (50 * US, 20 * US, 30 * US, 30 * US)}
    assert all(r["idle_ns"] <= r["span_ns"] for r in rows.values())
    idle = {r["step"]: r for r in query(behind_db, "idle_breakdown").to_dicts()}
    # the steady-state slots only (step 1's is the first): [180,220) ends on step 3's GEMM launched
    # at 210 > 180: host wait; [280,330) on step 3's all-reduce launched at 250 < 280: dependency
    assert {n: (r["idle_ns"], r["host_wait_ns"], r["dependency_wait_ns"], r["between_steps_ns"])
            for n, r in idle.items()} == {2: (40 * US, 40 * US, 0, 0), 3: (50 * US, 0, 50 * US, 0)}


def test_one_idle_figure_in_the_run_and_in_words(behind_db):
    """The run's window: the steady-state slots 2 [160,260) and 3 [260,360) (slot 1, the first, holds
    no gap before it), 200 µs, idle 40 + 50 = 90 µs = 45 %, compute 60 + 20 = 80 µs = 40 %; the device
    period 200 / 2 = 100 µs.  The idle sentence says the same idle in ms and %: 90 / 2 = 45 µs per
    step of the 100 µs period."""
    (s,) = query(behind_db, "run_summary").to_dicts()
    assert s["idle_pct"] == pytest.approx(100 * 90 / 200)
    assert s["compute_pct"] == pytest.approx(100 * (60 + 20) / 200)
    assert s["device_step_period_ns"] == 100 * US
    assert s["step_time_ns"] == 100 * US and s["warnings"] is None
    idle = query(behind_db, "idle_breakdown")
    said = idle_sentence(idle)
    assert f"sat idle {duration(90 * US / 2)} per profiled step, 45 % of its {duration(100 * US)} on the device" in said
    # the step sentence: the same window per step and the same idle share
    step = step_sentence(s)
    assert f"the profiled steps' device window ({duration(100 * US)} a step) is" in step and "45 % idle" in step


def test_run_breakdown_parts_of_the_step_fit_the_step(behind_db):
    """ms per step on the steady-state slots 2 and 3: compute (60 + 20) / 2 = 40 µs, exposed comm
    (0 + 30) / 2 = 15 µs, idle (40 + 50) / 2 = 45 µs = idle_pct × the 100 µs period: the bar is the
    period (here also the step time) it is labelled with."""
    (b,) = query(behind_db, "run_breakdown").to_dicts()
    assert b["compute_of_step_ns"] == pytest.approx(40 * US)
    assert b["exposed_comm_of_step_ns"] == pytest.approx(15 * US)
    assert b["idle_of_step_ns"] == pytest.approx(45 * US) == b["idle_pct"] / 100 * b["step_basis_ns"]
    parts = sum(b[f"{p}_of_step_ns"] for p in ("compute", "exposed_comm", "exposed_memory", "other", "idle"))
    assert parts == pytest.approx(b["step_basis_ns"]) and b["step_basis_ns"] == b["step_time_ns"] == 100 * US


def _falling_behind(run, kernel_us, step_us=100, steps=4):
    """``steps`` ProfilerSteps of ``step_us``, each launching one GEMM of ``kernel_us`` at its start + 1;
    the GEMMs run back to back from 10 µs (each starts when the previous ends, or at its launch)."""
    events, free = [], 10
    for n in range(steps):
        start = max(free, n * step_us + 2)
        events += [cpu(f"ProfilerStep#{n + 1}", n * step_us, step_us, cat="user_annotation"),
                   *launch("gemm", start, kernel_us, n * step_us + 1, n + 1, stream=7)]
        free = start + kernel_us
    write_trace(run / "rank0.json", events, rank=0)
    return run


@pytest.fixture(scope="module")
def falling_db(tmp_path_factory):
    root = tmp_path_factory.mktemp("falling")
    db = root / "f.duckdb"
    assert not ingest([_falling_behind(root / "behind", 115), _falling_behind(root / "keeps", 90)],
                      db=db, workers=1).errors
    return db


def test_device_outlasting_the_cpu_step_is_a_warning(falling_db):
    """GEMMs of 115 µs in 100 µs CPU steps: slots 115 µs each (the first from its start), the device
    period 115 µs = 1.15 × the steps' CPU time: the device runs behind (the old check waited for
    1.5 ×), so the step time is the period (step_time_source 'device_period') and the ms-per-step bar
    is on it.  GEMMs of 90 µs, the first at 10 µs: [10,100), then [102,192) [202,292) [302,392):
    steady slots [100,192) [192,292) [292,392), period (392 − 100) / 3 µs, no warning, the host's
    100 µs step."""
    db = falling_db
    rows = {r["run_id"]: r for r in query(db, "run_summary").to_dicts()}
    behind, keeps = rows["behind"], rows["keeps"]
    assert behind["device_step_period_ns"] == 115 * US and behind["step_time_ns"] == 115 * US
    assert behind["step_time_source"] == "device_period"
    assert "the device runs behind the host" in behind["warnings"] and "1.15 × the same steps' CPU time (100 µs)" in behind["warnings"]
    assert keeps["device_step_period_ns"] == (392 - 100) * US // 3 and keeps["warnings"] is None
    assert keeps["step_time_source"] == "profiler_step"
    b = {r["run_id"]: r for r in query(db, "run_breakdown").to_dicts()}
    assert b["behind"]["step_basis"] == "device_period" and b["behind"]["step_basis_ns"] == 115 * US
    parts = sum(b["behind"][f"{p}_of_step_ns"] for p in ("compute", "exposed_comm", "exposed_memory", "other", "idle"))
    assert parts == pytest.approx(115 * US)  # compute 115 a step, no idle
    assert b["keeps"]["step_basis"] == "device_period" and b["keeps"]["step_basis_ns"] == pytest.approx((392 - 100) * US / 3)


def test_device_window_a_third_of_the_step_is_a_warning(tmp_path):
    """One 300 µs step launching a 100 µs GEMM: the device window is 100 µs, 0.33 × the step; its
    shares (compute 100 %) are of that window, so a warning says so, and the bar in ms is that
    window's (compute 100 µs, idle 0), labelled with the host's 300 µs step beside it."""
    run = tmp_path / "third"
    write_trace(run / "rank0.json", [cpu("ProfilerStep#1", 0, 300, cat="user_annotation"),
                                     *launch("gemm", 100, 100, 50, 1, stream=7)], rank=0)
    db = tmp_path / "t.duckdb"
    assert not ingest([run], db=db, workers=1).errors
    (s,) = query(db, "run_summary").to_dicts()
    assert s["compute_pct"] == pytest.approx(100)
    assert "covers 33 % of the profiled steps' CPU time 300 µs" in s["warnings"] and "compute 100 %" in s["warnings"]
    (b,) = query(db, "run_breakdown").to_dicts()
    assert (b["compute_of_step_ns"], b["idle_of_step_ns"]) == (pytest.approx(100 * US), 0)
    assert b["step_time_ns"] == 300 * US and b["step_basis_ns"] == 100 * US
    from scaletrace.reports.charts_step import _spread
    assert _spread(query(db, "run_breakdown"))["si_label"].to_list() == ["100 µs device · host step 300 µs"]


@pytest.mark.skipif(not SHARED_TRACES.is_dir(), reason="the shared real traces are absent")
def test_the_identities_on_the_shared_traces(shared_db):
    """Every real trace: each step's idle ≤ its slot; the slots of a rank tile its profiled steps'
    window (Σ slot = run window, Σ idle = its idle); the mean idle per step ≤ the mean slot; the
    run's idle_pct is Σ idle ÷ Σ slot over the ranks' steady-state slots (each rank's but its first,
    unless it has one: one idle figure), and the device period is Σ slot ÷ their count."""
    steps = query(shared_db, "rank_step_breakdown")
    assert steps.height and (steps["idle_ns"] <= steps["span_ns"]).all()
    assert (steps["idle_ns"] >= 0).all()
    per_rank = steps.group_by("run_id", "rank").agg(span=pl.col("span_ns").sum(), idle=pl.col("idle_ns").sum(),
                                                    pct=100 * pl.col("idle_ns").sum() / pl.col("span_ns").sum())
    with connect(shared_db) as db:
        window = db.sql("SELECT t.run_id, t.rank, max(d.ts_ns + d.dur_ns) - min(d.ts_ns) AS window_ns "
                        "FROM device_events d JOIN traces t USING (trace_id) WHERE d.step IS NOT NULL "
                        "GROUP BY ALL HAVING max(d.ts_ns + d.dur_ns) > min(d.ts_ns)")
    joined = per_rank.join(window, on=["run_id", "rank"])
    assert joined.height == per_rank.height and (joined["span"] == joined["window_ns"]).all()
    summary = {r["run_id"]: r for r in query(shared_db, "run_summary").to_dicts()}
    first = pl.col("step") == pl.col("step").min().over("run_id", "rank")
    steady = steps.filter(~first | (pl.len().over("run_id", "rank") == 1))
    for (run,), g in steady.group_by("run_id"):
        assert summary[run]["idle_pct"] == pytest.approx(100 * g["idle_ns"].sum() / g["span_ns"].sum()), run
        assert summary[run]["device_step_period_ns"] == pytest.approx(g["span_ns"].sum() / g.height, abs=1), run
    idle = query(shared_db, "idle_breakdown").filter(pl.col("step").is_not_null())
    assert (idle["idle_ns"] <= idle["span_ns"]).all()
    assert idle["idle_ns"].mean() <= idle["span_ns"].mean()


def test_the_step_chart_labels_its_bar_with_the_length_it_draws(falling_db):
    """The falling-behind run's bar is its 115 µs device period, its step time (never a 115 µs bar
    under a '100 µs' label); the run that keeps up: its (392 − 100) / 3 µs period, within 10 % of its
    100 µs step, so the label does not name the host's step."""
    from scaletrace.reports.chartkit import si_time
    from scaletrace.reports.charts_step import _long_parts, _spread, build_step_time

    breakdown = query(falling_db, "run_breakdown")
    labels = dict(_spread(breakdown).select("run_id", "si_label").iter_rows())
    assert labels == {"behind": "115 µs", "keeps": si_time((392 - 100) * US / 3)}
    bars = _long_parts(breakdown).group_by("run_id").agg(pl.col("ms").sum(), pl.col("step_ms").first())
    for r in bars.iter_rows(named=True):
        assert r["ms"] == pytest.approx(r["step_ms"]) and r["step_ms"] == pytest.approx({"behind": 0.115, "keeps": 0.292 / 3}[r["run_id"]], abs=1e-6)
    build_step_time(breakdown).to_dict()  # the chart builds


def test_throughput_uses_the_device_period_where_the_device_runs_behind(tmp_path):
    """The falling-behind run (115 µs GEMMs in 100 µs CPU steps) with 1150 tokens a step, 1e5 FLOPs a
    token and a 1e13 FLOP/s peak: the device paces the loop, one step per 115 µs, so tokens/s = 1150 ÷
    115 µs = 1e7 and MFU = 1e7 × 1e5 ÷ 1e13 = 10 % (on the host's 100 µs step: 1.15e7, 11.5 %, more
    than the kernels did); energy per token, tokens per GPU on the same step."""
    import json
    run = _falling_behind(tmp_path / "paced", 115)
    (run / "run.json").write_text(json.dumps({"world_size": 1, "tokens_per_step": 1150,
                                              "model": {"flops_per_token": 1e5},
                                              "device": {"name": "X", "peak_flops": 1e13}}))
    db = tmp_path / "p.duckdb"
    assert not ingest([run], db=db, workers=1).errors
    (s,) = query(db, "run_summary").to_dicts()
    assert (s["step_time_ns"], s["step_time_source"]) == (115 * US, "device_period")
    assert s["tokens_per_s"] == pytest.approx(1150 / 115e-6) == s["tokens_per_s_per_gpu"]
    assert s["mfu_pct"] == pytest.approx(100 * (1150 / 115e-6) * 1e5 / 1e13)
    assert "tokens/s, MFU and energy per token are of that period" in s["warnings"]
    assert "the host's step 100 µs (profiler_step)" in s["warnings"]


def test_a_step_without_device_work_is_left_out_of_the_step_time(tmp_path):
    """ProfilerSteps of 200 µs (a 100 µs GEMM), 10 µs (no device work) and 200 µs, 220 µs (GEMMs): the
    median of all four would be (200 + 200) / 2 = 200 with the empty one, but of three ProfilerSteps
    [200, 10, 200] it would be 200 and of [200, 10] 105; here the steps with device work are 200, 200,
    220: median 200, and one of the four steps is said to have launched no device work.  Two steps,
    one empty: 200 µs (not 105)."""
    def steps(run, durs, empty):
        events, t = [], 0
        for n, d in enumerate(durs):
            events.append(cpu(f"ProfilerStep#{n + 1}", t, d, cat="user_annotation"))
            if n not in empty:
                events += launch("gemm", t + 5, 100, t + 1, n + 1, stream=7)
            t += d
        write_trace(run / "rank0.json", events, rank=0)
        return run
    db = tmp_path / "e.duckdb"
    assert not ingest([steps(tmp_path / "four", [200, 10, 200, 220], {1}), steps(tmp_path / "two", [200, 10], {1})],
                      db=db, workers=1).errors
    rows = {r["run_id"]: r for r in query(db, "run_summary").to_dicts()}
    assert rows["two"]["step_time_ns"] == 200 * US and rows["four"]["step_time_ns"] == 200 * US
    assert (rows["two"]["num_steps"], rows["two"]["profiled_steps"]) == (1, 2)
    assert "1 of the 2 profiled steps launched no device work: left out of the step time" in rows["two"]["warnings"]
    assert "1 of the 4 profiled steps launched no device work" in rows["four"]["warnings"]
    spread = {r["run_id"]: r for r in query(db, "step_time_spread").to_dicts()}
    assert spread["two"]["p50_ns"] == 200 * US and spread["four"]["num_steps"] == 3


def test_the_idle_sentence_states_one_aggregate_over_ranks(tmp_path):
    """Rank 0: the behind trace, steady slots 2 and 3: 200 µs, idle 90 µs.  Rank 1: four 100 µs steps
    each launching a 90 µs GEMM at its start + 1 (running [2,92) [102,192) ...): steady slots 2-4,
    300 µs, idle 3 × 10 = 30 µs.  One aggregate: idle (90 + 30) ÷ 5 slots = 24 µs a step, of
    (200 + 300) ÷ 5 = 100 µs, 24 % = (90 + 30) ÷ 500 = run_summary.idle_pct (the mean of the
    ranks' ratios, (45 + 10) ÷ 2 = 27.5 %, is not the ms over the slot)."""
    run = tmp_path / "two-ranks"
    write_trace(run / "rank0.json", behind_trace(), rank=0)
    events = []
    for n in range(4):
        events += [cpu(f"ProfilerStep#{n + 1}", 100 * n, 100, cat="user_annotation"),
                   *launch("gemm", 100 * n + 2, 90, 100 * n + 1, n + 1, stream=7)]
    write_trace(run / "rank1.json", events, rank=1)
    db = tmp_path / "r.duckdb"
    assert not ingest([run], db=db, workers=1).errors
    (s,) = query(db, "run_summary").to_dicts()
    assert s["idle_pct"] == pytest.approx(100 * 120 / 500) and s["device_step_period_ns"] == 100 * US
    said = idle_sentence(query(db, "idle_breakdown"))
    assert f"sat idle {duration(24 * US)} per profiled step, 24 % of its {duration(100 * US)} on the device" in said
    (b,) = query(db, "run_breakdown").to_dicts()
    assert b["idle_of_step_ns"] == pytest.approx(24 * US) and b["step_basis_ns"] == 100 * US
