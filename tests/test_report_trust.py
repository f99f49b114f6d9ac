"""What the report says rests on what it can stand behind, everywhere it says it.

* A run whose tokens per step are inferred with low confidence (run_summary's
  tokens_per_step_confidence, a diffusion model's prompt) heads nothing: the decision card gives it no
  row, the findings leave it out of the MFU range (named), and the runs table writes "low confidence"
  beside its tokens/s and MFU (reports/confidence.py, the one rule).
* A percentage above 100 % is never a bare figure: a process group whose overlapping collectives sum
  past the span says why beside the figure (explain and the findings), and run_device_share's
  busy/span percentages of the step time carry a `warning` column where above 100.
* A run whose traces hold no device events ran on CPU ranks: the card, the verdicts, the findings and
  the charts' axis titles say "CPU rank(s)", never GPUs (words.gpus, the one rule).

Every run is generated here; the expected words and figures are worked out from the events.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import polars as pl
import pytest

from conftest import cpu, kernel, query, write_trace
from scaletrace.pipeline import connect, ingest
from scaletrace.reports.card import card_from_db, card_lines
from scaletrace.reports.confidence import LOW_CONFIDENCE
from scaletrace.reports.words import OVERLAPPING_COLLECTIVES, gpus, share

STEP_US, STEPS = 1000, 2
VOCAB, WIDTH, BIG = 1000, 64, 4096
BF16 = ["c10::BFloat16", "c10::BFloat16"]
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def embedding(ts, indices):
    return cpu("aten::embedding", ts, 2, **{"Input Dims": [[VOCAB, WIDTH], indices, [], [], []],
                                            "Input type": ["float", "long", "Scalar", "Scalar", "Scalar"]})


def mm(ts, m, k, n, corr, us=50):
    return [cpu("aten::mm", ts, 5, **{"Input Dims": [[m, k], [k, n]], "Input type": BF16,
                                      "Concrete Inputs": ["", ""]}),
            cpu("cudaLaunchKernel", ts + 1, 1, cat="cuda_runtime", correlation=corr),
            kernel(GEMM, ts + 10, us, corr=corr)]


def launched(name, ts, dur, corr, stream):
    return [cpu("cudaLaunchKernel", ts - 2, 1, cat="cuda_runtime", correlation=corr),
            kernel(name, ts, dur, stream=stream, corr=corr)]


def steps(body, step_us=STEP_US) -> list:
    events = []
    for s in range(STEPS):
        t0 = s * step_us
        events += [cpu(f"ProfilerStep#{s + 1}", t0, step_us, cat="user_annotation"), *body(t0, 100 * s)]
    return events


# busy: each step launches a GEMM of BEHIND_US on the device, longer than its STEP_US ProfilerStep
BEHIND_US = 1500
# two all-reduces of COMM_US on two streams, overlapping, in the one (unnamed) process group
COMM_US = 800
GPU_RUNS = {
    # language model: the embedding's [2, 8] indices are the 16 rows of the GEMM (high confidence)
    "lm": steps(lambda t, c: [embedding(t + 5, [2, 8]), *mm(t + 20, 16, WIDTH, WIDTH, c + 1)]),
    # diffusion: a [1, 77] prompt; its big latent GEMM makes its MFU the highest (low confidence)
    "diffusion": steps(lambda t, c: [embedding(t + 5, [1, 77]), *mm(t + 20, 77, WIDTH, WIDTH, c + 1),
                                     *mm(t + 300, BIG, WIDTH, BIG, c + 2)]),
    "overlap": steps(lambda t, c: [*launched(ALL_REDUCE, t + 50, COMM_US, c + 1, 7),
                                   *launched(ALL_REDUCE, t + 60, COMM_US, c + 2, 8)]),
    # the device runs behind: step s's GEMM starts when step s-1's ends
    "behind": steps(lambda t, c: launched(GEMM, 10 + (c // 100) * BEHIND_US, BEHIND_US, c + 1, 7)),
}
CPU_RANKS = {"cpu-1": 1, "cpu-3": 3}  # CPU-only runs of one workload: no device events at all
CPU_TOKENS = 512


def cpu_events(rank: int) -> list:
    return steps(lambda t, c: [cpu("aten::mm", t + 10, 300, **{"Input Dims": [[64, 64], [64, 64]]}),
                               cpu("gloo:all_reduce", t + 400, 100 * (rank + 1))])


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    root = tmp_path_factory.mktemp("trust")
    for run_id, events in GPU_RUNS.items():
        write_trace(root / run_id / "rank0.json", events, deviceProperties=[{"name": "NVIDIA H200"}],
                    distributedInfo={"rank": 0, "world_size": 1, "backend": "nccl"})
    for run_id, ranks in CPU_RANKS.items():
        for rank in range(ranks):
            write_trace(root / run_id / f"rank{rank}.json", cpu_events(rank),
                        distributedInfo={"rank": rank, "world_size": ranks, "backend": "gloo"})
        (root / run_id / "run.json").write_text(json.dumps(
            {"run_id": run_id, "workload": "cpu-sweep", "world_size": ranks, "tokens_per_step": CPU_TOKENS,
             "parallel": {"dp": ranks, "tp": 1, "pp": 1, "cp": 1}}))
    path = root / "t.duckdb"
    report = ingest([root / r for r in (*GPU_RUNS, *CPU_RANKS)], db=path, workers=1)
    assert not report.errors, [o.line() for o in report.errors]
    return path


@pytest.fixture(scope="module")
def summary(db):
    return {r["run_id"]: r for r in query(db, "run_summary").iter_rows(named=True)}


@pytest.fixture(scope="module")
def report_data(db):
    from scaletrace.reports.data import load

    with connect(db) as database:
        return load(database)


# --- 1. low-confidence tokens: one rule for the card, the findings and the runs table ---------------

def test_findings_leave_out_a_guessed_mfu(summary, report_data):
    from scaletrace.reports.findings import run_findings

    guess, sure = summary["diffusion"], summary["lm"]
    assert guess["tokens_per_step_confidence"] == "low" and sure["tokens_per_step_confidence"] == "high"
    # the guessed run has the highest MFU of all: ranked, it would head the range
    ranked = sorted((r for r in summary.values() if r["mfu_pct"] is not None), key=lambda r: r["mfu_pct"])
    assert ranked[-1]["run_id"] == "diffusion"
    said = " ".join(run_findings(report_data))
    assert "(diffusion)" not in said and share(guess["mfu_pct"]) not in said
    assert f"left out: run diffusion, whose tokens per step are inferred with {LOW_CONFIDENCE}" in said


def test_runs_table_says_low_confidence_in_words(report_data):
    from scaletrace.reports.html import summary_table

    table = summary_table(report_data.runs)
    rows = {r.split("</td>")[0].removeprefix("<td>"): r for r in table.split("<tr>")[2:]}
    assert rows["diffusion"].count(f"({LOW_CONFIDENCE})") == 2  # tokens/s and MFU
    assert LOW_CONFIDENCE not in rows["lm"]


# --- 2. percentages above 100 %: a warning wherever shown --------------------------------------------

def test_overlapping_collectives_above_100_say_why(db, report_data):
    from scaletrace.reports.findings import comm_findings
    from scaletrace.reports.run_explain import lines, load_tables, run_sentences

    groups = query(db, "run_exposed_comm_by_group")
    row = groups.filter(groups["run_id"] == "overlap").row(0, named=True)
    # the query says it too: a warning where (and only where) a share is above 100 %
    assert all((r["warning"] is not None) == (r["group_exposed_comm_pct"] > 100) for r in groups.iter_rows(named=True))
    assert row["warning"] == (f"above 100 %: {row['group_exposed_comm_pct']:.0f} % of the span, as the group's "
                              "collectives overlap one another, each counted in full")
    # two COMM_US all-reduces a step, nothing to hide them under: 2·COMM_US exposed per step, in a
    # step window no longer than the step's span (at most STEP_US + the second's 10 µs lag)
    assert row["group_exposed_comm_pct"] > 100 * 2 * COMM_US / (STEP_US + 60)
    with connect(db) as database:
        text = " ".join(lines(run_sentences(load_tables(database, ["overlap"]))))
    assert f"{share(row['group_exposed_comm_pct'])} (above 100 %: {OVERLAPPING_COLLECTIVES})" in text
    # the findings name the most exposed collective of the most exposed run (here: overlap), from the
    # group rows of the card's runs: given overlap's own rows
    found = " ".join(comm_findings(replace(report_data, exposed_by_group=groups.filter(groups["run_id"] == "overlap"))))
    assert "is the most exposed collective" in found
    assert f"(above 100 %: {OVERLAPPING_COLLECTIVES})" in found


def test_device_share_above_100_carries_a_warning(db):
    share_rows = {r["run_id"]: r for r in query(db, "run_device_share").iter_rows(named=True)}
    behind = share_rows["behind"]
    # busy = one BEHIND_US GEMM per step, over the run's step time
    assert behind["device_busy_pct_of_step_time"] == pytest.approx(100 * BEHIND_US * 1e3 / behind["step_time_ns"])
    for r in share_rows.values():
        over = max(r["device_busy_pct_of_step_time"] or 0, r["device_span_pct_of_step_time"] or 0) > 100
        assert (r["warning"] is not None) == over, r
    if behind["step_time_ns"] < BEHIND_US * 1e3:  # a host-side step time: the device outlasts it
        assert behind["warning"].startswith("above 100 %: the device's busy time per step is "
                                            f"{behind['device_busy_pct_of_step_time']:.0f} %")


# --- 3. runs without a device are CPU ranks ----------------------------------------------------------

def test_cpu_only_runs_are_cpu_ranks(db, summary, report_data):
    from scaletrace.reports.chartkit import gpus_axis
    from scaletrace.reports.explain import explain
    from scaletrace.reports.findings import findings

    assert [summary[r]["cpu_only"] for r in CPU_RANKS] == [True, True] and summary["lm"]["cpu_only"] is False
    with connect(db) as database:
        card = card_from_db(database)
    lines = card_lines(card)
    for run_id, ranks in CPU_RANKS.items():
        line = next(x for x in lines if f" {run_id} (" in x)
        assert line.split(" best")[0].split(":", 1)[1].strip() == gpus(ranks, True) == f"{ranks} CPU rank" + \
            ("s" if ranks > 1 else "")
        assert "GPU" not in line and "tokens/s/CPU rank" in line and "CPU-rank-h per 1e9 tokens" in line
        assert "eff. vs 1-CPU-rank baseline" in line  # the sweep's baseline: cpu-1
    verdict = next(v.sentence for v in card.verdicts if v.sweep == "cpu-sweep")
    assert "adding CPU ranks" in verdict and "GPU" not in verdict
    # (the projection's sentences, reports/charts_projection.py, are not held to this here)
    said = [f for f in findings(report_data) if ("cpu-" in f) and f not in report_data.projection_notes]
    assert said and not any("GPU" in f for f in said), said
    with connect(db) as database:  # explain's sweep sentences (and its idle hook) too
        sweep = [s for s in explain(database, runs_too=False).sentences if s.startswith("cpu-sweep")]
    assert sweep and not any(re.search(r"\d GPU|GPUs|per GPU", s) for s in sweep), sweep
    assert any("from 1 CPU rank to 3 CPU ranks" in s for s in sweep)
    cpu_scaling = report_data.scaling.filter(report_data.scaling["sweep"] == "cpu-sweep")
    assert gpus_axis(cpu_scaling).to_dict()["title"] == "CPU ranks"
    assert gpus_axis(report_data.scaling.filter(~report_data.scaling["cpu_only"])).to_dict()["title"] == "GPUs (ranks)"


def test_runs_table_flags_a_percentage_above_100():
    """An MFU of 176 % (tokens per step given too high) in the runs table: beside it, the warning."""
    from scaletrace.reports.html import summary_table

    warning = "MFU 176 % is above 100 %: tokens per step (run.json) ... is too high"
    runs = pl.DataFrame({"run_id": ["over", "fine"], "mfu_pct": [176.0, 40.0], "warnings": [warning, None]})
    over, fine = summary_table(runs).split("<tr>")[2:]
    assert "176.00 <span class=\"warn\"" in over and "⚠ above 100 %" in over and warning in over
    assert "above 100" not in fine


def test_shared_traces_warn_and_count_cpu_ranks(shared_db):
    """The reviewer's traces: the CPU-only gloo trace's all_reduce is 169 % of its span (a warning says
    why), and a trace whose deviceProperties name an A100 but which holds no device event is CPU-only."""
    from scaletrace.reports.words import above_100

    rows = query(shared_db, "run_exposed_comm_by_group", run_id="hta-cpu-only-gloo").to_dicts()
    over = [r for r in rows if r["group_exposed_comm_pct"] > 100]
    assert over and all(r["warning"] and above_100(r["group_exposed_comm_pct"], "x") for r in over)
    [named] = query(shared_db, "run_summary", run_id="hta-no-distributed-info").to_dicts()
    assert "A100" in named["device_name"] and named["cpu_only"] is True
    [gloo] = query(shared_db, "run_summary", run_id="hta-cpu-only-gloo").to_dicts()
    assert gloo["cpu_only"] is True and gpus(gloo["world_size"], gloo["cpu_only"]) == "300 CPU ranks"


def test_explain_compares_no_guessed_tokens_across_gpu_counts(tmp_path):
    """A sweep of two diffusion runs (1 and 2 ranks, tokens inferred from a [1, 77] prompt: low
    confidence): explain draws no GPU-count step between them (GPU-time per token on guessed tokens)
    and says why, naming them; scaling_attribution itself still has the step."""
    from scaletrace.reports.explain import explain

    body = GPU_RUNS["diffusion"]
    for ranks in (1, 2):
        run_id = f"guess-{ranks}"
        for rank in range(ranks):
            write_trace(tmp_path / run_id / f"rank{rank}.json", body, deviceProperties=[{"name": "NVIDIA H200"}],
                        distributedInfo={"rank": rank, "world_size": ranks, "backend": "nccl"})
        (tmp_path / run_id / "run.json").write_text(json.dumps(
            {"run_id": run_id, "workload": "guess", "world_size": ranks,
             "parallel": {"dp": ranks, "tp": 1, "pp": 1, "cp": 1}}))
    path = tmp_path / "g.duckdb"
    report = ingest([tmp_path / "guess-1", tmp_path / "guess-2"], db=path, workers=1)
    assert not report.errors, [o.line() for o in report.errors]
    summary = {r["run_id"]: r for r in query(path, "run_summary").iter_rows(named=True)}
    assert {r["tokens_per_step_confidence"] for r in summary.values()} == {"low"}
    steps = query(path, "scaling_attribution").filter(pl.col("vs") == "previous")
    assert steps.height == 1  # the step is there to compare ...
    with connect(path) as database:
        said = explain(database, runs_too=False).sentences
    assert not any(s.startswith("guess: from") for s in said), said  # ... and explain does not
    assert any(f"left out: runs guess-1, guess-2, whose tokens per step are inferred with {LOW_CONFIDENCE}" in s
               for s in said), said


def test_time_vs_cost_axis_counts_cpu_ranks(report_data):
    """The time-vs-cost chart's cost axis: CPU-rank-hours for a card of CPU runs only, both nouns for a mix."""
    from scaletrace.reports.charts_card import build_marginal_returns

    def x_title(points):
        return build_marginal_returns(points).to_dict()["layer"][0]["encoding"]["x"]["title"]

    points = report_data.card_points
    assert x_title(points.filter(pl.col("cpu_only"))) == "CPU-rank-hours per 1e9 tokens (cost)"
    assert x_title(points.filter(~pl.col("cpu_only"))) == "GPU-hours per 1e9 tokens (cost)"
    assert x_title(points) == "GPU- or CPU-rank-hours per 1e9 tokens (cost)"


def test_exposed_comm_chart_tooltip_carries_the_warning(db):
    """The exposed-comm-by-group chart draws the overlap run's share above 100 %: its tooltip shows why."""
    from conftest import spec_values
    from scaletrace.reports.charts_scaling import build_exposed_comm

    groups = query(db, "run_exposed_comm_by_group").filter(pl.col("run_id") == "overlap").with_columns(
        sweep=pl.lit("overlap"), world_size=pl.lit(1))
    spec = build_exposed_comm(groups).to_dict()
    assert {"field": "warning", "type": "nominal"} in spec["layer"][0]["encoding"]["tooltip"]
    assert any(str(v.get("warning", "")).startswith("above 100 %") for v in spec_values(spec))
