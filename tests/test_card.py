"""The decision card (reports/card.py): its numbers are run_summary's and scaling's, its
"stops paying" count follows from how the sweep was built, and the page it opens is readable.

The sweep: SynthRun steps of known length (the step time is the ProfilerStep's, step_us), the same
tokens per step (8192, strong scaling), so tokens/s = 8192 ÷ step time, worked out below by hand.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import polars as pl
import pytest
from click.testing import CliRunner

from conftest import built_once
from scaletrace.cli import main
from scaletrace.pipeline import connect, ingest
from scaletrace.pipeline.synth import SynthRun, write_run
from scaletrace.reports import build_report, card as card_mod
from scaletrace.reports.card import MARGINAL_FLOOR_PCT, card_from_db, card_lines
from scaletrace.reports.order import run_order, run_sort_key

TOKENS = 8192
STEP_US = {2: 1000, 4: 520, 8: 300, 16: 250}  # the best layout (dp only) at each GPU count
SLOW_TP = {8: 400}  # a second, slower layout at 8 GPUs (tp 2): never the best


def _spec(run_id, n, step_us, **kw):
    return SynthRun(run_id, ranks=n, steps=2, step_us=step_us, compute_us=100, overlap_us=50, transfer_us=60,
                    workload="k", tokens_per_step=TOKENS, power_watts=250.0, **kw)


@pytest.fixture(scope="module")
def knee_db(tmp_path_factory):
    def build(root):
        for n, us in STEP_US.items():
            write_run(root, _spec(f"k-{n}", n, us))
        for n, us in SLOW_TP.items():
            write_run(root, _spec(f"k-{n}-tp2", n, us, tp=2, parallel={"dp": n // 2, "tp": 2, "pp": 1, "cp": 1}))
        # a flat sweep: each added GPU adds 90 % of a baseline GPU's tokens/s, so it never stops paying
        for n, us in {2: 1000, 4: round(1000 * 2 / (2 + 2 * 0.9))}.items():
            write_run(root, SynthRun(f"f-{n}", ranks=n, steps=2, step_us=us, compute_us=100, overlap_us=50,
                                     transfer_us=60, workload="flat", tokens_per_step=TOKENS))
        db = root / "t.duckdb"
        assert not ingest([root], db=db, workers=1).errors
    return built_once(tmp_path_factory, "test_card-knee_db", build) / "t.duckdb"


@pytest.fixture(scope="module")
def knee_report(knee_db, tmp_path_factory):
    """The knee sweep's report with its static SVGs, built once: the tests of the page only read it."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SCALETRACE_STATIC_SVGS", "1")
        return build_report(knee_db, tmp_path_factory.mktemp("knee-report") / "r.html")


def tokens_per_s(step_us: float) -> float:
    return TOKENS / (step_us * 1e-6)


def expected_stop(steps: dict[int, int]) -> int | None:
    """The rule by hand: the first GPU count whose tokens/s per added GPU is below MARGINAL_FLOOR_PCT %
    of the baseline (fewest GPUs) run's tokens/s per GPU."""
    sizes = sorted(steps)
    base_per_gpu = tokens_per_s(steps[sizes[0]]) / sizes[0]
    for prev, n in zip(sizes, sizes[1:]):
        marginal = (tokens_per_s(steps[n]) - tokens_per_s(steps[prev])) / (n - prev)
        if 100 * marginal / base_per_gpu < MARGINAL_FLOOR_PCT:
            return n
    return None


def test_the_arithmetic_of_the_sweep():
    # 2 GPUs: 8.192 M tokens/s, 4.096 M per GPU; each added GPU bought, as % of that:
    #   2 -> 4: (15.754 M − 8.192 M) ÷ 2 = 3.78 M (92 %); 4 -> 8: (27.307 M − 15.754 M) ÷ 4 = 2.89 M (71 %);
    #   8 -> 16: (32.768 M − 27.307 M) ÷ 8 = 0.683 M (17 %): below 50 %, so it stops at 16 GPUs.
    assert expected_stop(STEP_US) == 16
    # a rule of "marginal tokens/s at or below zero" would never stop here: tokens/s rise at every step
    assert all(tokens_per_s(STEP_US[b]) > tokens_per_s(STEP_US[a]) for a, b in zip(sorted(STEP_US), sorted(STEP_US)[1:]))


