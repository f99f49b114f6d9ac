"""The report's numbers: one "exposed comm % of step" everywhere, --runs filters everything,
exact shares, efficiency that says what it is against, the Database API, output directories.

Expected values come from the generator's own geometry (pipeline/synth.py:
SynthRun.starts / allreduce), worked out by hand below, never from the code.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from statistics import mean

import pytest
from click.testing import CliRunner

from conftest import spec_values
from scaletrace.pipeline import connect, ingest
from scaletrace.cli import main
from scaletrace.pipeline.synth import SynthRun, write_run
from scaletrace.reports import ReportError, build_report

# Two ranks, one step, rank 1 a straggler by 200 µs (times in µs):
#   rank 0: compute [10, 310), all_reduce [260, 560): span 550, exposed 560 − 310 = 250
#   rank 1: compute [210, 510), all_reduce [460, 560): span 350, exposed 560 − 510 = 50
# exposed comm % of step = Σ exposed ÷ Σ span over the ranks = 300/900 = 33.3 % (one aggregate: the ms a
# step it names are that share of the device period; the mean of the ranks' ratios would be 29.87 %)
SKEWED = SynthRun("skewed-2", ranks=2, steps=1, step_us=1000, compute_us=300, overlap_us=50, transfer_us=100,
                  straggler_rank=1, straggler_delay_us=200, workload="skew")
SOLO = SynthRun("skewed-1", ranks=1, steps=1, step_us=600, compute_us=300, workload="skew")


def exposed_pct_by_hand(spec: SynthRun) -> float:
    """Σ exposed comm ÷ Σ span over ranks for a one-step, one-kernel run without TP comm."""
    shares = []
    for rank, compute_start in spec.starts(0).items():
        begin, end = spec.allreduce(0)[rank]
        span = end - compute_start  # first event: the compute kernel; last: the all_reduce
        exposed = end - max(begin, compute_start + spec.compute_us)
        shares.append((exposed, span))
    return 100 * sum(e for e, _ in shares) / sum(s for _, s in shares)


def test_by_hand_arithmetic_matches_the_comment():
    assert exposed_pct_by_hand(SKEWED) == pytest.approx(100 * (250 + 50) / (550 + 350))


@pytest.fixture(scope="module")
def skewed_db(tmp_path_factory):
    root = tmp_path_factory.mktemp("skewed")
    write_run(root, SKEWED)
    write_run(root, SOLO)
    db = root / "t.duckdb"
    assert not ingest([root], db=db, workers=1).errors
    return db


@pytest.fixture(scope="module")
def skewed_report(skewed_db, tmp_path_factory):
    """build_report(skewed_db) with the defaults, built once for the tests that only read it."""
    return build_report(skewed_db, tmp_path_factory.mktemp("skewed-report") / "r.html")


def _specs(html: str) -> dict:
    raw = re.search(r'<script type="application/json" id="specs">(.*?)</script>', html, re.S).group(1)
    return json.loads(raw)




def test_one_exposed_comm_figure_in_table_findings_and_charts(skewed_db, skewed_report):
    expected = exposed_pct_by_hand(SKEWED)
    with connect(skewed_db) as db:
        summary = {r["run_id"]: r for r in db.query("run_summary").iter_rows(named=True)}
    assert summary["skewed-2"]["exposed_comm_pct"] == pytest.approx(expected, rel=1e-9)
    result = skewed_report
    html = result.path.read_text()
    table = html.split("<h2>Runs</h2>")[1].split("</table>")[0]
    assert f"<td>{expected:.1f}</td>" in table  # the runs table's exposed comm % of step
    said = [f for f in result.findings if "skewed-2" in f or "2 GPUs" in f]
    assert any(f"{expected:.0f} % of the step" in f for f in said), said
    # the headline is the decision card (reports/card.py): where it states exposed comm, the same figure
    assert all(f"{expected:.1f} %" in line for line in result.headline if "exposed comm" in line)
    specs = _specs(html)
    shares = [v["pct"] for v in spec_values(specs["breakdown"])
              if v.get("run_id") == "skewed-2" and v.get("part") == "exposed comm"]
    assert shares and all(s == pytest.approx(expected, rel=1e-9) for s in shares)
    # one group, one collective, nothing concurrent: the per-group figure equals the run's
    groups = [v["group_exposed_comm_pct"] for v in spec_values(specs["exposed_comm"]) if v.get("run_id") == "skewed-2"]
    assert groups and all(g == pytest.approx(expected, rel=1e-9) for g in groups)


def test_breakdown_shares_are_exact_and_the_axis_stops_at_100(skewed_db, skewed_report):
    result = skewed_report
    spec = _specs(result.path.read_text())["breakdown"]
    with connect(skewed_db) as db:
        summary = db.query("run_summary")
    parts = ["compute_pct", "exposed_comm_pct", "exposed_memory_pct", "other_pct", "idle_pct"]
    rows = {(v["run_id"], v["part"]): v["pct"] for v in spec_values(spec) if "pct" in v and "part" in v}
    for run in summary.iter_rows(named=True):
        shares = [pct for (run_id, _), pct in rows.items() if run_id == run["run_id"]]
        assert sorted(shares) == sorted(run[p] for p in parts)  # the table's figures, not rounded
        assert sum(shares) == pytest.approx(100, abs=1e-9)
    x_scales = [enc["x"]["scale"] for enc in _encodings(spec) if enc.get("x", {}).get("field") == "pct"]
    assert x_scales and all(s["domain"] == [0, 100] and s["nice"] is False for s in x_scales)


def _encodings(spec) -> list[dict]:
    out = []
    if isinstance(spec, dict):
        if isinstance(spec.get("encoding"), dict):
            out.append(spec["encoding"])
        for value in spec.values():
            out += _encodings(value)
    elif isinstance(spec, list):
        for item in spec:
            out += _encodings(item)
    return out


# --- efficiency wording --------------------------------------------------------------------

STEP_US = {1: 1000, 2: 600, 4: 450}  # one run per GPU count; tokens/s = 8192 / step time


@pytest.fixture(scope="module")
def scaling_db(tmp_path_factory):
    root = tmp_path_factory.mktemp("scaling")
    ids = {1: "alpha-1", 2: "bravo-2", 4: "charlie-4"}
    for n, us in STEP_US.items():
        write_run(root, SynthRun(ids[n], ranks=n, steps=2, step_us=us, compute_us=150, workload="w"))
    write_run(root, SynthRun("delta-4", ranks=4, steps=2, step_us=800, compute_us=150, workload="w",
                             parallel={"dp": 2, "tp": 2, "pp": 1, "cp": 1}))
    db = root / "t.duckdb"
    assert not ingest([root], db=db, workers=1).errors
    return db


@pytest.fixture(scope="module")
def scaling_report(scaling_db, tmp_path_factory):
    """build_report(scaling_db) with the defaults, built once for the tests that only read it."""
    return build_report(scaling_db, tmp_path_factory.mktemp("scaling-report") / "r.html")


def test_each_efficiency_says_what_it_is_against(scaling_report):
    # 2 -> 4 GPUs, best runs 600 µs and 450 µs steps at the same tokens per step:
    vs_previous = 100 * (600 / 450) / (4 / 2)  # 66.7 %
    vs_baseline = 100 * (1000 / 450) / (4 / 1)  # 55.6 %
    result = scaling_report
    line = next(f for f in result.findings if "from 2 GPUs to 4 GPUs" in f and "vs the previous GPU count" in f)
    assert f"{vs_previous:.0f} % efficiency vs the previous GPU count" in line
    assert f"{vs_baseline:.0f} % vs the 1-GPU baseline" in line
    spec = _specs(result.path.read_text())["efficiency"]
    rows = spec_values(spec)
    # the line per layout is against the sweep's baseline (its axis says so); the dashed line is the
    # best run against the previous GPU count (its basis says so)
    base = {v["run_id"]: v["scaling_efficiency_vs_sweep_baseline_pct"] for v in rows
            if v.get("world_size") == 4 and v.get("scaling_efficiency_vs_sweep_baseline_pct") is not None}
    prev = [v["step_efficiency_pct"] for v in rows
            if v.get("world_size") == 4 and v.get("basis") == "best run vs the previous GPU count"]
    assert base["charlie-4"] == pytest.approx(vs_baseline) and prev == [pytest.approx(vs_previous)]
    assert "scaling efficiency vs the 1-GPU baseline (%)" in json.dumps(spec)
    assert "1 GPUs" not in result.path.read_text() and not any("1 GPUs" in h for h in result.headline)


def test_no_chart_averages_layouts_at_a_gpu_count(scaling_report):
    result = scaling_report
    specs = _specs(result.path.read_text())
    for key in ("exposed_comm", "comm_vs_compute", "collectives"):
        at4 = {v["run_id"] for v in spec_values(specs[key]) if v.get("world_size") == 4}
        assert at4 == {"charlie-4"}, key  # the fastest run at 4 GPUs (450 µs < 800 µs), only
        assert not any(isinstance(enc.get("y"), dict) and "aggregate" in enc["y"] for enc in _encodings(specs[key]))


# --- --runs, unknown runs, empty databases ---------------------------------------------------

@pytest.fixture(scope="module")
def filtered_report(scaling_db, tmp_path_factory):
    """build_report of two of scaling_db's runs, given an open Database (the API's other form), built once:
    (the result, the number of runs the Database still answered for after it)."""
    with connect(scaling_db) as db:
        result = build_report(db, tmp_path_factory.mktemp("filtered") / "r.html", runs=["bravo-2", "delta-4"])
        still_open = db.query("run_summary").height  # build_report does not close it
    return result, still_open


def test_runs_filter_everything(filtered_report):
    result, _ = filtered_report
    html = result.path.read_text()
    for absent in ("alpha-1", "charlie-4"):
        assert absent not in html, absent  # table, findings, chart data and tooltips
        assert not any(absent in f for f in result.findings + result.headline)
    assert "bravo-2" in html and "delta-4" in html
    specs = _specs(html)
    assert {v["run_id"] for v in spec_values(specs["throughput"]) if "run_id" in v} == {"bravo-2", "delta-4"}
    # the sweep's baseline (alpha-1) was left out: said, without naming it
    assert any("baseline run, which is not among the selected runs" in n for n in html.split('id="notes"')[1:])


def test_unknown_run_is_an_error_listing_known_runs(scaling_db, tmp_path):
    with pytest.raises(ReportError, match="alpha-1.*bravo-2.*charlie-4.*delta-4"):
        build_report(scaling_db, tmp_path / "r.html", runs=["bravo-2", "no-such-run"])
    assert issubclass(ReportError, ValueError)
    out = tmp_path / "cli.html"
    result = CliRunner().invoke(main, ["report", "--db", str(scaling_db), "-o", str(out), "--runs", "no-such-run"])
    assert result.exit_code == 1
    assert "no-such-run" in result.output and "known runs: alpha-1, bravo-2, charlie-4, delta-4" in result.output
    assert "Traceback" not in result.output and not out.exists()


def test_no_runs_no_report(tmp_path):
    (tmp_path / "empty").mkdir()
    runner = CliRunner()
    result = runner.invoke(main, ["run", str(tmp_path / "empty"), "-o", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 1
    assert not (tmp_path / "out" / "report.html").exists()
    db = tmp_path / "out" / "scaletrace.duckdb"
    if db.exists():  # ingest made an empty database: `report` on it says the same
        again = runner.invoke(main, ["report", "--db", str(db), "-o", str(tmp_path / "r.html")])
        assert again.exit_code == 1 and not (tmp_path / "r.html").exists()
        assert [ln for ln in again.output.splitlines() if ln.startswith("error:")] == \
            ["error: the database holds no runs: no report written (ingest traces first)"]
    assert "no runs" in result.output


# --- API and output paths -----------------------------------------------------------------------

def test_build_report_accepts_a_database(scaling_db, filtered_report):
    result, still_open = filtered_report
    assert still_open == 4  # still open: build_report does not close it
    assert result.path.is_file() and "bravo-2" in result.path.read_text()
    assert f"from {Path(scaling_db).name}" in result.path.read_text()


@pytest.fixture(scope="module")
def scaling_cli_report(scaling_db, tmp_path_factory):
    """`scaletrace report` of scaling_db with --png, into directories that do not exist yet; run once for
    the tests that read what it wrote and said: (html path, png directory, click result)."""
    root = tmp_path_factory.mktemp("scaling-cli")
    out, png = root / "new" / "deeper" / "r.html", root / "figs" / "png"
    result = CliRunner().invoke(main, ["report", "--db", str(scaling_db), "-o", str(out), "--png", str(png), "-q"])
    return out, png, result


def test_missing_output_directories_are_created_and_said(scaling_db, scaling_cli_report):
    out, png, result = scaling_cli_report
    assert result.exit_code == 0, result.output
    assert out.is_file() and (png / "throughput.png").is_file()
    said = [ln for ln in result.output.splitlines() if ln.startswith("created directory")]
    assert said == [f"created directory {out.parent}", f"created directory {png}"]
    # the directories exist now: nothing said (one run is enough for that)
    again = CliRunner().invoke(main, ["report", "--db", str(scaling_db), "-o", str(out), "-q", "--runs", "alpha-1"])
    assert again.exit_code == 0, again.output
    assert "created directory" not in again.output


def _first_pixel(png: bytes) -> tuple[int, ...]:
    """The top-left pixel of an 8-bit RGB/RGBA PNG (its bytes are stored raw under every filter type)."""
    import struct
    import zlib

    width, height, depth, colour = struct.unpack(">IIBB", png[16:26])
    assert depth == 8 and colour in (2, 6)
    pos, idat = 8, b""
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        if kind == b"IDAT":
            idat += png[pos + 8:pos + 8 + length]
        pos += 12 + length
    raw = zlib.decompress(idat)
    return tuple(raw[1:1 + (4 if colour == 6 else 3)])


def test_exported_png_has_a_white_background(scaling_cli_report):
    _, png, result = scaling_cli_report
    assert result.exit_code == 0, result.output
    assert _first_pixel((png / "throughput.png").read_bytes()) in ((255, 255, 255), (255, 255, 255, 255))
