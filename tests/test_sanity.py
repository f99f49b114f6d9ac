"""The sanity layer (issue 20): numbers that cannot be true carry a warning, one peak per run in every
command, no projection drawn that does not fit its own runs.  Expected values come from the
construction of each sweep (pipeline/synth.py, conftest.shaped_run), not from the code under test."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from conftest import cpu, kernel, query, shaped_run, write_trace
from scaletrace.pipeline import ingest
from scaletrace.pipeline.store.db import connect
from scaletrace.pipeline.synth import sweep_specs, write_run

H200_BF16_PEAK = 989e12  # the device table's dense bf16 peak (queries/reference/device_peaks.sql)


def _summary(db) -> dict:
    return {r["run_id"]: r for r in query(db, "run_summary").iter_rows(named=True)}


def test_every_mfu_above_100_pct_on_the_synth_sweep_is_a_warning(tmp_path):
    """`scaletrace synth --ranks 8,16,32 --tp 2 --straggler 3`: MFU = tokens · 6 · params ÷ (step · N · peak)
    from the generator's parameters; 310 % at 8 GPUs and 155 % at 16 are warned about, 78 % at 32 not.
    In 3 steps of 4 kernels: the command's 5 of 20 give the same step time, so the same MFU."""
    specs = sweep_specs([8, 16, 32], steps=3, kernels_per_step=4, tp=2, straggler=3)
    for spec in specs:
        write_run(tmp_path / "synth", spec)
    db = tmp_path / "s.duckdb"
    assert not ingest([tmp_path / "synth"], db=db, workers=1).errors
    rows = _summary(db)
    warned = 0
    for spec in specs:
        r = rows[spec.run_id]
        mfu = 100 * spec.tokens_per_step * 6 * spec.num_params / (spec.step_us * 1e-6 * spec.ranks * spec.peak_flops)
        assert r["mfu_pct"] == pytest.approx(mfu, rel=1e-6)
        says = (r["warnings"] or "").startswith(f"MFU {mfu:.0f} % is above 100 %")
        assert says == (mfu > 100), (spec.run_id, mfu, r["warnings"])
        warned += says
        # no recorded shapes in the synthetic traces: no kernel efficiency to compare with
        assert r["recorded_flops_per_step"] is None and r["kernel_efficiency_pct_of_peak"] is None
        assert r["model_flops_per_step"] == pytest.approx(spec.tokens_per_step * 6 * spec.num_params)
    assert warned == 2


@pytest.mark.parametrize("mfu_wanted", [60.0, 80.0])
def test_mfu_above_the_kernels_own_efficiency_is_a_warning(tmp_path, mfu_wanted):
    """One bf16 GEMM of 2·M·K·N FLOPs a step in gemm_us on an H200: the kernels reach
    2MKN ÷ gemm_us ÷ 989e12 = 69.5 % of peak.  run.json's flops_per_token sets MFU to 60 % (below:
    no warning) or 80 % (above: a warning naming both FLOP counts and their ratio)."""
    m = k = n = 4096
    gemm_us, step_us, tokens = 200, 1000, 8192
    run = shaped_run(tmp_path, "gemm", ranks=1, mnk=(m, k, n), gemm_us=gemm_us, host_gap_us=0, dep_gap_us=0,
                     step_us=step_us, tokens_per_step=tokens)
    fpt = mfu_wanted / 100 * H200_BF16_PEAK * step_us * 1e-6 / tokens
    manifest = json.loads((run / "run.json").read_text())
    manifest["model"] = {"flops_per_token": fpt}
    (run / "run.json").write_text(json.dumps(manifest))
    db = tmp_path / "g.duckdb"
    assert not ingest([run], db=db, workers=1).errors
    r = _summary(db)["gemm"]
    recorded = 2.0 * m * k * n
    kernel_pct = 100 * recorded / (gemm_us * 1e-6) / H200_BF16_PEAK
    assert r["mfu_pct"] == pytest.approx(mfu_wanted, rel=1e-6)
    assert r["kernel_efficiency_pct_of_peak"] == pytest.approx(kernel_pct, rel=1e-6)
    assert r["recorded_flops_per_step"] == pytest.approx(recorded)
    assert r["model_flops_per_step"] == pytest.approx(fpt * tokens)
    assert r["model_to_recorded_flops_ratio"] == pytest.approx(fpt * tokens / recorded)
    above = f"MFU {mfu_wanted:.1f} % is above the {kernel_pct:.1f} % its own GEMM / attention / convolution kernels"
    if mfu_wanted > kernel_pct:
        assert r["warnings"].startswith(above), r["warnings"]
        assert f"are {fpt * tokens / recorded:.2f} × what the recorded shapes count" in r["warnings"]
        assert "e+" not in r["warnings"]  # FLOP counts in SI words
    else:
        assert r["warnings"] is None


