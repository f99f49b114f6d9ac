"""scaling_attribution and scaling_attribution_by_group on generated sweeps.

Every expected value is derived here from the generator's parameters (the step
layout of pipeline/synth.py): per rank of a run with S steps of step_us, compute
C, all_reduce overlap O and transfer T (no straggler), a TP all_gather of P, the window is the
steady-state device slots (docs/metrics.md "The step model": every step's but the first), from the
first step's last end to the last step's, S − 1 steps:

    span     = (S − 1)·step_us
    compute  = (S − 1)·C,  exposed comm = (S − 1)·(T − O + P),  idle = span − (S − 1)·(C + T − O + P)
    step time = step_us (ProfilerStep), g = step_us · N ÷ tokens_per_step (GPU-ns/token)
    part_g   = g · part ÷ span                    (every rank alike, so the mean is the rank's)

With a straggler delayed by D ≥ O, the other ranks' all_reduce lasts D + T, of
which D is waiting and D − O of that is exposed (O of it runs under compute).
"""

from __future__ import annotations

import pytest

from conftest import query
from scaletrace.pipeline import ingest
from scaletrace.pipeline.synth import SynthRun, sweep_specs, write_run

US = 1000  # ns per µs
PARTS = ("compute", "exposed_comm", "exposed_memory", "other", "idle")
TOKENS = 8192


def _ingest(tmp_path_factory, specs, name):
    root = tmp_path_factory.mktemp(name)
    for spec in specs:
        write_run(root, spec)
    db = root / "t.duckdb"
    report = ingest([root], db=db, workers=1)
    assert not report.errors, [o.line() for o in report.errors]
    return db


def expected_parts(spec: SynthRun) -> dict[str, float]:
    """GPU-ns per token of each part, and 'wait' (the exposed waiting), from the generator's parameters."""
    s, step, c, o, t, p = spec.steps, spec.step_us, spec.compute_us, spec.overlap_us, spec.transfer_us, spec.tp_comm_us
    g = step * US * spec.ranks / spec.tokens_per_step
    shares = []  # per rank: (compute, exposed comm, wait, span), µs
    for rank in range(spec.ranks):
        late = spec.straggler_rank is not None and rank != spec.straggler_rank
        d = spec.straggler_delay_us if spec.straggler_rank is not None else 0
        # every rank's steps end at the same true times, so each steady-state slot is one step long
        n = s - 1  # the steady-state slots: all but the first
        span = n * step
        exposed = n * ((d if late else 0) + t - o + p)
        wait = n * (d - o) if late else 0
        shares.append((n * c / span, exposed / span, wait / span))
    mean = [sum(x[i] for x in shares) / len(shares) for i in range(3)]
    parts = {"compute": g * mean[0], "exposed_comm": g * mean[1], "exposed_memory": 0.0, "other": 0.0,
             "wait": g * mean[2]}
    parts["idle"] = g - parts["compute"] - parts["exposed_comm"]
    parts["total"] = g
    return parts


# Strong scaling (fixed tokens per step): compute per GPU halves with the GPUs, the step shrinks
# less; the all_reduce is hidden under compute (T = O) up to 4 GPUs and exposed from 8 on.
STRONG = [
    SynthRun("strong-2", ranks=2, steps=3, step_us=1000, compute_us=600, overlap_us=50, transfer_us=50,
             tokens_per_step=TOKENS, workload="strong"),
    SynthRun("strong-4", ranks=4, steps=3, step_us=600, compute_us=300, overlap_us=50, transfer_us=50,
             tokens_per_step=TOKENS, workload="strong"),
    SynthRun("strong-8", ranks=8, steps=3, step_us=450, compute_us=150, overlap_us=50, transfer_us=170,
             tokens_per_step=TOKENS, workload="strong"),
    # a slower layout at 8 GPUs: not the best run, so only its row against the baseline
    SynthRun("strong-8-slow", ranks=8, steps=3, step_us=500, compute_us=150, overlap_us=50, transfer_us=170,
             tokens_per_step=TOKENS, workload="strong"),
]


@pytest.fixture(scope="module")
def strong_db(tmp_path_factory):
    return _ingest(tmp_path_factory, STRONG, "strong")


def _row(df, vs, from_run, to_run):
    rows = df.filter(vs=vs, from_run=from_run, to_run=to_run).to_dicts()
    assert len(rows) == 1, (vs, from_run, to_run, df.select("vs", "from_run", "to_run").rows())
    return rows[0]


def test_pairs_are_consecutive_best_runs_and_baseline_to_every_run(strong_db):
    df = query(strong_db, "scaling_attribution", workload="strong")
    assert sorted(df.filter(vs="previous").select("from_run", "to_run").rows()) == [
        ("strong-2", "strong-4"), ("strong-4", "strong-8")]
    assert sorted(df.filter(vs="baseline")["to_run"].to_list()) == ["strong-4", "strong-8", "strong-8-slow"]
    assert set(df["baseline_run"]) == {"strong-2"}


