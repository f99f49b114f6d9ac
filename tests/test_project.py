"""scaletrace project: the projection model on generated sweeps whose ground truth the test derives.

The generator (pipeline/synth.py ``CostModel``, ``cost_sweep_specs``) builds each run of a sweep from
the standard cost models, in µs, at N ranks (data parallel, one all_reduce of S bytes per step):

    compute(N)  = a + b / N                                 (strong scaling)
    transfer(N) = α·2(N−1) + S·2(N−1)/N ÷ busbw             (ring all_reduce; α, busbw of the intra-node
                                                             link while N ≤ gpus_per_node, else inter-node)
    exposed(N)  = max(0, transfer − h·compute)              (the all_reduce starts with h of compute left)
    step(N)     = compute + exposed + overhead

The model is fitted on the measured sizes only; the truth at 2× and 4× the largest measured size
comes from the same formulas (``CostModel.step_us``), never from the code under test.
"""

from __future__ import annotations

import json

import polars as pl
import pytest
from click.testing import CliRunner

import scaletrace
from conftest import built_once
from scaletrace.cli import main
from scaletrace.pipeline import connect, ingest
from scaletrace.pipeline.synth import CostModel, cost_sweep_specs, write_run
from scaletrace.queries.analysis.costmodel import ring_factor, ring_steps
from scaletrace.queries.analysis.projection import NotIdentifiableError, ProjectionError, parse_what_if
from scaletrace.queries.analysis.projection_sweeps import curve, fit_sweeps, knee

US = 1000  # ns per µs
MEASURED = [2, 4, 8, 16]
TARGETS = [32, 64]  # 2× and 4× the largest measured size
# Crosses nodes inside the measured sizes (4 GPUs per node: 8 and 16 span nodes), exposed throughout.
ACROSS_NODES = CostModel(compute_a_us=200, compute_b_us=3200, alpha_intra_us=2, alpha_inter_us=6,
                         busbw_intra_gbps=100, busbw_inter_gbps=25, grad_bytes=16 << 20, overlap_fraction=0.5,
                         overhead_us=20, gpus_per_node=4)
# One node throughout; communication fully hidden in every measured run, exposed only beyond them.
HIDDEN = CostModel(compute_a_us=100, compute_b_us=8000, alpha_intra_us=5, busbw_intra_gbps=100,
                   grad_bytes=16 << 20, overlap_fraction=0.8, overhead_us=20, gpus_per_node=512)
WEAK = CostModel(compute_a_us=900, compute_b_us=0, alpha_intra_us=2, alpha_inter_us=6, busbw_intra_gbps=100,
                 busbw_inter_gbps=25, grad_bytes=16 << 20, overlap_fraction=0.5, overhead_us=20, gpus_per_node=4,
                 scaling="weak")
SWEEPS = {"across": ACROSS_NODES, "hidden": HIDDEN, "weak": WEAK}


def _write(root, name, cost, sizes):
    for spec in cost_sweep_specs(sizes, cost, workload=name):
        write_run(root, spec)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    def build(root):
        for name, cost in SWEEPS.items():
            _write(root, name, cost, MEASURED)
        _write(root, "two-sizes", ACROSS_NODES, [2, 4])
        path = root / "t.duckdb"
        report = ingest([root], db=path, workers=1)
        assert not report.errors, [o.line() for o in report.errors]
    return built_once(tmp_path_factory, "test_project-db", build) / "t.duckdb"


def _projected(db, workload, to=TARGETS, what_if=None) -> pl.DataFrame:
    return scaletrace.project(db, workload=workload, to=to, what_if=what_if)


def _row(df: pl.DataFrame, n: int, what_if: str = "none") -> dict:
    return df.filter((pl.col("world_size") == n) & (pl.col("what_if") == what_if)).row(0, named=True)


