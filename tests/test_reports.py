"""Reports: valid Vega-Lite from every builder, a self-contained HTML that renders in a real
browser with no console errors, and names from traces that cannot inject markup."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import shaped_run
from scaletrace.pipeline import connect, ingest
from scaletrace.cli import main
from scaletrace.pipeline.synth import SynthRun, write_run
from scaletrace.reports import build_report
from scaletrace.reports import charts as chart_defs
from scaletrace.reports import data as report_data
from scaletrace.reports.html import vega_bundle

EVIL = '<script>alert("pwned")</script>\'"&'


@pytest.fixture(scope="module")
def sweep_db(tmp_path_factory):
    """A strong-scaling sweep 1 -> 2 -> 4 GPUs with a straggler, three layouts at 4, power, sizes; and
    one run with recorded shapes (synth writes none) for the compute-efficiency chart."""
    root = tmp_path_factory.mktemp("sweep")
    for n, us in {1: 1000, 2: 600, 4: 450}.items():
        write_run(root, SynthRun(f"w-{n}", ranks=n, steps=2, step_us=us, compute_us=150, workload="w",
                                 straggler_rank=n - 1 if n > 1 else None, straggler_delay_us=40,
                                 tp_comm_us=20, power_watts=300.0))
    write_run(root, SynthRun("w-4-tp2", ranks=4, steps=2, step_us=500, compute_us=150, workload="w",
                             parallel={"dp": 2, "tp": 2, "pp": 1, "cp": 1}))
    write_run(root, SynthRun("w-4-pp2", ranks=4, steps=2, step_us=700, compute_us=150, workload="w",
                             parallel={"dp": 2, "tp": 1, "pp": 2, "cp": 1}))  # a third layout: the heatmap
    shaped_run(root, "s-1", 1, (1024, 1024, 1024), gemm_us=5, host_gap_us=4, dep_gap_us=2)
    db = root / "t.duckdb"
    assert not ingest([root], db=db, workers=1).errors
    return db


def _report_counting_renders(db: Path, out: Path, static_svgs: bool, **figures):
    """build_report(db, out / "r.html", **figures) with the page's SVG fallbacks drawn or not, and
    the specs vl_convert rendered to PNG meanwhile."""
    import vl_convert

    rendered, real = [], vl_convert.vegalite_to_png
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(vl_convert, "vegalite_to_png", lambda spec, **kw: rendered.append(spec) or real(spec, **kw))
        patch.setenv("SCALETRACE_STATIC_SVGS", "1" if static_svgs else "0")
        result = build_report(db, out / "r.html", **figures)
    return result, rendered


@pytest.fixture(scope="module")
def sweep_figures(sweep_db, tmp_path_factory):
    """build_report(sweep_db) without the page's SVG fallbacks, and every chart as PNG and SVG for papers,
    each rendered from the chart's spec, built once for the tests that only read it: (the result, its
    folder, the specs vl_convert rendered to PNG)."""
    out = tmp_path_factory.mktemp("sweep-report")
    # no fallbacks: each PNG rendered from its spec
    result, rendered = _report_counting_renders(sweep_db, out, False, png_dir=out / "spec", svg_dir=out / "svg")
    return result, out, rendered


@pytest.fixture(scope="module")
def sweep_report(sweep_figures):
    """The sweep's report (the page is the same with or without the figures for papers)."""
    return sweep_figures[0]


@pytest.fixture(scope="module")
def report_data_(sweep_db):
    with connect(sweep_db) as db:
        return report_data.load(db)


@pytest.mark.parametrize("spec", chart_defs.CHARTS, ids=lambda s: s.key)
def test_every_builder_gives_valid_vega_lite_that_survives_json(spec, report_data_):
    df = spec.select(getattr(report_data_, spec.source))
    assert not df.is_empty(), f"the test sweep should feed {spec.key}"
    chart = spec.build(df)
    d = chart.to_dict()  # altair validates against the Vega-Lite schema here
    assert d["$schema"].startswith("https://vega.github.io/schema/vega-lite/")
    assert json.loads(json.dumps(d)) == d


def test_html_is_self_contained(sweep_report):
    result = sweep_report
    text = result.path.read_text()
    assert len(result.charts) == len(chart_defs.CHARTS)  # every chart has data in this sweep
    assert not re.search(r"""<script[^>]+src\s*=|<link[^>]+href\s*=\s*["']?(https?:)?//""", text, re.I)
    assert "</script" not in vega_bundle().lower()  # the inlined bundle cannot close its tag early
    assert result.bytes < 3_000_000
    assert any("rose" in f and "efficiency" in f for f in result.findings)


def test_missing_data_is_named_not_drawn(tmp_path):
    write_run(tmp_path, SynthRun("solo", ranks=1, steps=1, tokens_per_step=None, workload=None))
    db = tmp_path / "t.duckdb"
    ingest([tmp_path], db=db, workers=1)
    result = build_report(db, tmp_path / "r.html")
    assert "throughput" not in result.charts and "breakdown" in result.charts
    assert any("add" in n.lower() or "give runs" in n for n in result.omitted)
    assert "tokens_per_step" in result.path.read_text()


