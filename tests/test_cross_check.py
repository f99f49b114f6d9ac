"""One number, one value: what the report says in two places (the decision card, the runs table,
findings, explain, the idle chart) is the same figure, on a sweep built with known answers, on the
demo fixture and on the shared real traces; the traced-window check fires where the step time and
the traced steps disagree, not where a trace holds device work outside its profiled steps."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from conftest import SHARED_TRACES, cpu, kernel, query, write_trace
from scaletrace.pipeline import connect, ingest
from scaletrace.pipeline.synth import SynthRun, write_run
from scaletrace.reports import build_report, data as report_data, findings
from scaletrace.reports.card import card_from_db

ROOT = Path(__file__).resolve().parents[1]
TOKENS = 8192
# the best layout's step at each GPU count, and one slower layout at 4 GPUs (never the best)
STEP_US = {1: 1000, 2: 560, 4: 330, 8: 300}


@pytest.fixture(scope="module")
def known_db(tmp_path_factory):
    """Three profiled steps a run, kernels of compute_us then an all_reduce, idle to the step's end:
    the device window of the steps runs from the first kernel of step 1 to the last of step 3."""
    root = tmp_path_factory.mktemp("known")
    for n, us in STEP_US.items():
        write_run(root, SynthRun(f"w-{n}", ranks=n, steps=3, step_us=us, compute_us=240 // n + 40, overlap_us=20,
                                 transfer_us=20 * n, workload="w", tokens_per_step=TOKENS))
    write_run(root, SynthRun("w-4-tp2", ranks=4, steps=3, step_us=420, compute_us=120, overlap_us=20, transfer_us=90,
                             workload="w", tokens_per_step=TOKENS, tp=2,
                             parallel={"dp": 2, "tp": 2, "pp": 1, "cp": 1}))
    db = root / "t.duckdb"
    assert not ingest([root], db=db, workers=1).errors
    return db


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("demo") / "demo.duckdb"
    assert not ingest([ROOT / "fixtures" / "demo-sweep"], db=db, workers=2).errors
    return db


def _rank_idle_pct(idle: pl.DataFrame) -> dict[str, float]:
    """The runs table's idle % from the idle chart's rows: per rank Σ idle ÷ Σ span over its steps
    (the rows tile the steps' device window), averaged over ranks."""
    per_rank = idle.group_by("run_id", "rank").agg(pct=100 * pl.col("idle_ns").sum() / pl.col("span_ns").sum())
    return {r["run_id"]: r["pct"] for r in per_rank.group_by("run_id").agg(pl.col("pct").mean()).to_dicts()}


def _stops_at(steps: dict[int, int]) -> int | None:
    """The card's rule worked out from the construction: tokens/s = TOKENS ÷ step; each added GPU
    must add at least half of the 1-GPU run's tokens/s."""
    tps = {n: TOKENS / (us * 1e-6) for n, us in steps.items()}
    sizes = sorted(tps)
    for prev, n in zip(sizes, sizes[1:]):
        if (tps[n] - tps[prev]) / (n - prev) < 0.5 * tps[sizes[0]] / sizes[0]:
            return n
    return None


def test_the_arithmetic_of_the_sweep():
    # 1 GPU: 8.19 M tokens/s.  Each added GPU buys: 1 -> 2: (14.6 M − 8.19 M) ÷ 1 = 78 %;
    # 2 -> 4: (24.8 M − 14.6 M) ÷ 2 = 62 %; 4 -> 8: (27.3 M − 24.8 M) ÷ 4 = 7.6 %: stops at 8 GPUs
    assert _stops_at(STEP_US) == 8


@pytest.mark.parametrize("which", ["known", "demo"])
def test_every_number_named_twice_is_one_value(which, known_db, demo_db, tmp_path):
    db = known_db if which == "known" else demo_db
    with connect(db) as database:
        card = card_from_db(database)
        summary = {r["run_id"]: r for r in database.query("run_summary").iter_rows(named=True)}
        scaling = {r["run_id"]: r for r in database.query("scaling").iter_rows(named=True)}
        attribution = database.query("scaling_attribution")
        idle_rows = database.query("idle_breakdown")
        data = report_data.load(database)
    # the card's row is run_summary's and scaling's, to the last digit
    for r in card.rows.iter_rows(named=True):
        s, sc = summary[r["run_id"]], scaling.get(r["run_id"], {})
        assert r["tokens_per_s"] == s["tokens_per_s"] and r["mfu_pct"] == s["mfu_pct"]
        assert r["tokens_per_s_per_gpu"] == s["tokens_per_s_per_gpu"]
        assert r["scaling_efficiency_vs_sweep_baseline_pct"] == sc.get("scaling_efficiency_vs_sweep_baseline_pct")
    # its verdict's points are scaling_attribution's from the previous count
    for v in card.verdicts:
        if v.lost_pts is not None:
            to = card.rows.filter((pl.col("sweep") == v.sweep) & (pl.col("world_size") == v.stops_at)).row(0, named=True)
            a = attribution.filter((pl.col("vs") == "previous") & (pl.col("to_run") == to["run_id"])
                                   & (pl.col("from_run") == to["prev_run"])).row(0, named=True)
            assert v.lost_pts == a["efficiency_lost_pts"]
    # one idle: the idle chart's rows give the runs table's idle % (steps that do not overlap)
    from_chart = _rank_idle_pct(idle_rows)
    for run, s in summary.items():
        assert from_chart[run] == pytest.approx(s["idle_pct"], rel=1e-9, abs=1e-9), run
    # the chart draws the best runs' idle in ms per step: idle_breakdown's mean per rank × step
    for r in data.idle_parts.iter_rows(named=True):
        mine = idle_rows.filter(pl.col("run_id") == r["run_id"])
        assert r["idle_ns"] == pytest.approx(mine["idle_ns"].mean())
    result = build_report(db, tmp_path / "r.html")
    # no "no idle time" beside idle runs
    best = set(data.idle_parts["run_id"].to_list()) if not data.idle_parts.is_empty() else set()
    if any(summary[b]["idle_pct"] > 0 for b in best):
        assert "idle_breakdown" in result.charts
    assert not any("No idle time" in n for n in result.omitted) or not any(summary[b]["idle_pct"] > 0 for b in best)
    # no finding contradicts the table: the most exposed communication is the table's largest figure
    exposed = {run: s["exposed_comm_pct"] for run, s in summary.items() if s["exposed_comm_pct"]}
    most = [f for f in result.findings if f.startswith("The most exposed communication is in run ")]
    if exposed:
        top = max(exposed, key=lambda k: (exposed[k], k))
        (line,) = most
        assert line.startswith(f"The most exposed communication is in run {top} (")
        assert f": {findings._pct(exposed[top])} of the step" in line, line
    # every percentage a finding gives a run's MFU or exposed comm is that run's in the table
    for f in result.findings:
        for run, pct in re.findall(r"run ([\w.-]+)[^:]*: ([\d.]+) % of the step", f):
            assert float(pct) == pytest.approx(summary[run]["exposed_comm_pct"], abs=0.5), f


def test_the_card_stops_where_the_construction_says(known_db):
    with connect(known_db) as database:
        (verdict,) = card_from_db(database).verdicts
    assert verdict.stops_at == _stops_at(STEP_US) == 8 and verdict.prev_gpus == 4


def test_idle_between_steps_is_the_tables_idle(known_db):
    """SynthRun steps: each step's device work ends well before the next step's first kernel; that gap
    is idle of the step (host wait: the next kernel is launched only when its step begins), so the
    idle chart and the table agree, and both are above zero."""
    idle = query(known_db, "idle_breakdown", run_id="w-1")
    assert idle.filter(pl.col("step") > idle["step"].min())["between_steps_ns"].min() > 0
    assert (idle["host_wait_ns"] + idle["dependency_wait_ns"] + idle["other_idle_ns"] == idle["idle_ns"]).all()
    (s,) = query(known_db, "run_summary", run_id="w-1").to_dicts()
    window_ns = s["traced_window_per_step_ns"] * idle["step"].n_unique()
    assert idle["idle_ns"].sum() == pytest.approx(s["idle_pct"] / 100 * window_ns)


# -- the traced-window check ----------------------------------------------------------------------

def _outside_steps(run: Path) -> Path:
    """One 100 µs ProfilerStep launching a 80 µs kernel, then 1 ms of kernels launched after the step
    (warm-up, evaluation: device work outside the profiled steps)."""
    events = [cpu("ProfilerStep#1", 0, 100, cat="user_annotation"),
              cpu("cudaLaunchKernel", 1, 1, cat="cuda_runtime", correlation=1), kernel("gemm", 10, 80, corr=1)]
    for i in range(10):
        events += [cpu("cudaLaunchKernel", 150 + i, 1, cat="cuda_runtime", correlation=10 + i),
                   kernel("eval", 200 + 100 * i, 100, corr=10 + i)]
    write_trace(run / "rank0.json", events, rank=0)
    return run


def test_device_work_outside_the_profiled_steps_is_no_disagreement(tmp_path):
    """The old window (the whole trace's device span ÷ steps) was 1.19 ms, 11.9 × the step: a warning
    for a step that agrees with its own device work (80 µs of a 100 µs step).  The step's window is
    the step's; the shares are of it (compute 100 %, no idle)."""
    db = tmp_path / "o.duckdb"
    assert not ingest([_outside_steps(tmp_path / "outside")], db=db, workers=1).errors
    (r,) = query(db, "run_summary").to_dicts()
    assert r["traced_window_per_step_ns"] == 80_000 and r["step_time_ns"] == 100_000
    assert r["warnings"] is None
    assert r["compute_pct"] == pytest.approx(100) and r["idle_pct"] == 0
    (whole,) = query(db, "rank_breakdown").to_dicts()
    assert whole["span_ns"] == 1_190_000  # what the old check divided by the one step


@pytest.mark.skipif(not SHARED_TRACES.is_dir(), reason="the shared real traces are absent")
def test_the_traced_window_check_on_the_shared_traces(tmp_path):
    """hta-cpu-only-gloo: one 210 ms step whose device (CPU-op) work spans 179 ms, in a 1.26 s trace:
    no disagreement (the old check said 6 ×).  tracelens-mi300x: three ~16 ms ProfilerSteps whose
    kernels keep the device busy 84 ms (28 ms a step, from the trace itself): the host's step is
    shorter than the device's, a real disagreement, warned about."""
    db = tmp_path / "s.duckdb"
    runs = [SHARED_TRACES / "hta-cpu-only-gloo", SHARED_TRACES / "tracelens-mi300x"]
    assert not ingest(runs, db=db, workers=1).errors
    rows = {r["run_id"]: r for r in query(db, "run_summary").iter_rows(named=True)}
    gloo, mi300x = rows["hta-cpu-only-gloo"], rows["tracelens-mi300x"]
    assert "traced window" not in (gloo["warnings"] or "")
    assert gloo["traced_window_per_step_ns"] < gloo["step_time_ns"]
    with connect(db) as database:
        busy = database.sql("SELECT sum(union_ns) AS busy_ns, count(DISTINCT step) AS steps FROM interval_unions "
                            "WHERE run_id = 'tracelens-mi300x' AND set_name = 'all' AND step IS NOT NULL").row(0)
    busy_per_step = busy[0] / busy[1]
    assert busy_per_step > 1.5 * mi300x["step_time_ns"]  # the device did more than a step's work a step
    assert "disagrees with the traced window" in mi300x["warnings"]