@pytest.mark.parametrize("name", sorted(SWEEPS))
@pytest.mark.parametrize("n", TARGETS)
def test_projection_matches_ground_truth(db, name, n):
    cost = SWEEPS[name]
    row = _row(_projected(db, name), n)
    truth_ns = cost.step_us(n) * US
    assert not row["measured"]
    assert abs(row["step_time_ns"] - truth_ns) / truth_ns < 0.10, (row["step_time_ns"], truth_ns)
    # the parts follow the same formulas
    assert abs(row["compute_ns"] - cost.compute_us(n) * US) / (cost.compute_us(n) * US) < 0.02
    assert row["exposed_comm_ns"] == pytest.approx(cost.exposed_us(n) * US, rel=0.10, abs=2 * US)
    # nodes: of the widest node any measured run.json reports (a 16-GPU run on one node says 16)
    assert row["num_nodes"] == -(-n // min(cost.gpus_per_node, max(MEASURED)))


def test_measured_rows_carry_measured_values_and_in_sample_prediction(db):
    df = _projected(db, "across")
    measured = df.filter("measured").sort("world_size")
    assert measured["world_size"].to_list() == MEASURED
    for row in measured.iter_rows(named=True):
        n = row["world_size"]
        step_ns = round(ACROSS_NODES.step_us(n)) * US  # the generator rounds to whole µs
        assert row["step_time_ns"] == step_ns  # measured (ProfilerStep durations)
        assert row["run_id"] == f"across-{n}"
        assert row["predicted_step_time_ns"] == pytest.approx(step_ns, rel=0.02)  # in-sample
        assert row["tokens_per_s"] == pytest.approx(8192 / (step_ns / 1e9))
        assert row["tokens_per_s_per_gpu"] == pytest.approx(row["tokens_per_s"] / n)
        assert row["loo_error_pct"] is not None
    # projected rows carry the largest leave-one-out error as their band
    band = max(abs(x) for x in measured["loo_error_pct"])
    assert df.filter(~pl.col("measured"))["loo_error_pct"].to_list() == [band] * len(TARGETS)
    # scaling efficiency vs the 2-GPU baseline (strong): speedup ÷ GPU ratio
    base = measured.row(0, named=True)
    for row in df.iter_rows(named=True):
        expected = 100 * (row["tokens_per_s"] / base["tokens_per_s"]) / (row["world_size"] / 2)
        assert row["scaling_efficiency_vs_layout_baseline_pct"] == pytest.approx(expected)
        assert row["mfu_pct"] == pytest.approx(100 * row["tokens_per_s"] * 6e9 / (row["world_size"] * 989e12))


def test_leave_one_out_error_is_the_refit_prediction(db):
    """LOO: refit without a run and predict it.  In the one-node sweep the model is exact, so leaving out
    4 or 8 GPUs predicts them within rounding.  In the sweep across nodes, leaving out 16 GPUs leaves
    one inter-node size (8), so α is shared with the intra-node link (α_intra) and the inter-node β
    absorbs 8's extra latency: at 16 the latency term is short by (α_inter − α_intra)·steps(16) and the
    bandwidth term long by (α_inter − α_intra)·steps(8)·factor(16)/factor(8); the all_reduce there
    is fully exposed, so the step moves by the difference."""
    df = _projected(db, "hidden").filter("measured")
    assert all(abs(x) < 2 for x in df.filter(pl.col("world_size").is_in([4, 8]))["loo_error_pct"])
    c = ACROSS_NODES
    d_alpha = c.alpha_inter_us - c.alpha_intra_us
    shift_us = (-d_alpha * ring_steps("all_reduce", 16)
                + d_alpha * ring_steps("all_reduce", 8) * ring_factor("all_reduce", 16) / ring_factor("all_reduce", 8))
    across = _projected(db, "across").filter("measured")
    assert _row(across, 16)["loo_error_pct"] == pytest.approx(100 * shift_us / c.step_us(16), abs=0.2)


def test_hidden_communication_knee_is_predicted(db):
    """Every measured run hides its all_reduce (exposed 0), so measured efficiency only reflects the
    compute term a; the model still predicts the exposure beyond 16 GPUs and the knee."""
    df = _projected(db, "hidden")
    for n in MEASURED:
        assert HIDDEN.exposed_us(n) == 0  # the premise, from the parameters
        assert _row(df, n)["exposed_comm_ns"] == 0
    assert HIDDEN.exposed_us(32) > 0
    assert _row(df, 32)["exposed_comm_ns"] == pytest.approx(HIDDEN.exposed_us(32) * US, rel=0.10)
    # the knee: the count beyond which an added GPU buys < ½ of its ideal throughput
    sizes = [2, 4, 8, 16, 32, 64]
    tps = {n: 1 / HIDDEN.step_us(n) for n in sizes}
    ideal_per_gpu = tps[2] / 2
    truth = next(a for a, b in zip(sizes, sizes[1:]) if (tps[b] - tps[a]) / (b - a) < 0.5 * ideal_per_gpu)
    with connect(db) as database:
        sweeps, _ = fit_sweeps(database, "hidden")
    assert knee(curve(sweeps)) == truth == 16


def test_what_if_moves_the_prediction_as_the_model_says(db):
    """compute=2 halves compute (and the overlap room with it); network=0.5 doubles the inter-node
    bandwidth term. Expected values from the generator's parameters."""
    cost = ACROSS_NODES
    n = 64  # 16 nodes: the all_reduce group spans nodes
    both = _projected(db, "across", to=[n], what_if="compute=2,network=0.5")
    comp = cost.compute_us(n) / 2
    transfer = (cost.alpha_inter_us * ring_steps("all_reduce", n)
                + cost.grad_bytes * ring_factor("all_reduce", n) / (0.5 * cost.busbw_inter_gbps * 1e3))
    expected = comp + max(0.0, transfer - cost.overlap_fraction * comp) + cost.overhead_us
    row = _row(both, n, "compute=2,network=0.5")
    assert row["step_time_ns"] == pytest.approx(expected * US, rel=0.05)
    assert row["compute_ns"] == pytest.approx(comp * US, rel=0.02)
    one = _projected(db, "across", to=[n], what_if="compute=2")
    base, faster = _row(one, n), _row(one, n, "compute=2")
    # faster compute: shorter step, more of it exposed communication (more communication-bound)
    assert faster["step_time_ns"] < base["step_time_ns"]
    assert faster["exposed_comm_ns"] > base["exposed_comm_ns"]
    # inside one node network=0.5 changes nothing (it is the inter-node bandwidth)
    half = _projected(db, "across", to=[n], what_if="network=0.5")
    assert _row(half, 4, "network=0.5")["step_time_ns"] == pytest.approx(_row(half, 4)["predicted_step_time_ns"])
    assert _row(half, n, "network=0.5")["step_time_ns"] > _row(half, n)["step_time_ns"]


def test_not_identifiable_with_two_sizes(db):
    with pytest.raises(NotIdentifiableError, match="not identifiable: 2 measured GPU counts"):
        _projected(db, "two-sizes")
    result = CliRunner().invoke(main, ["project", "--db", str(db), "--workload", "two-sizes"])
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "not identifiable" in result.output


def test_bad_input(db):
    with pytest.raises(ProjectionError, match="unknown knob"):
        parse_what_if("gpu=2")
    with pytest.raises(ProjectionError, match="positive"):
        parse_what_if("compute=0")
    result = CliRunner().invoke(main, ["project", "--db", str(db), "--workload", "across", "--to", "x"])
    assert result.exit_code == 2
    result = CliRunner().invoke(main, ["project", "--db", str(db), "--workload", "nope"])
    assert result.exit_code == 1 and "nope" in result.output


def test_cli_formats(db):
    result = CliRunner().invoke(main, ["project", "--db", str(db), "--workload", "across", "--to", "32,64",
                                       "--what-if", "compute=2", "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert {r["what_if"] for r in rows} == {"none", "compute=2"}
    assert set(rows[0]) >= {"workload", "world_size", "num_nodes", "measured", "step_time_ns", "tokens_per_s",
                            "tokens_per_s_per_gpu", "mfu_pct", "scaling_efficiency_vs_layout_baseline_pct", "compute_ns", "comm_ns",
                            "exposed_comm_ns", "loo_error_pct", "what_if", "notes"}
    result = CliRunner().invoke(main, ["project", "--db", str(db), "--workload", "across", "--format", "csv"])
    assert result.exit_code == 0 and result.output.startswith("workload,")
    assert "64" in result.output  # default: 2× and 4× the largest measured count


def test_real_dlrm_is_not_identifiable(shared_traces, tmp_path):
    db = tmp_path / "dlrm.duckdb"
    report = ingest([shared_traces / "param-dlrm-8rank"], db=db, workers=1)
    assert not report.errors
    result = CliRunner().invoke(main, ["project", "--db", str(db)])
    assert result.exit_code == 1
    assert "not identifiable: 1 measured GPU count (8)" in result.output


def test_report_projection_chart_and_finding(db, tmp_path):
    """The Projection chart validates (to_dict) with the LOO band and the ideal line, and the finding
    names the knee of the hidden sweep (16 GPUs, derived in test_hidden_communication_knee_is_predicted)."""
    from scaletrace.reports import build_report
    from scaletrace.reports.charts_projection import build_projection, projection_data

    with connect(db) as database:
        df, skipped = projection_data(database)
    assert any("two-sizes: projection not identifiable" in str(line) for line in skipped)
    hidden = df.filter(pl.col("sweep") == "hidden")
    assert hidden["world_size"].max() == 4 * max(MEASURED)
    assert (hidden["band_lo_tps"] <= hidden["predicted_tps"]).all()
    assert (hidden["predicted_tps"] <= hidden["band_hi_tps"]).all()
    spec = build_projection(df).to_dict()
    assert len(spec["layer"]) == 5
    result = build_report(db, tmp_path / "r.html")
    assert "projection" in result.charts
    assert any(f.startswith("hidden: projected knee at 16 GPUs (the largest measured count)") for f in result.findings)


@pytest.mark.parametrize("args, expected", [
    (["--to", str(10**30)], "beyond the 16,777,216 GPUs"),  # a polars i128 ComputeError before
    (["--to", str(2**24 + 4)], "beyond the 16,777,216 GPUs"),
    (["--what-if", "compute=1e-320"], "between 0.001 and 1000"),  # a ZeroDivisionError before
    (["--what-if", "network=1e300"], "between 0.001 and 1000"),
])
def test_out_of_range_values_are_one_line(db, args, expected):
    result = CliRunner().invoke(main, ["project", "--db", str(db), "--workload", "across", *args])
    assert result.exit_code == 1, result.output
    assert result.output.count("\n") == 1 and expected in result.output
