"""scaletrace explain / diff through CliRunner, and the report's "Why efficiency drops" section."""

from __future__ import annotations

import polars as pl
import pytest
from click.testing import CliRunner

from conftest import SMALL_US, built_once, query, shaped_run
from scaletrace.cli import main
from scaletrace.pipeline import ingest
from scaletrace.pipeline.synth import SynthRun, write_run
from scaletrace.reports import build_report, charts_explain
from scaletrace.reports.charts import CHARTS

TOKENS = 8192
# compute per GPU halves, the all_reduce is hidden at 2 GPUs and exposed (120 µs per step) at 4
SWEEP = [
    SynthRun("ex-2", ranks=2, steps=3, step_us=1000, compute_us=600, overlap_us=50, transfer_us=50,
             tokens_per_step=TOKENS, workload="ex", kernel_mix=(("sm90_xmma_gemm_bf16", 500), ("flash_fwd_kernel", 100))),
    SynthRun("ex-4", ranks=4, steps=3, step_us=700, compute_us=300, overlap_us=50, transfer_us=170,
             tokens_per_step=TOKENS, workload="ex", kernel_mix=(("sm90_xmma_gemm_bf16", 250), ("flash_fwd_kernel", 50))),
]


@pytest.fixture(scope="module")
def ex_db(tmp_path_factory):
    def build(root):
        for spec in SWEEP:
            write_run(root, spec)
        db = root / "t.duckdb"
        assert not ingest([root], db=db, workers=1).errors
    return built_once(tmp_path_factory, "test_explain-ex_db", build) / "t.duckdb"


def test_explain_prints_the_sentence_and_the_table(ex_db):
    result = CliRunner().invoke(main, ["explain", "--db", str(ex_db)])
    assert result.exit_code == 0, result.output
    row = query(ex_db, "scaling_attribution").filter(vs="previous").row(0, named=True)
    # efficiency vs the 2-GPU baseline: g_2 = 1000 µs · 2 ÷ 8192, g_4 = 700 µs · 4 ÷ 8192 → 100 · 2000/2800
    to_eff = 100 * (1000 * 2) / (700 * 4)
    assert row["to_scaling_efficiency_pct"] == pytest.approx(to_eff)
    lines = result.output.splitlines()
    sentence = lines[0]
    assert sentence.startswith("ex: from 2 GPUs to 4 GPUs, GPU-time per token went from 244 ns to 342 ns")
    assert f"fell from 100 % to {to_eff:.0f} %" in sentence and f"({100 - to_eff:.0f} points lost:" in sentence
    assert "The biggest cause is exposed communication" in sentence
    assert "mostly all_reduce in process group default_pg" in sentence
    assert "Grew most per step per GPU: all_reduce · default_pg +120 µs" in sentence  # 50 → 170 µs
    assert "2 → 4" in result.output and "ex-2 → ex-4" in result.output


def test_explain_csv_is_the_table_only(ex_db):
    result = CliRunner().invoke(main, ["explain", "--db", str(ex_db), "--format", "csv"])
    assert result.exit_code == 0
    header = result.output.splitlines()[0]
    assert header.startswith("sweep,step,runs,gpu_us_per_token,efficiency_pct,lost_pts,compute_pts")


def test_explain_errors_are_one_line(ex_db, tmp_path):
    result = CliRunner().invoke(main, ["explain", "--db", str(ex_db), "--workload", "nope"])
    assert result.exit_code == 1 and "no sweep (workload) 'nope'" in result.output
    single = tmp_path / "one"
    write_run(single, SynthRun("solo", ranks=2, workload="solo"))
    db = tmp_path / "one.duckdb"
    assert not ingest([single], db=db, workers=1).errors
    # one GPU count is no sweep step, but the run is still described on its own (tests/test_run_explain.py)
    result = CliRunner().invoke(main, ["explain", "--db", str(db)])
    assert result.exit_code == 0, result.output
    # (the sweep-level sentences may come first: its idle, the gaps between steps, is host wait)
    assert "solo:\n  Both ranks traced" in result.output and "GPU-time per token" not in result.output


def test_diff_lists_families_largest_change_first(ex_db):
    result = CliRunner().invoke(main, ["diff", "ex-2", "ex-4", "--db", str(ex_db), "--format", "csv",
                                       "--columns", "family,time_per_step_a_ns,time_per_step_b_ns"])
    assert result.exit_code == 0, result.output
    # GEMM 500 → 250 µs, all_reduce 50 → 170 µs, attention 100 → 50 µs
    assert result.output.splitlines()[1:] == ["GEMM,500000.0,250000.0", "all_reduce · default_pg,50000.0,170000.0",
                                              "attention,100000.0,50000.0"]
    bad = CliRunner().invoke(main, ["diff", "ex-2", "nope", "--db", str(ex_db)])
    assert bad.exit_code == 1 and "no run 'nope'" in bad.output


