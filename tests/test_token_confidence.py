"""Facts a run's headline rests on carry how far they can be trusted.

* Tokens per step inferred from the token embedding carry a confidence: high where the model's
  GEMMs process the embedding's rows (an LM head over the same vocabulary, or most counted GEMM
  FLOPs on rows of one call's indices), low otherwise (a diffusion model's text prompt: its
  [1, 77] CLIP indices are not what the step's transformer processes).  The decision card never
  leads with a throughput on low-confidence tokens.
* MFU from FLOPs counted in the recorded shapes is a lower bound where those ops launched under
  half the GEMM / attention / convolution kernel time (a torch.compile region's kernels have no
  recorded op): run_summary.flops_coverage_pct, mfu_is_lower_bound, a warning, '≥' on the card.

Every run here is generated; the expected figures are worked out below.
"""

from __future__ import annotations

import json

import polars as pl
import pytest

from conftest import cpu, kernel, query, write_trace
from scaletrace.pipeline import connect, ingest
from scaletrace.reports.card import card_from_db, card_lines
from scaletrace.reports.words import share

STEP_US, STEPS = 1000, 2
VOCAB, WIDTH = 1000, 64
BF16 = ["c10::BFloat16", "c10::BFloat16"]
GEMM_KERNEL = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"


def embedding(ts, indices):
    return cpu("aten::embedding", ts, 2, **{"Input Dims": [[VOCAB, WIDTH], indices, [], [], []],
                                            "Input type": ["float", "long", "Scalar", "Scalar", "Scalar"]})


def mm(ts, m, k, n, corr, us=50):
    """aten::mm [m, k] @ [k, n] in bf16, launched, its GEMM kernel ``us`` long."""
    return [cpu("aten::mm", ts, 5, **{"Input Dims": [[m, k], [k, n]], "Input type": BF16,
                                      "Concrete Inputs": ["", ""]}),
            cpu("cudaLaunchKernel", ts + 1, 1, cat="cuda_runtime", correlation=corr),
            kernel(GEMM_KERNEL, ts + 10, us, corr=corr)]


def bare_gemm(ts, corr, us):
    """A GEMM kernel launched outside any op (a compiled region's): no FLOPs can be counted."""
    return [cpu("cudaLaunchKernel", ts, 1, cat="cuda_runtime", correlation=corr),
            kernel(GEMM_KERNEL, ts + 10, us, corr=corr)]


def steps(body) -> list:
    """STEPS ProfilerSteps of STEP_US µs, each holding body(t0, corr0)."""
    events = []
    for s in range(STEPS):
        t0 = s * STEP_US
        events += [cpu(f"ProfilerStep#{s + 1}", t0, STEP_US, cat="user_annotation"), *body(t0, 100 * s)]
    return events


BIG = 4096  # a latent transformer's rows and width: its GEMM dwarfs the 77-row text encoder's
RUNS = {
    # a language model: the embedding's [2, 8] indices are the 16 rows of every GEMM
    "lm-rows": steps(lambda t, c: [embedding(t + 5, [2, 8]), *mm(t + 20, 16, WIDTH, WIDTH, c + 1)]),
    # most GEMM FLOPs on other rows, but an LM head multiplies by the [WIDTH, VOCAB] transposed table
    "lm-head": steps(lambda t, c: [embedding(t + 5, [32]), *mm(t + 20, BIG, WIDTH, BIG, c + 1),
                                   *mm(t + 300, 32, WIDTH, VOCAB, c + 2)]),
    # a diffusion model: a [1, 77] prompt, a small text-encoder GEMM on 77 rows, the big one on latents
    "diffusion": steps(lambda t, c: [embedding(t + 5, [1, 77]), *mm(t + 20, 77, WIDTH, WIDTH, c + 1),
                                     *mm(t + 300, BIG, WIDTH, BIG, c + 2)]),
    # tokens given; one counted GEMM (100 µs) beside three compiled ones (100 µs each) a step
    "compiled": steps(lambda t, c: [*mm(t + 20, BIG, WIDTH, BIG, c + 1, us=100),
                                    *(x for i in range(3) for x in bare_gemm(t + 200 + 150 * i, c + 2 + i, 100))]),
}
COMPILED_TOKENS = 4096


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    root = tmp_path_factory.mktemp("confidence")
    for run_id, events in RUNS.items():
        write_trace(root / run_id / "rank0.json", events, deviceProperties=[{"name": "NVIDIA H200"}],
                    distributedInfo={"rank": 0, "world_size": 1, "backend": "nccl"})
    (root / "compiled" / "run.json").write_text(json.dumps({"run_id": "compiled", "tokens_per_step": COMPILED_TOKENS}))
    path = root / "t.duckdb"
    report = ingest([root / run_id for run_id in RUNS], db=path, workers=1)
    assert not report.errors, [o.line() for o in report.errors]
    return path


