"""The report's layout colours, overlap headroom, step-time spread, node boundary and per-rank axes.

Expected values come from the generator's arithmetic (pipeline/synth.py: ``SynthRun`` places each
rank's compute and all_reduce, ``CostModel`` gives compute, transfer and overlap per GPU count) or
from the collector's step logs read directly, never from the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from conftest import built_once
from scaletrace.pipeline import connect, ingest
from scaletrace.pipeline.synth import CostModel, SynthRun, cost_sweep_specs, sweep_specs, write_run
from scaletrace.reports import build_charts, build_report
from scaletrace.reports import data as report_data
from scaletrace.reports.chartkit import LAYOUT_COLOURS, layout_name
from scaletrace.queries.analysis.headroom import MEASURED, PROJECTED
from scaletrace.reports.charts_headroom import headroom_sentences

US = 1000
ROOT = Path(__file__).resolve().parents[1]
# One node; the all_reduce hides under compute at every measured count and stops fitting beyond them:
# headroom = 0.8 · compute ÷ transfer, which falls through 1 between 16 and 32 GPUs.
HIDDEN = CostModel(compute_a_us=100, compute_b_us=8000, alpha_intra_us=5, busbw_intra_gbps=100,
                   grad_bytes=16 << 20, overlap_fraction=0.8, overhead_us=20, gpus_per_node=512)
# Four GPUs per node: the 8- and 16-GPU runs span nodes.
ACROSS = CostModel(compute_a_us=200, compute_b_us=3200, alpha_intra_us=2, alpha_inter_us=6, busbw_intra_gbps=100,
                   busbw_inter_gbps=25, grad_bytes=16 << 20, overlap_fraction=0.5, overhead_us=20, gpus_per_node=4)
MEASURED_SIZES = [2, 4, 8, 16]


def _label(run_dir: Path, strategy: str) -> None:
    """run.json labels.layout (the strategy label the layouts query reads)."""
    path = run_dir / "run.json"
    manifest = json.loads(path.read_text())
    manifest.setdefault("labels", {})["layout"] = strategy
    path.write_text(json.dumps(manifest))


@pytest.fixture(scope="module")
def cost_db(tmp_path_factory):
    def build(root):
        for name, cost in (("hidden", HIDDEN), ("across", ACROSS)):
            for spec in cost_sweep_specs(MEASURED_SIZES, cost, workload=name):
                write_run(root, spec)
        path = root / "t.duckdb"
        assert not ingest([root], db=path, workers=1).errors
    return built_once(tmp_path_factory, "test_report_layout-cost_db", build) / "t.duckdb"


@pytest.fixture(scope="module")
def layouts_db(tmp_path_factory):
    """Two layouts (ddp, fsdp) at 2, 4 and 8 GPUs and a tp2 layout at 4 and 8; fsdp slower everywhere."""
    def build(root):
        for n, us in {2: 600, 4: 450, 8: 400}.items():
            _label(write_run(root, SynthRun(f"ddp-{n}", ranks=n, steps=2, step_us=us, compute_us=150, workload="w")),
                   "ddp")
            _label(write_run(root, SynthRun(f"fsdp-{n}", ranks=n, steps=2, step_us=us + 200, compute_us=150,
                                            workload="w")), "fsdp")
            if n > 2:
                write_run(root, SynthRun(f"tp-{n}", ranks=n, steps=2, step_us=us + 400, compute_us=150, workload="w",
                                         tp=2, tp_comm_us=20, parallel={"dp": n // 2, "tp": 2, "pp": 1, "cp": 1}))
        path = root / "t.duckdb"
        assert not ingest([root], db=path, workers=1).errors
    return built_once(tmp_path_factory, "test_report_layout-layouts_db", build) / "t.duckdb"


@pytest.fixture(scope="module")
def cost_data(cost_db):
    """The report's data of cost_db, loaded once: the tests of it only read it."""
    return _load(cost_db)