def _long_kernels(run: Path, step_us: int, kernel_us: int, steps: int = 2) -> Path:
    """ProfilerSteps of step_us, each launching one kernel of kernel_us, back to back on one stream."""
    events = []
    for s in range(steps):
        events += [cpu(f"ProfilerStep#{s + 1}", s * step_us, step_us, cat="user_annotation"),
                   cpu("cudaLaunchKernel", s * step_us + 1, 1, cat="cuda_runtime", correlation=s + 1),
                   kernel("gemm", 10 + s * kernel_us, kernel_us, corr=s + 1)]
    write_trace(run / "rank0.json", events, rank=0)
    return run


def test_a_traced_window_longer_than_the_step_is_a_warning(tmp_path):
    """Steps of 100 µs whose kernels run 300 µs each, back to back from 10 µs: [10,310) [310,610); the
    steady-state slot (the second) is 300 µs a step, 3 × the steps' 100 µs CPU time: the device runs
    behind and paces the loop, so the step time is that 300 µs period (the host's 100 µs step said
    in the warning).  Kernels of 90 µs fit their steps: no warning."""
    db = tmp_path / "w.duckdb"
    runs = [_long_kernels(tmp_path / "long", 100, 300), _long_kernels(tmp_path / "fits", 100, 90)]
    assert not ingest(runs, db=db, workers=1).errors
    rows = _summary(db)
    assert rows["long"]["traced_window_per_step_ns"] == 300_000 == rows["long"]["step_time_ns"]
    assert rows["long"]["step_time_source"] == "device_period"
    assert rows["long"]["step_time_to_traced_window_ratio"] == pytest.approx(1)
    assert ("the device runs behind the host: its steady-state step period (the mean device slot of 1 "
            "steady-state step) is 300 µs, 3.00 × the same steps' CPU time (100 µs) and 3.00 × the host's "
            "step 100 µs (profiler_step)") in rows["long"]["warnings"]
    assert rows["fits"]["warnings"] is None


