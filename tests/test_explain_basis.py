"""What `explain` and the findings rest on: the profiled steps counted as ProfilerSteps (not the step
log's steps), every run_summary warning said beside the step sentence, the step log's export step left
out of step times, and findings about a run too small to judge (reports/basis.py) said with their basis
and never first.  Generated runs; every expected figure derived here."""

from __future__ import annotations

import json
from statistics import median

import pytest
from click.testing import CliRunner

from scaletrace.cli import main
from scaletrace.pipeline import connect, ingest
from scaletrace.pipeline.synth import SynthRun, write_run
from scaletrace.reports import data as report_data
from scaletrace.reports.findings import _pct, findings
from scaletrace.reports.words import duration

MS = 1_000_000
# the step log of LOGGED's one rank: steps 0-9, 4-6 profiled (the window), step 7 holds the trace's
# export (a log from before the device clock), each other step (k + 1) ms
PROFILED = {4, 5, 6}
LOG = [{"step": k, "start_ns": 1_700_000_000_000_000_000 + k * 10 * MS,
        "dur_ns": 500 * MS if k == 7 else (k + 1) * MS, "tokens": 8192, "profiled": k in PROFILED}
       for k in range(10)]
KEPT = [s["dur_ns"] for s in LOG if not s["profiled"] and s["step"] > 0 and s["step"] - 1 not in PROFILED]
LOGGED = SynthRun("logged", ranks=1, steps=3, step_us=1000, compute_us=300, tokens_per_step=8192, num_params=1e9,
                  peak_flops=989e12)
# two runs for the findings: FULL traces all 4 of its ranks; FEW traces 2 ranks of a 64-rank job and
# exposes more communication (a longer all_reduce), so the table's largest figure is FEW's; one step
# each, so a rank's window is its step's device span (no gap between steps in it)
FULL = SynthRun("full", ranks=4, steps=1, step_us=1000, compute_us=300, overlap_us=50, transfer_us=100)
FEW = SynthRun("few", ranks=2, steps=1, step_us=1000, compute_us=300, overlap_us=50, transfer_us=400,
               straggler_rank=1, straggler_delay_us=20)
FEW_WORLD = 64


def exposed_pct_by_hand(spec: SynthRun) -> float:
    """Mean over ranks of exposed comm ÷ span of a one-step run: one compute kernel, then one all_reduce
    (the generator's true times): exposed = its end − max(its start, compute's end)."""
    shares = []
    for rank, start in spec.starts(0).items():
        begin, end = spec.allreduce(0)[rank]
        shares.append((end - max(begin, start + spec.compute_us)) / (end - start))
    return 100 * sum(shares) / len(shares)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    root = tmp_path_factory.mktemp("basis")
    run = write_run(root, LOGGED)
    (run / "rank0.steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in LOG))
    write_run(root, FULL)
    few = write_run(root, FEW)
    manifest = json.loads((few / "run.json").read_text())
    manifest["world_size"] = FEW_WORLD  # 2 of 64 ranks traced: under 1/8 of the job
    (few / "run.json").write_text(json.dumps(manifest))
    path = root / "t.duckdb"
    assert not ingest([root], db=path, workers=1).errors
    return path


def _explained(db, run: str) -> list[str]:
    result = CliRunner().invoke(main, ["explain", run, "--db", str(db)])
    assert result.exit_code == 0, result.output
    return [line.strip() for line in result.output.splitlines() if line.startswith("  ")]


def test_profiled_steps_are_the_profilersteps_and_the_step_time_says_its_steps(db):
    """3 ProfilerSteps traced; the step time is the median of the 5 logged steps kept (1-3, 8, 9: not the
    window, not step 0, not step 7 after the window): median(2, 3, 4, 9, 10 ms) = 4 ms."""
    assert len(KEPT) == 5 and median(KEPT) == 4 * MS
    step = _explained(db, "logged")[0]
    assert f"1 rank traced on {LOGGED.device_name}, {LOGGED.steps} profiled steps;" in step
    assert f"step time {duration(median(KEPT))} (the slowest rank's step in the collector's step log, " \
           f"median over {len(KEPT)} steps)" in step
    with connect(db) as database:
        spread = database.query("step_time_spread", run_id="logged").row(0, named=True)
    assert spread["num_steps"] == len(KEPT) and spread["max_ns"] == max(KEPT)  # the 500 ms export left out


def test_every_run_summary_warning_is_said_after_the_step_sentence(db):
    """MFU = tokens/s × 6 × params ÷ peak = 8192 / 4 ms × 6e9 / 989e12: far above 100 %, a warning
    run_summary gives and explain repeats, whole, right after the step sentence."""
    mfu = 100 * (8192 / (median(KEPT) / 1e9)) * 6 * LOGGED.num_params / LOGGED.peak_flops
    assert mfu > 100
    with connect(db) as database:
        warnings = database.query("run_summary", run_id="logged")["warnings"][0]
    assert f"MFU {mfu:.0f} % is above 100 %" in warnings
    said = _explained(db, "logged")
    assert said[1] == f"Warning: {warnings}."


def test_a_run_too_small_to_judge_never_leads_the_findings(db):
    few, full = exposed_pct_by_hand(FEW), exposed_pct_by_hand(FULL)
    assert few > full  # (400 − 50) ÷ (300 + 400 − 50) against (100 − 50) ÷ (300 + 100 − 50), the straggler aside
    with connect(db) as database:
        data = report_data.load(database)
    said = findings(data)
    comm = [f for f in said if "most exposed communication is in run" in f]
    assert comm[0] == (f"Of the runs large enough to judge, the most exposed communication is in run full "
                       f"(4 GPUs): {_pct(full)} of the step (mean over ranks).")
    # the table's largest figure is still said, with what it rests on; every finding about FEW comes last
    (most,) = [f for f in comm if f.startswith("The most exposed communication is in run few")]
    assert most.startswith(f"The most exposed communication is in run few ({FEW_WORLD} GPUs; too small to "
                           f"judge: {FEW.ranks} of its {FEW_WORLD} ranks traced, ")
    assert f": {_pct(few)} of the step" in most
    about_few = [i for i, f in enumerate(said) if "run few" in f]
    assert about_few and min(about_few) > max(i for i, f in enumerate(said) if "run few" not in f)
    # no straggler named from 2 of 64 ranks, in the findings or in explain
    for f in said:
        assert not ("run few" in f and "arrived last" in f), f
    straggler = [s for s in _explained(db, "few") if "straggler" in s]
    assert straggler and straggler[0].startswith(f"Only {FEW.ranks} of the {FEW_WORLD} ranks are traced, too few "
                                                 "to name the job's straggler")