@pytest.fixture(scope="module")
def layouts_data(layouts_db):
    return _load(layouts_db)


@pytest.fixture(scope="module")
def layouts_drawn(layouts_data):
    """Every chart of layouts_db's report, {key: Vega-Lite spec}, built once."""
    drawn, _ = build_charts(layouts_data)
    return {k: spec for k, _, _, spec in drawn}


def _load(db_path) -> report_data.ReportData:
    with connect(db_path) as db:
        return report_data.load(db)


def _headroom(data: report_data.ReportData, sweep: str) -> pl.DataFrame:
    return data.headroom.filter(pl.col("sweep") == sweep).sort("world_size")


def test_measured_headroom_is_the_overlap_over_the_transfer(cost_data):
    """The all_reduce starts when round(0.8 · compute) of the step's compute is left; it lasts the transfer."""
    df = _headroom(cost_data, "hidden").filter(pl.col("basis") == MEASURED)
    assert df["world_size"].to_list() == MEASURED_SIZES
    for r in df.iter_rows(named=True):
        n = r["world_size"]
        overlap_us = round(HIDDEN.overlap_fraction * round(HIDDEN.compute_us(n)))
        transfer_us = round(HIDDEN.transfer_us(n))
        assert r["hideable_compute_per_step_ns"] == pytest.approx(overlap_us * US)
        assert r["comm_per_step_ns"] == pytest.approx(transfer_us * US)
        assert r["headroom_ratio"] == pytest.approx(overlap_us / transfer_us)


def test_projected_headroom_shows_the_knee_one_gpu_count_early(cost_data):
    """Measured at 16 GPUs the all_reduce still hides (headroom just above 1: no exposed comm yet); the
    projection to 32 and 64 follows the cost model and falls below 1, and the sentence says 32."""
    df = _headroom(cost_data, "hidden")
    at16 = df.filter((pl.col("world_size") == 16) & (pl.col("basis") == MEASURED)).row(0, named=True)
    assert 1 < at16["headroom_ratio"] < 1.1
    assert HIDDEN.exposed_us(16) == 0 and HIDDEN.exposed_us(32) > 0
    projected = df.filter(pl.col("basis") == PROJECTED)
    assert projected["world_size"].to_list() == [32, 64]
    for r in projected.iter_rows(named=True):
        n = r["world_size"]
        truth = HIDDEN.overlap_fraction * HIDDEN.compute_us(n) / HIDDEN.transfer_us(n)
        assert r["headroom_ratio"] == pytest.approx(truth, rel=0.05), n
    assert projected["headroom_ratio"][0] < 1
    sentences = headroom_sentences(df)
    assert len(sentences) == 1 and "at 32 GPUs" in sentences[0] and "projected" in sentences[0]
    assert "at 16 GPUs its headroom was 1.03" in sentences[0]


def test_headroom_with_a_straggler_counts_its_waiting(tmp_path):
    """sweep_specs: 600 µs compute, the all_reduce starts 50 µs before compute ends and ends 100 µs after
    the last rank arrives; rank 3 arrives 200 µs late, so every other rank's all_reduce lasts 300 µs and
    the straggler's 100 µs: mean over n ranks ((n − 1)·300 + 100) ÷ n; hideable compute 50 µs."""
    for spec in sweep_specs([4, 8], steps=2, kernels_per_step=3, tp=2, straggler=3, gzip=False):
        write_run(tmp_path, spec)
    db = tmp_path / "t.duckdb"
    assert not ingest([tmp_path], db=db, workers=1).errors
    df = _headroom(_load(db), "synth").filter(pl.col("basis") == MEASURED)
    for n in (4, 8):
        dp = df.filter((pl.col("world_size") == n) & (pl.col("collectives") == "all_reduce")).row(0, named=True)
        comm_us = ((n - 1) * 300 + 100) / n
        assert dp["comm_per_step_ns"] == pytest.approx(comm_us * US)
        assert dp["hideable_compute_per_step_ns"] == pytest.approx(50 * US)
        assert dp["headroom_ratio"] == pytest.approx(50 / comm_us)
        tp = df.filter((pl.col("world_size") == n) & (pl.col("collectives") == "all_gather")).row(0, named=True)
        assert tp["headroom_ratio"] == 0  # it starts after compute ends: nothing left to hide it
    sentences = headroom_sentences(df)
    assert any("at 4 GPUs" in s and "all_reduce" in s and f"headroom {50 / 250:.1f}" in s for s in sentences)
    assert any("with no compute left to hide it" in s for s in sentences)