@pytest.fixture(scope="module")
def ex_report(ex_db, tmp_path_factory):
    """The report of ex_db, built once: the tests of it only read it."""
    return build_report(ex_db, tmp_path_factory.mktemp("ex-report") / "r.html")


def test_why_section_charts_validate_and_render(ex_db, ex_report):
    result = ex_report
    for key in ("gpu_time_per_token", "efficiency_lost", "kernel_growth"):
        assert key in result.charts
    specs = [s for s in CHARTS if s.section == charts_explain.WHY]
    assert [s.key for s in specs] == ["gpu_time_per_token", "efficiency_lost", "kernel_growth", "idle_breakdown",
                                      "compute_efficiency"]
    specs = [s for s in specs if s.key in result.charts]  # synth records no shapes: no compute efficiency
    html = result.path.read_text()
    assert '<h2 class="section" id="why-efficiency-drops">Why efficiency drops</h2>' in html
    assert html.index("why-efficiency-drops") < html.index('id="chart-gpu_time_per_token"')
    assert any("points of scaling efficiency" in f for f in result.findings)
    from scaletrace.pipeline import connect
    from scaletrace.reports import data as report_data

    with connect(ex_db) as db:
        data = report_data.load(db)
    for spec in specs:
        chart = spec.build(spec.select(getattr(data, spec.source)))
        assert chart.to_dict()["$schema"].startswith("https://vega.github.io/schema/vega-lite/")


# Idle and compute efficiency (reports/efficiency.py): a 1 → 2 GPU sweep whose traces record shapes.
# Per rank and step: a bf16 GEMM M×K @ K×N in gemm_us, then host_gap_us idle before a kernel the host
# launched late, then dep_gap_us idle before one queued at the step's start (conftest.shaped_run).
PEAK_BF16 = 989e12  # H200 dense bf16 (device_peaks)
SHAPED = {"s-1": dict(ranks=1, mnk=(4096, 4096, 4096), gemm_us=180, host_gap_us=40, dep_gap_us=20, step_us=1000),
          "s-2": dict(ranks=2, mnk=(2048, 4096, 4096), gemm_us=120, host_gap_us=60, dep_gap_us=20, step_us=700)}


def _gemm_pct(m, k, n, gemm_us):
    return 100 * (2 * m * k * n) / (gemm_us * 1e-6) / PEAK_BF16


@pytest.fixture(scope="module")
def shaped_db(tmp_path_factory):
    def build(root):
        for run_id, spec in SHAPED.items():
            shaped_run(root, run_id, **spec)
        db = root / "t.duckdb"
        assert not ingest([root], db=db, workers=1).errors
    return built_once(tmp_path_factory, "test_explain-shaped_db", build) / "t.duckdb"


def between_us(spec: dict) -> int:
    """The gap from a step's last kernel to the next step's GEMM (launched only when the next step
    starts, after the gap began: host wait): the step less its GEMM, two gaps and two small kernels."""
    return spec["step_us"] - (spec["gemm_us"] + spec["host_gap_us"] + spec["dep_gap_us"] + 2 * SMALL_US)


def test_idle_and_compute_sentences_carry_the_derived_numbers(shaped_db):
    # the query rows first: the steady-state step (the second: the first slot is left out) of each
    # rank; its idle is the two gaps, split by when the next kernel was launched, and the gap since
    # the previous step's last kernel (host wait)
    for r in query(shaped_db, "idle_breakdown").iter_rows(named=True):
        spec = SHAPED[r["run_id"]]
        assert r["step"] == 2
        between = between_us(spec) if r["step"] == 2 else 0
        assert r["between_steps_ns"] == between * 1000
        assert (r["host_wait_ns"], r["dependency_wait_ns"], r["other_idle_ns"]) == (
            (spec["host_gap_us"] + between) * 1000, spec["dep_gap_us"] * 1000, 0)
    gemm = {r["run_id"]: r for r in query(shaped_db, "op_efficiency").iter_rows(named=True)}
    pct = {run: _gemm_pct(*spec["mnk"], spec["gemm_us"]) for run, spec in SHAPED.items()}
    for run in SHAPED:
        assert gemm[run]["achieved_pct_of_peak"] == pytest.approx(pct[run])
    result = CliRunner().invoke(main, ["explain", "--db", str(shaped_db)])
    assert result.exit_code == 0, result.output
    # per steady-state step: host 40 + 740 = 780 of 60 + 740 = 800 µs at 1 GPU (98 %),
    # 60 + 480 = 540 of 80 + 480 = 560 µs at 2 GPUs (96 %)
    host_us = {run: s["host_gap_us"] + between_us(s) for run, s in SHAPED.items()}
    idle_us = {run: s["host_gap_us"] + s["dep_gap_us"] + between_us(s) for run, s in SHAPED.items()}
    assert (host_us, idle_us) == ({"s-1": 780, "s-2": 540}, {"s-1": 800, "s-2": 560})
    host = {run: 100 * host_us[run] / idle_us[run] for run in SHAPED}
    idle_line = next(line for line in result.output.splitlines() if "waiting for the host" in line)
    assert idle_line == (f"shaped: waiting for the host to launch work (CPU-bound) is {host['s-1']:.0f} % of the "
                         f"idle time at 1 GPU (780 µs of 800 µs idle per step), {host['s-2']:.0f} % at 2 GPUs "
                         "(540 µs of 560 µs idle per step); means over ranks and profiled steps.")
    # one family: no FLOPs-weighted total beside it; GFLOP per GEMM op 2·4096³ → 2·2048·4096²
    gflop = {run: 2 * s["mnk"][0] * s["mnk"][1] * s["mnk"][2] / 1e9 for run, s in SHAPED.items()}
    assert (f"shaped: GEMM efficiency falls from {pct['s-1']:.0f} % to {pct['s-2']:.0f} % of peak from 1 GPU to "
            f"2 GPUs: the per-GPU matmuls shrink from {gflop['s-1']:.3g} to {gflop['s-2']:.3g} GFLOP per GEMM op "
            "(mean).") in result.output.splitlines()