@pytest.fixture(scope="module")
def summary(db):
    return {r["run_id"]: r for r in query(db, "run_summary").iter_rows(named=True)}


def test_tokens_processed_by_the_gemms_are_high_confidence(summary):
    rows = summary["lm-rows"]
    assert rows["tokens_per_step"] == 2 * 8
    assert rows["tokens_per_step_confidence"] == "high"
    assert "100 % of the counted GEMM FLOPs run on 16 rows" in rows["tokens_per_step_confidence_basis"]
    head = summary["lm-head"]
    # token rows carry 2·32·64·1000 of 2·32·64·1000 + 2·4096·64·4096 FLOPs: under half, yet the LM head says
    token_share = 32 * VOCAB / (32 * VOCAB + BIG * BIG)
    assert token_share < 0.5
    assert head["tokens_per_step"] == 32 and head["tokens_per_step_confidence"] == "high"
    assert f"the {VOCAB} × {WIDTH} table" in head["tokens_per_step_confidence_basis"]


def test_a_prompt_embedding_is_low_confidence_with_a_warning(summary):
    run = summary["diffusion"]
    assert run["tokens_per_step"] == 77
    # the 77-row GEMM carries 77·64·64 of 77·64·64 + 4096·64·4096 FLOPs: 0 % when rounded; no LM head
    share = 100 * 77 * WIDTH / (77 * WIDTH + BIG * BIG)
    assert run["tokens_per_step_confidence"] == "low"
    assert f"{share:.0f} % of the counted GEMM FLOPs run on 77 rows" in run["tokens_per_step_confidence_basis"]
    assert f"tokens per step (77) inferred with low confidence ({run['tokens_per_step_confidence_basis']})" \
        in run["warnings"]
    assert summary["compiled"]["tokens_per_step_confidence"] == "stated"


def test_mfu_from_a_quarter_of_the_gemm_time_is_a_lower_bound(summary):
    run = summary["compiled"]
    # counted: the aten::mm's 100 µs kernel of 400 µs of GEMM kernels a step
    assert run["flops_coverage_pct"] == pytest.approx(100 * 100 / 400)
    # FLOPs per token from the recorded shapes: MFU = counted FLOPs a step ÷ step time ÷ the bf16 peak
    flops = 2.0 * BIG * WIDTH * BIG
    assert run["mfu_pct"] == pytest.approx(100 * flops / (STEP_US / 1e6) / 989e12)
    assert run["mfu_is_lower_bound"] is True
    assert f"MFU {run['mfu_pct']:.1f} % is a lower bound" in run["warnings"] and "25 %" in run["warnings"]
    eager = summary["lm-rows"]  # its only GEMM is counted
    assert eager["flops_coverage_pct"] == pytest.approx(100) and eager["mfu_is_lower_bound"] is False


def test_the_card_leads_with_no_guessed_throughput(db, summary):
    with connect(db) as database:
        card = card_from_db(database)
    assert "diffusion" not in card.rows["run_id"].to_list()
    assert card.unsure == ["diffusion"]
    lines = card_lines(card)
    assert any(line.startswith("Not on the card: diffusion") for line in lines)
    compiled = next(line for line in lines if "compiled" in line and "tokens/s" in line)
    assert f"MFU ≥ {share(summary['compiled']['mfu_pct'])}" in compiled


def test_findings_say_a_lower_bound_mfu_is_one():
    from scaletrace.reports import findings
    from scaletrace.reports.data import ReportData

    runs = pl.DataFrame({"run_id": ["a", "b"], "mfu_pct": [1.7, 40.0], "mfu_is_lower_bound": [True, False]})
    empty = pl.DataFrame()
    data = ReportData(runs=runs, scaling=empty, layouts=empty, breakdown=empty, best_breakdown=empty,
                      exposed_by_group=empty, collectives=empty, bandwidth=empty, rank_wait=empty)
    [said] = findings.run_findings(data)
    assert said.startswith("MFU ranges from ≥ 1.7 % (a) to 40.0 % (b) (≥: a lower bound")