def test_stops_paying_where_the_construction_says(knee_db):
    with connect(knee_db) as db:
        card = card_from_db(db)
        attribution = db.query("scaling_attribution")
    verdict = next(v for v in card.verdicts if v.sweep == "k")
    assert verdict.stops_at == expected_stop(STEP_US) == 16 and verdict.prev_gpus == 8
    marginal = (tokens_per_s(250) - tokens_per_s(300)) / 8
    assert verdict.marginal_pct == pytest.approx(100 * marginal / (tokens_per_s(1000) / 2))
    # the efficiency points lost into 16 GPUs: E = tokens/s ÷ (baseline tokens/s × N ÷ 2), 83.3 % -> 50 %
    lost = 100 * (tokens_per_s(300) / (tokens_per_s(1000) * 4) - tokens_per_s(250) / (tokens_per_s(1000) * 8))
    assert verdict.lost_pts == pytest.approx(lost)
    row = attribution.filter((pl.col("vs") == "previous") & (pl.col("to_run") == "k-16")).row(0, named=True)
    assert verdict.lost_pts == pytest.approx(row["efficiency_lost_pts"])
    assert verdict.part_pts == pytest.approx(max(row[f"{p}_lost_pts"] for p in
                                                 ("compute", "exposed_comm", "exposed_memory", "other", "idle")))
    assert "stops paying at 16 GPUs" in verdict.sentence and f"{lost:.1f} points lost" in verdict.sentence
    flat = next(v for v in card.verdicts if v.sweep == "flat")
    assert flat.stops_at is None and expected_stop({2: 1000, 4: round(1000 * 2 / 3.8)}) is None
    assert "has not stopped paying up to 4 GPUs" in flat.sentence


def test_the_rule_decides_the_count(knee_db, monkeypatch):
    # with a floor under the 17 % that 8 -> 16 GPUs bought, the same sweep has not stopped paying
    monkeypatch.setattr(card_mod, "MARGINAL_FLOOR_PCT", 10.0)
    with connect(knee_db) as db:
        verdict = next(v for v in card_from_db(db).verdicts if v.sweep == "k")
    assert verdict.stops_at is None


def test_card_numbers_are_run_summary_and_scaling(knee_db):
    with connect(knee_db) as db:
        card = card_from_db(db)
        summary = {r["run_id"]: r for r in db.query("run_summary").iter_rows(named=True)}
        scaling = {r["run_id"]: r for r in db.query("scaling").iter_rows(named=True)}
    rows = card.rows.to_dicts()
    assert [(r["sweep"], r["world_size"]) for r in rows] == \
        [("flat", 2), ("flat", 4)] + [("k", n) for n in sorted(STEP_US)]
    for r in rows:
        best = max((s for s in summary.values() if s["workload"] == r["sweep"] and s["world_size"] == r["world_size"]),
                   key=lambda s: s["tokens_per_s"])
        s, sc = summary[r["run_id"]], scaling[r["run_id"]]
        assert r["run_id"] == best["run_id"]
        assert r["tokens_per_s"] == s["tokens_per_s"] == sc["tokens_per_s"]
        assert r["tokens_per_s_per_gpu"] == s["tokens_per_s_per_gpu"]
        assert r["mfu_pct"] == s["mfu_pct"]
        assert r["scaling_efficiency_vs_sweep_baseline_pct"] == sc["scaling_efficiency_vs_sweep_baseline_pct"]
        assert r["baseline_run"] == sc["baseline_run"]
        assert r["gpu_hours_per_billion_tokens"] == pytest.approx(1e9 * s["world_size"] / s["tokens_per_s"] / 3600)
        assert r["hours_per_billion_tokens"] == pytest.approx(1e9 / s["tokens_per_s"] / 3600)
        if s["energy_per_token_j"]:
            assert r["tokens_per_joule"] == pytest.approx(1 / s["energy_per_token_j"])
        else:
            assert r["tokens_per_joule"] is None
    k8 = next(r for r in rows if r["run_id"] == "k-8")
    assert k8["tokens_per_s"] == pytest.approx(tokens_per_s(STEP_US[8])) and k8["runs_at_size"] == 2
    assert k8["tokens_per_joule"] == pytest.approx(TOKENS / (250.0 * 8 * STEP_US[8] * 1e-6))  # 8 GPUs × 250 W


def test_run_order_is_numeric():
    runs = pl.DataFrame({"run_id": ["w128", "w16", "w256", "w2", "z-1", "w16-tp2"],
                         "workload": ["w", "w", "w", "w", None, "w"], "world_size": [128, 16, 256, 2, 1, 16],
                         "tp": [1, 1, 1, 1, 1, 2]})
    assert run_order(runs) == ["w2", "w16", "w16-tp2", "w128", "w256", "z-1"]
    assert run_sort_key({"run_id": "a", "world_size": None}) > run_sort_key({"run_id": "b", "world_size": 4})


