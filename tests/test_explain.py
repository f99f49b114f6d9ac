"""scaletrace explain / diff through CliRunner, and the report's "Why efficiency drops" section."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from conftest import query
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
    root = tmp_path_factory.mktemp("ex")
    for spec in SWEEP:
        write_run(root, spec)
    db = root / "t.duckdb"
    assert not ingest([root], db=db, workers=1).errors
    return db


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
    assert "Grew most per step per GPU: all_reduce · default_pg +0.12 ms" in sentence  # 50 → 170 µs
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
    result = CliRunner().invoke(main, ["explain", "--db", str(db)])
    assert result.exit_code == 1 and "no sweep with two GPU counts" in result.output


def test_diff_lists_families_largest_change_first(ex_db):
    result = CliRunner().invoke(main, ["diff", "ex-2", "ex-4", "--db", str(ex_db), "--format", "csv",
                                       "--columns", "family,time_per_step_a_ns,time_per_step_b_ns"])
    assert result.exit_code == 0, result.output
    # GEMM 500 → 250 µs, all_reduce 50 → 170 µs, attention 100 → 50 µs
    assert result.output.splitlines()[1:] == ["GEMM,500000.0,250000.0", "all_reduce · default_pg,50000.0,170000.0",
                                              "attention,100000.0,50000.0"]
    bad = CliRunner().invoke(main, ["diff", "ex-2", "nope", "--db", str(ex_db)])
    assert bad.exit_code == 1 and "no run 'nope'" in bad.output


def test_why_section_charts_validate_and_render(ex_db, tmp_path):
    result = build_report(ex_db, tmp_path / "r.html")
    for key in ("gpu_time_per_token", "efficiency_lost", "kernel_growth"):
        assert key in result.charts
    specs = [s for s in CHARTS if s.section == charts_explain.WHY]
    assert [s.key for s in specs] == ["gpu_time_per_token", "efficiency_lost", "kernel_growth"]
    html = (tmp_path / "r.html").read_text()
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