def test_layout_names():
    assert layout_name(1, 1, 1, "ddp") == "ddp"
    assert layout_name(2, 1, 1, "fsdp_tp") == "fsdp_tp·tp2"
    assert layout_name(4, 1, 1, "tp") == "tp4"
    assert layout_name(2, 2, 1, None) == "tp2·pp2"
    assert layout_name(1, 1, 1, None) == "dp"
    assert layout_name(None, None, None, None) == "layout unknown"


def _colour_encodings(node, out):
    """Every colour encoding on the layout name in a Vega-Lite spec (nested layers, concats, facets)."""
    if isinstance(node, dict):
        colour = node.get("encoding", {}).get("color") if isinstance(node.get("encoding"), dict) else None
        if isinstance(colour, dict) and colour.get("field") == "layout_name":
            out.append(colour)
        for v in node.values():
            _colour_encodings(v, out)
    elif isinstance(node, list):
        for v in node:
            _colour_encodings(v, out)
    return out


def _inline_rows(node, out=None) -> list[dict]:
    """Every inline data row of a spec: ``values`` anywhere, and the top-level ``datasets``."""
    out = [] if out is None else out
    if isinstance(node, dict):
        for key, v in node.items():
            if key == "values" and isinstance(v, list):
                out.extend(r for r in v if isinstance(r, dict))
            elif key == "datasets" and isinstance(v, dict):
                out.extend(r for rows in v.values() for r in rows)
            else:
                _inline_rows(v, out)
    elif isinstance(node, list):
        for v in node:
            _inline_rows(v, out)
    return out


def _layer_rows(spec, layer) -> list[dict]:
    d = layer.get("data", {})
    return d["values"] if "values" in d else spec["datasets"][d["name"]]


def test_one_colour_per_layout_in_every_chart(layouts_db, layouts_data, layouts_drawn):
    with connect(layouts_db) as db:
        selected = report_data.load(db, runs=["ddp-8", "tp-8", "fsdp-2", "fsdp-4"])
    assert layouts_data.layout_domain == ["ddp", "fsdp", "tp2"]
    by_key = layouts_drawn
    for key in ("marginal_returns", "throughput", "throughput_per_gpu", "efficiency", "mfu", "layouts"):
        colours = _colour_encodings(by_key[key], [])
        assert colours, f"{key} does not colour by layout"
        for c in colours:
            assert c["scale"]["domain"] == ["ddp", "fsdp", "tp2"], key
            assert c["scale"]["range"] == LAYOUT_COLOURS[:3], key
    # a report of some runs keeps every layout's colour (the domain is the database's runs)
    drawn_sel, _ = build_charts(selected)
    for _, _, _, spec in drawn_sel:
        for c in _colour_encodings(spec, []):
            assert c["scale"]["domain"] == ["ddp", "fsdp", "tp2"]


def test_a_line_per_layout_across_gpu_counts(layouts_drawn):
    """The throughput chart's lines: one per layout, each through its GPU counts (not the best run only)."""
    spec = layouts_drawn["throughput"]
    def layers(node):
        for layer in node.get("layer", []):
            yield layer
            yield from layers(layer)

    line_rows = [layer for layer in layers(spec) if isinstance(layer.get("mark"), dict)
                 and layer["mark"].get("type") == "line"
                 and layer.get("encoding", {}).get("detail", {}).get("field") == "line"]
    assert len(line_rows) == 1
    rows = _layer_rows(spec, line_rows[0])
    lines = {}
    for r in rows:
        lines.setdefault(r["line"], []).append(r["world_size"])
    assert {k: sorted(v) for k, v in lines.items()} == {"w · ddp": [2, 4, 8], "w · fsdp": [2, 4, 8], "w · tp2": [4, 8]}