def test_idle_sentence_needs_host_bound_idle(tmp_path):
    # host wait 5 of 5 + 20 µs idle = 20 % < HOST_BOUND_PCT: not called host-bound; 25 % is
    from scaletrace.reports.efficiency import HOST_BOUND_PCT, best_runs, idle_per_step, idle_sentences

    # one step each: no gap between steps (host wait of its own) in the share
    shaped_run(tmp_path, "d-1", 1, (256, 256, 256), gemm_us=5, host_gap_us=5, dep_gap_us=20, workload="dep", steps=1)
    shaped_run(tmp_path, "h-1", 1, (256, 256, 256), gemm_us=5, host_gap_us=5, dep_gap_us=15, workload="host", steps=1)
    assert 100 * 5 / 25 < HOST_BOUND_PCT <= 100 * 5 / 20
    db = tmp_path / "t.duckdb"
    assert not ingest([tmp_path], db=db, workers=1).errors
    from scaletrace.pipeline import connect

    with connect(db) as database:
        said = idle_sentences(idle_per_step(database.query("idle_breakdown"), best_runs(database)))
    assert [s.split(":")[0] for s in said] == ["host"]


def test_report_draws_idle_and_compute_efficiency(shaped_db, tmp_path):
    result = build_report(shaped_db, tmp_path / "r.html", png_dir=tmp_path / "png")
    assert {"idle_breakdown", "compute_efficiency"} <= set(result.charts)
    assert any(f.startswith("shaped: GEMM efficiency falls") for f in result.findings)
    assert any(f.startswith("shaped: waiting for the host") for f in result.findings)
    from scaletrace.pipeline import connect
    from scaletrace.reports import data as report_data

    with connect(shaped_db) as db:
        data = report_data.load(db)
    # ms per step, mean over ranks and steady-state steps (the second): the two gaps and the gap
    # between the steps, the runs table's idle % of that step's device slot (the previous step's
    # last kernel's end to its own: one step, step_us)
    idle = {r["run_id"]: r for r in data.idle_parts.iter_rows(named=True)}
    runs = {r["run_id"]: r for r in data.runs.iter_rows(named=True)}
    for run, s in SHAPED.items():
        assert idle[run]["idle_ns"] == (s["host_gap_us"] + s["dep_gap_us"] + between_us(s)) * 1000
        window_us = s["gemm_us"] + s["host_gap_us"] + s["dep_gap_us"] + 2 * SMALL_US + between_us(s)
        assert window_us == s["step_us"]
        assert runs[run]["idle_pct"] == pytest.approx(100 * idle[run]["idle_ns"] / 1000 / window_us)
    eff = data.compute_parts.filter(pl.col("series") == "GEMM")
    assert eff["pct_of_peak"].to_list() == pytest.approx([_gemm_pct(*s["mnk"], s["gemm_us"]) for s in SHAPED.values()])
    for key in ("idle_breakdown", "compute_efficiency"):
        spec = next(s for s in CHARTS if s.key == key)
        assert spec.section == charts_explain.WHY
        assert spec.build(spec.select(getattr(data, spec.source))).to_dict()["$schema"].startswith(
            "https://vega.github.io/schema/vega-lite/")


def test_compute_efficiency_missing_names_record_shapes(ex_report):
    result = ex_report
    assert "compute_efficiency" not in result.charts
    assert any(n.startswith("Compute efficiency vs GPUs:") and "record_shapes" in n for n in result.omitted)