def test_a_step_log_far_from_the_profiled_steps_is_a_warning(tmp_path):
    """The collector's step log says 10 × the profiled 2 ms steps: the traced steps are not the steps
    timed.  A log that agrees (2 ms) gives no warning."""
    for name, log_ns in (("slow-log", 20_000_000), ("same-log", 2_000_000)):
        spec = sweep_specs([2], workload=name, gzip=False)[0]
        run = write_run(tmp_path, spec)
        lines = [{"step": i, "start_ns": i * log_ns, "dur_ns": log_ns, "tokens": 8192, "profiled": False}
                 for i in range(6)]
        (run / "rank0.steps.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    db = tmp_path / "l.duckdb"
    assert not ingest([tmp_path / "slow-log-2", tmp_path / "same-log-2"], db=db, workers=1).errors
    rows = _summary(db)
    assert rows["slow-log-2"]["step_time_source"] == "step_log"
    assert "step time 20 ms (the collector's step log, steps outside the profiled window) is 10.00 × the " \
           "profiled steps' 2 ms" in rows["slow-log-2"]["warnings"]
    assert "step log" not in (rows["same-log-2"]["warnings"] or "")


def test_project_states_run_summarys_mfu_and_names_its_baselines(demo_db):
    """One peak per run: every measured row of `project` has run_summary's MFU (ddp-1: 9.98 %, where
    project used to take another run's measured CPU peak and say 21.09 %); efficiency against the
    sweep's baseline equals `scaling`'s, against the layout's baseline its own family's fewest GPUs."""
    from scaletrace import project as project_db

    summary = _summary(demo_db)
    scaling = {r["run_id"]: r for r in query(demo_db, "scaling").iter_rows(named=True)}
    proj = project_db(str(demo_db))
    measured = proj.filter(pl.col("measured"))
    assert not measured.is_empty()
    for r in measured.iter_rows(named=True):
        assert r["mfu_pct"] == pytest.approx(summary[r["run_id"]]["mfu_pct"], rel=1e-12), r["run_id"]
        assert r["scaling_efficiency_vs_sweep_baseline_pct"] == pytest.approx(
            scaling[r["run_id"]]["scaling_efficiency_vs_sweep_baseline_pct"], rel=1e-9)
    by_run = {r["run_id"]: r for r in measured.iter_rows(named=True)}
    fsdp1, fsdp2 = summary["fsdp-1"], summary["fsdp-2"]
    assert by_run["fsdp-2"]["scaling_efficiency_vs_layout_baseline_pct"] == pytest.approx(
        100 * fsdp2["tokens_per_s"] / fsdp1["tokens_per_s"] / 2)


def test_a_projection_that_does_not_fit_is_not_drawn_and_is_marked(demo_db):
    """The demo sweep's leave-one-out errors reach 237 % and 248 %: no line or band for them, the
    chart's subtitle says why, `project` marks each projected row "not a prediction"."""
    from scaletrace.reports.charts_projection import build_projection, projection_data, projection_sentences
    from scaletrace.queries.analysis.projection import UNRELIABLE_PCT
    from scaletrace import project as project_db

    with connect(demo_db) as db:
        curve, skipped = projection_data(db)
    bands = curve.group_by("sweep").agg(pl.col("band_pct").first(), pl.col("fits").first())
    assert not bands.is_empty()
    spec = build_projection(curve).to_dict()
    drawn = {v["sweep"] for layer in spec["layer"] for v in (layer.get("data") or {}).get("values", [])
             if "predicted_tps" in layer["encoding"].get("y", {}).get("field", "")
             or layer["encoding"].get("y", {}).get("field") == "band_lo_tps"}
    subtitle = " ".join(spec["title"]["subtitle"])
    for r in bands.iter_rows(named=True):
        assert r["fits"] == (r["band_pct"] <= UNRELIABLE_PCT)
        assert (r["sweep"] in drawn) == r["fits"], r
        if not r["fits"]:
            assert f"{r['sweep']}: not drawn:" in subtitle
            assert f"leave-one-out error {r['band_pct']:.1f} % > {UNRELIABLE_PCT} %" in subtitle
    assert not bands["fits"].any()  # the demo's sweeps do not fit: nothing is drawn as a prediction
    said = projection_sentences(curve, skipped)
    assert all("no line is drawn and no knee is claimed" in s for s in said[:-1])
    proj = project_db(str(demo_db)).filter(~pl.col("measured"))
    assert not proj["fits"].any()
    assert all(n.startswith("not a prediction: leave-one-out error ") for n in proj["notes"])


def test_milliseconds_per_step_have_one_basis(demo_db):
    """The step-time chart's compute and exposed comm are the comm-vs-compute chart's (per profiled step,
    mean over ranks and steps: the demo's ddp-2 exposes 3.09 ms in both, where the step-time chart once
    showed step time × share, 2.34 ms); idle is the rest of the step; the per-rank chart is per step."""
    from scaletrace.reports.charts_step import build_rank_wait

    rows = query(demo_db, "run_breakdown").to_dicts()
    for r in rows:
        assert r["compute_of_step_ns"] == pytest.approx(r["compute_per_step_ns"])
        assert r["exposed_comm_of_step_ns"] == pytest.approx(r["exposed_comm_per_step_ns"])
        parts = sum(r[f"{p}_of_step_ns"] for p in ("compute", "exposed_comm", "exposed_memory", "other", "idle"))
        # the bar is the length it is labelled with: the step time, or the device's period where the
        # device runs behind or the profiled steps' parts outlast the step (docs/metrics.md "The step model")
        assert parts == pytest.approx(r["step_basis_ns"])
        assert r["idle_of_step_ns"] >= 0 and (r["step_basis"] == "device_period"
                                               or r["step_basis_ns"] == r["step_time_ns"])
    ddp2 = next(r for r in rows if r["run_id"] == "ddp-2")
    assert ddp2["exposed_comm_of_step_ns"] / 1e6 == pytest.approx(3.09, abs=0.005)
    waits = query(demo_db, "rank_wait")
    spec = build_rank_wait(waits).to_dict()
    drawn = {(v["run_id"], v["rank"], v["part"]): v["ms"] for v in spec["data"]["values"]} if "data" in spec else {}
    if not drawn:  # the values sit in the datasets of the spec
        drawn = {(v["run_id"], v["rank"], v["part"]): v["ms"] for d in spec["datasets"].values() for v in d}
    for w in waits.iter_rows(named=True):
        assert drawn[(w["run_id"], w["rank"], "waiting for a slow peer")] == pytest.approx(
            w["exposed_wait_ns"] / 1e6 / w["num_steps"])