def test_step_time_spread_is_the_step_logs_percentiles(tmp_path):
    """p50 / p95 over the steps of the collector's log (outside the profiled window, after the first,
    and not the step right after the window: this log predates the device clock, and that step holds
    the trace's export), each step's time on its slowest rank, read from the jsonl files themselves."""
    run = ROOT / "fixtures" / "demo-sweep" / "ddp-2"
    db = tmp_path / "t.duckdb"
    assert not ingest([run], db=db, workers=1).errors
    steps: dict[int, int] = {}
    for path in run.glob("rank*.steps.jsonl"):
        log = [json.loads(line) for line in path.read_text().splitlines()]
        profiled = {s["step"] for s in log if s["profiled"]}
        for s in log:
            if not s["profiled"] and s["step"] > 0 and s["step"] - 1 not in profiled:
                steps[s["step"]] = max(steps.get(s["step"], 0), s["dur_ns"])
    export_step = max(profiled) + 1  # its step holds the export: far above every step kept
    assert max(json.loads(line)["dur_ns"] for line in (run / "rank0.steps.jsonl").read_text().splitlines()
               if json.loads(line)["step"] == export_step) > max(steps.values())
    durations = np.array(sorted(steps.values()), float)
    with connect(db) as database:
        spread = database.query("step_time_spread").row(0, named=True)
        summary = database.query("run_summary").row(0, named=True)
        data = report_data.load(database)
    assert spread["step_time_source"] == "step_log" and spread["num_steps"] == len(durations)
    assert spread["p50_ns"] == round(np.median(durations)) == summary["step_time_ns"]  # ::BIGINT rounds
    assert spread["p95_ns"] == round(np.percentile(durations, 95))
    # the step-time chart: a whisker from p50 to p95 and a label naming both
    spec = build_charts(data)[0]
    step = {k: s for k, _, _, s in spec}["step_time"]
    rows = _inline_rows(step)
    whisker = [r for r in rows if "p95_ms" in r and r.get("p95_ms") is not None]
    assert whisker and whisker[0]["p95_ms"] == pytest.approx(np.percentile(durations, 95) / 1e6, rel=1e-6)
    assert any(str(r.get("si_label", "")).count("p95") == 1 for r in rows)


def test_node_boundary_and_independent_rank_axes(cost_data):
    drawn, _ = build_charts(cost_data)
    by_key = {k: s for k, _, _, s in drawn}
    rows = _inline_rows(by_key["collectives"])
    assert {r["label"] for r in rows if "label" in r} == {"4 GPUs per node"}  # 'across' spans nodes from 8
    assert by_key["rank_wait"]["resolve"]["scale"]["y"] == "independent"
    titles = [p["title"]["text"] for p in by_key["rank_wait"]["vconcat"]]
    # run order; the 6 runs with the most ranks (data.MAX_RANK_RUNS)
    assert titles == [f"across-{n}" for n in (4, 8, 16)] + [f"hidden-{n}" for n in (4, 8, 16)]


def test_headroom_at_one_gpu_count_is_not_a_chart(tmp_path):
    for spec in cost_sweep_specs([4], HIDDEN, workload="one"):
        write_run(tmp_path, spec)
    db = tmp_path / "t.duckdb"
    assert not ingest([tmp_path], db=db, workers=1).errors
    result = build_report(db, tmp_path / "r.html")
    assert "overlap_headroom" not in result.charts
    assert any(n.startswith("Overlap headroom") and "one GPU count" in n for n in result.omitted)