@pytest.fixture(scope="module")
def paper_figures(sweep_db, sweep_figures, tmp_path_factory):
    """The sweep's PNGs with the page's SVG fallbacks drawn (--png rasterizes them), beside sweep_figures
    (each rendered from its spec); the specs vl_convert rendered to PNG for each."""
    out = tmp_path_factory.mktemp("papers")
    with_svgs, rendered = _report_counting_renders(sweep_db, out, True, png_dir=out / "png")
    from_specs, specs_out, from_specs_rendered = sweep_figures
    return out, with_svgs, specs_out, from_specs, {"fallbacks": rendered, "specs": from_specs_rendered}


def test_png_and_svg_for_papers(sweep_figures):
    result, out, _ = sweep_figures
    assert sorted(p.stem for p in (out / "spec").iterdir()) == sorted(result.charts)
    assert (out / "spec" / "throughput.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "svg" / "mfu.svg").read_text().lstrip().startswith("<svg")


def test_png_export_rasterizes_the_pages_svgs(paper_figures):
    """With the page's SVG fallbacks drawn, --png rasterizes them instead of rendering each chart a
    second time, and gets the bytes that rendering the chart's spec gives (what it wrote before)."""
    out, result, specs_out, from_specs, rendered = paper_figures
    assert rendered["fallbacks"] == []
    assert len(rendered["specs"]) == len(result.charts) and from_specs.charts == result.charts
    for key in result.charts:
        assert (out / "png" / f"{key}.png").read_bytes() == (specs_out / "spec" / f"{key}.png").read_bytes()


@pytest.fixture(scope="module")
def evil_report(tmp_path_factory):
    """Names from traces that try to inject markup, in one report: a run whose id, workload, kernel and
    process-group names are EVIL, and one whose workload is ("x" + EVIL)."""
    root = tmp_path_factory.mktemp("evil")
    run = write_run(root, SynthRun("evil-run", ranks=2, steps=1, workload=EVIL, kernel_prefix=EVIL, pg_prefix=EVIL))
    manifest = json.loads((run / "run.json").read_text())
    manifest["run_id"] = "run" + EVIL
    (run / "run.json").write_text(json.dumps(manifest))
    write_run(root, SynthRun("e", ranks=2, steps=1, workload="x" + EVIL, kernel_prefix=EVIL, pg_prefix=EVIL))
    db = root / "t.duckdb"
    assert not ingest([root], db=db, workers=1).errors
    return build_report(db, root / "r.html")


def test_trace_names_cannot_inject_markup(evil_report):
    text = evil_report.path.read_text()
    assert "<script>alert" not in text
    assert text.count("<script") == 3  # the Vega bundle, the JSON specs, the embed loop
    assert "run&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;&#x27;&quot;&amp;" in text


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=20000"]


def _browser(html, tmp_path, *extra):
    profile = tmp_path / "chromium-profile"
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *extra, html.as_uri()],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (make setup installs Debian's chromium as root)")
@pytest.mark.parametrize("which", ["sweep", "evil"])
def test_report_renders_in_headless_chromium(which, sweep_report, evil_report, tmp_path):
    result = sweep_report if which == "sweep" else evil_report
    shot = tmp_path / "report.png"
    # one launch: the screenshot and the DOM, both after the page's scripts ran
    dom_run = _browser(result.path, tmp_path, f"--screenshot={shot}", "--window-size=1300,5000", "--dump-dom")
    dom = re.sub(r"<noscript>.*?</noscript>", "", dom_run.stdout, flags=re.S)  # the live charts, not the fallbacks
    console = [ln for ln in dom_run.stderr.splitlines() if ":CONSOLE" in ln]
    assert not console, console
    for key in result.charts:  # every chart drew an SVG
        start = dom.index(f'id="chart-{key}"')
        end = dom.find("<section", start)
        assert "<svg" in dom[start:end if end > 0 else None], key
    assert re.search(r'<ul id="findings"><li>', dom)
    assert "<script>alert" not in dom.split('id="specs"')[0]
    assert shot.stat().st_size > 10_000


def test_run_ingests_and_reports_in_one_command(tmp_path):
    write_run(tmp_path / "traces", SynthRun("r2", ranks=2, steps=2, workload="w"))
    write_run(tmp_path / "traces", SynthRun("r4", ranks=4, steps=2, step_us=800, workload="w"))
    result = CliRunner().invoke(main, ["run", str(tmp_path / "traces"), "-o", str(tmp_path / "out"), "--png"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "report.html").is_file() and (tmp_path / "out" / "scaletrace.duckdb").is_file()
    assert (tmp_path / "out" / "figures" / "throughput.png").is_file()
    assert "4 GPUs  best r4" in result.output  # the headline numbers


def test_shipped_demo_sweep_gives_a_report(demo_db, tmp_path):
    """fixtures/demo-sweep, ingested once for the suite (conftest's demo_db): `report` draws its charts."""
    result = CliRunner().invoke(main, ["report", "--db", str(demo_db), "-o", str(tmp_path / "report.html"), "-q"])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "report.html").read_text()
    for key in ("throughput", "efficiency", "breakdown", "layouts", "rank_wait"):
        assert f'id="chart-{key}"' in text