@pytest.mark.parametrize("vs,a,b", [("previous", 0, 1), ("previous", 1, 2), ("baseline", 0, 2), ("baseline", 0, 3)])
def test_attribution_equals_the_parts_derived_from_the_generator(strong_db, vs, a, b):
    spec_a, spec_b = STRONG[a], STRONG[b]
    row = _row(query(strong_db, "scaling_attribution"), vs, spec_a.run_id, spec_b.run_id)
    ea, eb = expected_parts(spec_a), expected_parts(spec_b)
    assert row["from_gpu_ns_per_token"] == pytest.approx(ea["total"], rel=1e-12)
    assert row["to_gpu_ns_per_token"] == pytest.approx(eb["total"], rel=1e-12)
    for part in PARTS:
        assert row[f"delta_{part}_gpu_ns_per_token"] == pytest.approx(eb[part] - ea[part], rel=1e-9, abs=1e-6), part
    assert row["delta_exposed_comm_wait_gpu_ns_per_token"] == pytest.approx(0, abs=1e-9)  # no straggler


def test_parts_sum_exactly_to_the_change_of_gpu_time_per_token_from_run_summary(strong_db):
    summary = {r["run_id"]: r for r in query(strong_db, "run_summary").to_dicts()}
    df = query(strong_db, "scaling_attribution")
    assert df.height == 5
    for row in df.to_dicts():
        g = {k: summary[row[k]]["step_time_ns"] * summary[row[k]]["world_size"] / summary[row[k]]["tokens_per_step"]
             for k in ("from_run", "to_run")}
        assert row["delta_total_gpu_ns_per_token"] == pytest.approx(g["to_run"] - g["from_run"], rel=1e-12)
        parts = sum(row[f"delta_{p}_gpu_ns_per_token"] for p in PARTS)
        assert parts == pytest.approx(row["delta_total_gpu_ns_per_token"], rel=1e-9)
        lost = sum(row[f"{p}_lost_pts"] for p in PARTS)
        assert lost == pytest.approx(row["efficiency_lost_pts"], rel=1e-9)


def test_exposed_comm_appears_only_where_the_generator_exposes_it(strong_db):
    df = query(strong_db, "scaling_attribution")
    hidden = _row(df, "previous", "strong-2", "strong-4")
    assert hidden["delta_exposed_comm_gpu_ns_per_token"] == 0  # T = O on both: nothing exposed
    exposed = _row(df, "previous", "strong-4", "strong-8")
    spec = STRONG[2]
    g = spec.step_us * US * spec.ranks / TOKENS
    span = (spec.steps - 1) * spec.step_us  # the steady-state slots (module docstring)
    per_step_exposed = spec.transfer_us - spec.overlap_us  # 170 − 50 = 120 µs
    assert exposed["delta_exposed_comm_gpu_ns_per_token"] == pytest.approx(
        g * (spec.steps - 1) * per_step_exposed / span, rel=1e-9)


def test_efficiency_points_match_the_scaling_query(strong_db):
    """E = 100 · g_base ÷ g is scaling_efficiency_vs_sweep_baseline_pct (computed there from tokens/s); the points lost
    between two runs are the drop of that efficiency, and each part's points are k · its delta."""
    eff = {r["run_id"]: r["scaling_efficiency_vs_sweep_baseline_pct"] for r in query(strong_db, "scaling").to_dicts()}
    df = query(strong_db, "scaling_attribution")
    base = expected_parts(STRONG[0])["total"]
    for row in df.to_dicts():
        assert row["from_scaling_efficiency_pct"] == pytest.approx(eff[row["from_run"]], rel=1e-9)
        assert row["to_scaling_efficiency_pct"] == pytest.approx(eff[row["to_run"]], rel=1e-9)
        assert row["efficiency_lost_pts"] == pytest.approx(eff[row["from_run"]] - eff[row["to_run"]], rel=1e-9)
        k = 100 * base / (row["from_gpu_ns_per_token"] * row["to_gpu_ns_per_token"])
        assert row["exposed_comm_lost_pts"] == pytest.approx(k * row["delta_exposed_comm_gpu_ns_per_token"],
                                                             rel=1e-9, abs=1e-12)
    # from the baseline, the points lost are 100 − the efficiency
    row = _row(df, "baseline", "strong-2", "strong-8")
    assert row["efficiency_lost_pts"] == pytest.approx(100 - eff["strong-8"], rel=1e-9)


def test_sweep_specs_exposed_from_knob(tmp_path_factory):
    """sweep_specs(exposed_from=8): runs below 8 ranks hide the all_reduce; 50 µs exposed per step from 8."""
    specs = sweep_specs([2, 4, 8], steps=2, kernels_per_step=3, exposed_from=8, workload="knob", gzip=False)
    assert [s.transfer_us - s.overlap_us for s in specs] == [0, 0, 50]
    db = _ingest(tmp_path_factory, specs, "knob")
    df = query(db, "scaling_attribution", workload="knob").filter(vs="previous")
    by_to = {r["to_run"]: r for r in df.to_dicts()}
    assert by_to["knob-4"]["delta_exposed_comm_gpu_ns_per_token"] == 0
    e8 = expected_parts(specs[2])
    assert by_to["knob-8"]["delta_exposed_comm_gpu_ns_per_token"] == pytest.approx(e8["exposed_comm"], rel=1e-9)
    for r in df.to_dicts():
        assert sum(r[f"delta_{p}_gpu_ns_per_token"] for p in PARTS) == pytest.approx(
            r["delta_total_gpu_ns_per_token"], rel=1e-9)