def test_the_page_opens_with_the_card(knee_db, knee_report):
    result = knee_report
    page = result.path.read_text()
    body = page.split("</head><body>\n<h1>", 1)[1]
    assert body.index('id="card"') < body.index('id="sec-findings"') < body.index('id="sec-runs"')
    verdicts = [ln for ln in result.headline if ": adding GPUs" in ln]
    assert len(verdicts) == 2 and result.findings[:2] == verdicts  # the card's verdicts open the findings too
    # every table-of-contents link lands on an id of the page
    ids = set(re.findall(r' id="([^"]+)"', body))
    links = re.findall(r'<a href="#([^"]+)">', body)
    assert links and set(links) <= ids
    # charts numbered 1, 2, 3, ... in order, each with a static SVG for readers without JavaScript
    numbers = [int(n) for n in re.findall(r'<section class="chart" id="fig-[^"]+"><h2>(\d+)\. ', body)]
    assert numbers == list(range(1, len(result.charts) + 1))
    assert body.count("<noscript><div class=\"static\"><svg") == len(result.charts)
    assert "marginal_returns" in result.charts
    # the runs table in run order: k-2, k-4, k-8, k-8-tp2, k-16 (not k-16 before k-2)
    table = body.split("<h2>Runs</h2>")[1].split("</table>")[0]
    order = [m for m in re.findall(r"<tr><td>([^<]+)</td>", table)]
    assert order == ["f-2", "f-4", "k-2", "k-4", "k-8", "k-8-tp2", "k-16"]
    # the top-kernels table: kernel_summary's biggest kernel of the 16-GPU run, by its short name
    with connect(knee_db) as db:
        top = db.query("kernel_summary").filter(pl.col("run_id") == "k-16").sort("total_ns", descending=True).row(0, named=True)
    kernels = body.split('id="top-kernels"')[1].split("</table>")[0]
    assert f">{top['short_name']}</td>" in kernels and top["family"] in kernels


def test_one_gpu_count_is_a_table_not_point_charts(tmp_path):
    write_run(tmp_path, SynthRun("a-4", ranks=4, steps=2, workload="one"))
    write_run(tmp_path, SynthRun("b-4", ranks=4, steps=2, step_us=800, workload="one",
                                 parallel={"dp": 2, "tp": 2, "pp": 1, "cp": 1}))
    assert not ingest([tmp_path], db=tmp_path / "t.duckdb", workers=1).errors
    result = build_report(tmp_path / "t.duckdb", tmp_path / "r.html")
    assert not {"throughput", "throughput_per_gpu", "mfu", "marginal_returns"} & set(result.charts)
    assert any(n.startswith("Throughput vs GPUs: all its data is at one GPU count (4 GPUs)") for n in result.omitted)
    assert "layouts" in result.charts  # layouts at one GPU count are what that chart compares
    assert "one: one GPU count (4 GPUs) measured" in "\n".join(result.headline)


def test_card_command(knee_db):
    result = CliRunner().invoke(main, ["card", "--db", str(knee_db)])
    assert result.exit_code == 0, result.output
    assert "k: adding GPUs stops paying at 16 GPUs" in result.output
    assert "  8 GPUs  best of 2 k-8 (" in result.output
    csv = CliRunner().invoke(main, ["card", "--db", str(knee_db), "--format", "csv", "--runs", "k-2", "--runs", "k-4"])
    assert csv.exit_code == 0 and csv.output.splitlines()[0].startswith("sweep,world_size,run_id")
    assert len(csv.output.strip().splitlines()) == 3
    unknown = CliRunner().invoke(main, ["card", "--db", str(knee_db), "--runs", "nope"])
    assert unknown.exit_code == 1 and "unknown run nope" in unknown.output


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (make setup installs Debian's chromium as root)")
def test_no_horizontal_scroll_at_1280_px_and_svgs_without_javascript(knee_report, tmp_path):
    result = knee_report
    page = result.path.read_text()
    probe = ('<script>setTimeout(() => { document.title = "SW=" + document.documentElement.scrollWidth + " CW=" '
             '+ document.documentElement.clientWidth + " LIVE=" + document.querySelectorAll("div.vega svg").length;'
             ' }, 2000)</script>')
    end = page.rindex("</body>")
    (tmp_path / "probe.html").write_text(page[:end] + probe + page[end:])
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--virtual-time-budget=20000", "--window-size=1280,2000", "--dump-dom"]
    live = subprocess.run([*flags, f"--user-data-dir={tmp_path / 'p1'}", (tmp_path / "probe.html").as_uri()],
                          capture_output=True, text=True, timeout=120).stdout
    sw, cw, svgs = map(int, re.search(r"<title>SW=(\d+) CW=(\d+) LIVE=(\d+)</title>", live).groups())
    assert sw <= cw and svgs == len(result.charts)
    # JavaScript off (headless Chromium cannot dump a page with scripting disabled): the page as such a
    # browser has it, no scripts and the <noscript> blocks shown; every chart's static SVG renders, no scroll
    static = re.sub(r"<script\b.*?</script>", "", page, flags=re.S).replace("<noscript>", "").replace("</noscript>", "")
    assert "vegaEmbed" not in static
    probe = probe.replace('"div.vega svg"', '"div.static > svg"')
    end = static.rindex("</body>")
    (tmp_path / "static.html").write_text(static[:end] + probe + static[end:])
    off = subprocess.run([*flags, f"--user-data-dir={tmp_path / 'p2'}", (tmp_path / "static.html").as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    sw, cw, svgs = map(int, re.search(r"<title>SW=(\d+) CW=(\d+) LIVE=(\d+)</title>", off).groups())
    assert sw <= cw and svgs == len(result.charts)