# Waiting: at 4 GPUs rank 3 arrives 200 µs late at every all_reduce; the others wait for it.
WAIT = [
    SynthRun("wait-2", ranks=2, steps=3, step_us=1000, compute_us=300, overlap_us=50, transfer_us=100,
             tokens_per_step=TOKENS, workload="wait"),
    SynthRun("wait-4", ranks=4, steps=3, step_us=1000, compute_us=300, overlap_us=50, transfer_us=100,
             straggler_rank=3, straggler_delay_us=200, tokens_per_step=TOKENS, workload="wait"),
]


def test_waiting_for_a_straggler_is_a_part_of_exposed_comm(tmp_path_factory):
    db = _ingest(tmp_path_factory, WAIT, "wait")
    row = _row(query(db, "scaling_attribution"), "previous", "wait-2", "wait-4")
    ea, eb = expected_parts(WAIT[0]), expected_parts(WAIT[1])
    assert ea["wait"] == 0 and eb["wait"] > 0
    assert row["delta_exposed_comm_wait_gpu_ns_per_token"] == pytest.approx(eb["wait"], rel=1e-9)
    for part in PARTS:
        assert row[f"delta_{part}_gpu_ns_per_token"] == pytest.approx(eb[part] - ea[part], rel=1e-9, abs=1e-6)
    assert 0 < row["delta_exposed_comm_wait_gpu_ns_per_token"] <= row["delta_exposed_comm_gpu_ns_per_token"]


# Per process group: DP all_reduce (description default_pg) and TP all_gather (description tp).
GROUPS = [
    SynthRun("groups-4", ranks=4, tp=2, steps=3, step_us=1000, compute_us=400, overlap_us=50, transfer_us=80,
             tp_comm_us=30, tokens_per_step=TOKENS, workload="groups"),
    SynthRun("groups-8", ranks=8, tp=2, steps=3, step_us=700, compute_us=200, overlap_us=50, transfer_us=150,
             tp_comm_us=60, tokens_per_step=TOKENS, workload="groups"),
]


def test_exposed_comm_delta_splits_by_process_group(tmp_path_factory):
    db = _ingest(tmp_path_factory, GROUPS, "groups")
    by_group = query(db, "scaling_attribution_by_group", workload="groups").filter(vs="previous")
    total = _row(query(db, "scaling_attribution", workload="groups"), "previous", "groups-4", "groups-8")
    got = {(r["process_group"], r["collective"]): r for r in by_group.to_dicts()}
    assert set(got) == {("default_pg", "all_reduce"), ("tp", "all_gather")}

    def group_g(spec, per_step_us):
        g = spec.step_us * US * spec.ranks / TOKENS
        span = (spec.steps - 1) * spec.step_us  # the steady-state slots (module docstring)
        return g * (spec.steps - 1) * per_step_us / span

    a, b = GROUPS
    dp = group_g(b, b.transfer_us - b.overlap_us) - group_g(a, a.transfer_us - a.overlap_us)
    tp = group_g(b, b.tp_comm_us) - group_g(a, a.tp_comm_us)
    assert got[("default_pg", "all_reduce")]["delta_exposed_comm_gpu_ns_per_token"] == pytest.approx(dp, rel=1e-9)
    assert got[("tp", "all_gather")]["delta_exposed_comm_gpu_ns_per_token"] == pytest.approx(tp, rel=1e-9)
    assert dp + tp == pytest.approx(total["delta_exposed_comm_gpu_ns_per_token"], rel=1e-9)
    assert sum(r["exposed_comm_lost_pts"] for r in got.values()) == pytest.approx(
        total["exposed_comm_lost_pts"], rel=1e-9)


def test_invariants_on_the_demo_sweep(demo_db):
    """Recorded CPU traces (weak scaling): parts sum to the total, waiting within exposed comm,
    groups sum to exposed comm, for every pair."""
    db = demo_db
    df = query(db, "scaling_attribution")
    groups = query(db, "scaling_attribution_by_group")
    assert df.height > 0
    for row in df.to_dicts():
        assert sum(row[f"delta_{p}_gpu_ns_per_token"] for p in PARTS) == pytest.approx(
            row["delta_total_gpu_ns_per_token"], rel=1e-9)
        mine = groups.filter(vs=row["vs"], from_run=row["from_run"], to_run=row["to_run"])
        assert mine["delta_exposed_comm_gpu_ns_per_token"].sum() == pytest.approx(
            row["delta_exposed_comm_gpu_ns_per_token"], rel=1e-9, abs=1e-6)
    from scaletrace.pipeline import connect

    with connect(db) as database:
        runs = database.sql("SELECT * FROM sweep_run_parts(NULL)")
    assert all(0 <= r["wait_g"] <= r["exposed_comm_g"] + 1e-9 for r in runs.to_dicts())
