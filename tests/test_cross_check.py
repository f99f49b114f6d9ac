"""One number, one value: what the report says in two places (the decision card, the runs table,
findings, explain, the idle chart) is the same figure, on a sweep built with known answers, on the
demo fixture and on the shared real traces; the traced-window check fires where the step time and
the traced steps disagree, not where a trace holds device work outside its profiled steps."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from conftest import SHARED_TRACES, built_once, cpu, kernel, query, write_trace
from scaletrace.pipeline import connect, ingest
from scaletrace.pipeline.synth import SynthRun, write_run
from scaletrace.reports import build_report, data as report_data, findings
from scaletrace.reports.card import card_from_db

TOKENS = 8192
# the best layout's step at each GPU count, and one slower layout at 4 GPUs (never the best)
STEP_US = {1: 1000, 2: 560, 4: 330, 8: 300}


@pytest.fixture(scope="module")
def known_db(tmp_path_factory):
    """Three profiled steps a run, kernels of compute_us then an all_reduce, idle to the step's end:
    the device window of the steps runs from the first kernel of step 1 to the last of step 3."""
    def build(root):
        for n, us in STEP_US.items():
            write_run(root, SynthRun(f"w-{n}", ranks=n, steps=3, step_us=us, compute_us=240 // n + 40, overlap_us=20,
                                     transfer_us=20 * n, workload="w", tokens_per_step=TOKENS))
        write_run(root, SynthRun("w-4-tp2", ranks=4, steps=3, step_us=420, compute_us=120, overlap_us=20, transfer_us=90,
                                 workload="w", tokens_per_step=TOKENS, tp=2,
                                 parallel={"dp": 2, "tp": 2, "pp": 1, "cp": 1}))
        db = root / "t.duckdb"
        assert not ingest([root], db=db, workers=1).errors
    return built_once(tmp_path_factory, "test_cross_check-known_db", build) / "t.duckdb"


@pytest.fixture(scope="module")
def reported(request, tmp_path_factory):
    """which -> (report_data.load of the `which`_db fixture's database, the report built from it), each
    built once for the module: the tests only read them."""
    cache: dict = {}

    def get(which: str):
        if which not in cache:
            db = request.getfixturevalue(f"{which}_db")
            with connect(db) as database:
                data = report_data.load(database)
            cache[which] = (data, build_report(db, tmp_path_factory.mktemp(f"report-{which}") / "r.html"))
        return cache[which]
    return get


def _rank_idle_pct(idle: pl.DataFrame) -> dict[str, float]:
    """The runs table's idle % from the idle chart's rows: Σ idle ÷ Σ span over the run's rank ×
    step rows (the rows tile the ranks' steady-state device slots; one aggregate over ranks)."""
    per_run = idle.group_by("run_id").agg(pct=100 * pl.col("idle_ns").sum() / pl.col("span_ns").sum())
    return {r["run_id"]: r["pct"] for r in per_run.to_dicts()}


def _stops_at(steps: dict[int, int]) -> int | None:
    """The card's rule worked out from the construction: tokens/s = TOKENS ÷ step; each added GPU
    must add at least half of the 1-GPU run's tokens/s."""
    tps = {n: TOKENS / (us * 1e-6) for n, us in steps.items()}
    sizes = sorted(tps)
    for prev, n in zip(sizes, sizes[1:]):
        if (tps[n] - tps[prev]) / (n - prev) < 0.5 * tps[sizes[0]] / sizes[0]:
            return n
    return None


def test_the_arithmetic_of_the_sweep():
    # 1 GPU: 8.19 M tokens/s.  Each added GPU buys: 1 -> 2: (14.6 M − 8.19 M) ÷ 1 = 78 %;
    # 2 -> 4: (24.8 M − 14.6 M) ÷ 2 = 62 %; 4 -> 8: (27.3 M − 24.8 M) ÷ 4 = 7.6 %: stops at 8 GPUs
    assert _stops_at(STEP_US) == 8


@pytest.mark.parametrize("which", ["known", "demo"])
def test_every_number_named_twice_is_one_value(which, known_db, demo_db, reported):
    db = known_db if which == "known" else demo_db
    data, result = reported(which)
    with connect(db) as database:
        card = card_from_db(database)
        summary = {r["run_id"]: r for r in database.query("run_summary").iter_rows(named=True)}
        scaling = {r["run_id"]: r for r in database.query("scaling").iter_rows(named=True)}
        attribution = database.query("scaling_attribution")
        idle_rows = database.query("idle_breakdown")
    # the card's row is run_summary's and scaling's, to the last digit
    for r in card.rows.iter_rows(named=True):
        s, sc = summary[r["run_id"]], scaling.get(r["run_id"], {})
        assert r["tokens_per_s"] == s["tokens_per_s"] and r["mfu_pct"] == s["mfu_pct"]
        assert r["tokens_per_s_per_gpu"] == s["tokens_per_s_per_gpu"]
        assert r["scaling_efficiency_vs_sweep_baseline_pct"] == sc.get("scaling_efficiency_vs_sweep_baseline_pct")
    # its verdict's points are scaling_attribution's from the previous count
    for v in card.verdicts:
        if v.lost_pts is not None:
            to = card.rows.filter((pl.col("sweep") == v.sweep) & (pl.col("world_size") == v.stops_at)).row(0, named=True)
            a = attribution.filter((pl.col("vs") == "previous") & (pl.col("to_run") == to["run_id"])
                                   & (pl.col("from_run") == to["prev_run"])).row(0, named=True)
            assert v.lost_pts == a["efficiency_lost_pts"]
    # one idle: the idle chart's rows give the runs table's idle % (steps that do not overlap)
    from_chart = _rank_idle_pct(idle_rows)
    for run, s in summary.items():
        assert from_chart[run] == pytest.approx(s["idle_pct"], rel=1e-9, abs=1e-9), run
    # the chart draws the best runs' idle in ms per step: idle_breakdown's mean per rank × step
    for r in data.idle_parts.iter_rows(named=True):
        mine = idle_rows.filter(pl.col("run_id") == r["run_id"])
        assert r["idle_ns"] == pytest.approx(mine["idle_ns"].mean())
    # no "no idle time" beside idle runs: the idle chart is drawn where a fastest run has idle, and
    # every note agrees with the runs table (test_every_note_says_what_the_table_beside_it_shows)
    if any(summary[b]["idle_pct"] > 0 for b in _fastest(data)):
        assert "idle_breakdown" in result.charts
    assert_notes_agree_with_the_table(data, result.omitted)
    # no finding contradicts the table: the most exposed communication is the table's largest figure
    exposed = {run: s["exposed_comm_pct"] for run, s in summary.items() if s["exposed_comm_pct"]}
    most = [f for f in result.findings if f.startswith("The most exposed communication is in run ")]
    if exposed:
        top = max(exposed, key=lambda k: (exposed[k], k))
        (line,) = most
        assert line.startswith(f"The most exposed communication is in run {top} (")
        assert f": {findings._pct(exposed[top])} of the step" in line, line
    # every percentage a finding gives a run's MFU or exposed comm is that run's in the table
    for f in result.findings:
        for run, pct in re.findall(r"run ([\w.-]+)[^:]*: ([\d.]+) % of the step", f):
            assert float(pct) == pytest.approx(summary[run]["exposed_comm_pct"], abs=0.5), f


def test_the_card_stops_where_the_construction_says(known_db):
    with connect(known_db) as database:
        (verdict,) = card_from_db(database).verdicts
    assert verdict.stops_at == _stops_at(STEP_US) == 8 and verdict.prev_gpus == 4


def test_idle_between_steps_is_the_tables_idle(known_db):
    """SynthRun steps: each step's device work ends well before the next step's first kernel; that gap
    is idle of the step (host wait: the next kernel is launched only when its step begins), so the
    idle chart and the table agree, and both are above zero."""
    idle = query(known_db, "idle_breakdown", run_id="w-1")
    assert idle.filter(pl.col("step") > idle["step"].min())["between_steps_ns"].min() > 0
    assert (idle["host_wait_ns"] + idle["dependency_wait_ns"] + idle["other_idle_ns"] == idle["idle_ns"]).all()
    (s,) = query(known_db, "run_summary", run_id="w-1").to_dicts()
    window_ns = s["traced_window_per_step_ns"] * idle["step"].n_unique()
    assert idle["idle_ns"].sum() == pytest.approx(s["idle_pct"] / 100 * window_ns)


# -- the traced-window check ----------------------------------------------------------------------

def _outside_steps(run: Path) -> Path:
    """One 100 µs ProfilerStep launching a 80 µs kernel, then 1 ms of kernels launched after the step
    (warm-up, evaluation: device work outside the profiled steps)."""
    events = [cpu("ProfilerStep#1", 0, 100, cat="user_annotation"),
              cpu("cudaLaunchKernel", 1, 1, cat="cuda_runtime", correlation=1), kernel("gemm", 10, 80, corr=1)]
    for i in range(10):
        events += [cpu("cudaLaunchKernel", 150 + i, 1, cat="cuda_runtime", correlation=10 + i),
                   kernel("eval", 200 + 100 * i, 100, corr=10 + i)]
    write_trace(run / "rank0.json", events, rank=0)
    return run


def test_device_work_outside_the_profiled_steps_is_no_disagreement(tmp_path):
    """The old window (the whole trace's device span ÷ steps) was 1.19 ms, 11.9 × the step: a warning
    for a step that agrees with its own device work (80 µs of a 100 µs step).  The step's window is
    the step's; the shares are of it (compute 100 %, no idle)."""
    db = tmp_path / "o.duckdb"
    assert not ingest([_outside_steps(tmp_path / "outside")], db=db, workers=1).errors
    (r,) = query(db, "run_summary").to_dicts()
    assert r["traced_window_per_step_ns"] == 80_000 and r["step_time_ns"] == 100_000
    assert r["warnings"] is None
    assert r["compute_pct"] == pytest.approx(100) and r["idle_pct"] == 0
    (whole,) = query(db, "rank_breakdown").to_dicts()
    assert whole["span_ns"] == 1_190_000  # what the old check divided by the one step


@pytest.mark.skipif(not SHARED_TRACES.is_dir(), reason="the shared real traces are absent")
def test_the_traced_window_check_on_the_shared_traces(shared_db):
    """hta-cpu-only-gloo: one 210 ms step whose device (CPU-op) work spans 179 ms, in a 1.26 s trace:
    no disagreement (the old check said 6 ×).  tracelens-mi300x: three ~16 ms ProfilerSteps whose
    kernels keep the device busy 84 ms (28 ms a step, from the trace itself): the host's step is
    shorter than the device's, a real disagreement, warned about."""
    db = shared_db  # every shared run, each ingested as its own run (no run.json): built once for the suite
    rows = {r["run_id"]: r for r in query(db, "run_summary").iter_rows(named=True)}
    gloo, mi300x = rows["hta-cpu-only-gloo"], rows["tracelens-mi300x"]
    assert "traced window" not in (gloo["warnings"] or "")
    assert gloo["traced_window_per_step_ns"] < gloo["step_time_ns"]
    with connect(db) as database:
        busy = database.sql("SELECT sum(union_ns) AS busy_ns, count(DISTINCT step) AS steps FROM interval_unions "
                            "WHERE run_id = 'tracelens-mi300x' AND set_name = 'all' AND step IS NOT NULL").row(0)
        host = database.sql("SELECT median(d) FROM (SELECT step, max(dur_ns) AS d FROM steps "
                            "WHERE run_id = 'tracelens-mi300x' GROUP BY step)").row(0)[0]
    busy_per_step = busy[0] / busy[1]
    assert busy_per_step > 1.5 * host  # the device did more than a host step's work a step
    # the device runs behind: the step time is its steady-state period, longer than the host's step
    assert mi300x["step_time_source"] == "device_period" and mi300x["step_time_ns"] > 1.1 * host
    assert mi300x["step_time_ns"] == mi300x["device_step_period_ns"]
    assert "the device runs behind the host" in mi300x["warnings"]


# -- a failed projection fit: a table row, never a line ------------------------------------------------

# one workload, two layout families (tokens per step fixed: strong scaling); per rank and step a
# compute window, an all_reduce of 1 µs entirely under its end (nothing exposed), then IDLE_US idle
IDLE_US = 200
GOOD = {1: 900, 2: 500, 4: 300}  # tp1: compute = 100 + 800 / N µs, the model's own form
BAD = {2: 300, 4: 3000, 8: 300}  # tp2: the 4-GPU run ten times slower than its neighbours


@pytest.fixture(scope="module")
def misfit_db(tmp_path_factory):
    root = tmp_path_factory.mktemp("misfit")
    for n, us in GOOD.items():
        write_run(root, SynthRun(f"good-{n}", ranks=n, steps=3, step_us=us + IDLE_US, compute_us=us, overlap_us=1,
                                 transfer_us=1, workload="m", tokens_per_step=TOKENS))
    for n, us in BAD.items():
        write_run(root, SynthRun(f"bad-{n}", ranks=n, steps=3, step_us=us + IDLE_US, compute_us=us, overlap_us=1,
                                 transfer_us=1, workload="m", tokens_per_step=TOKENS, tp=2,
                                 parallel={"dp": n // 2, "tp": 2, "pp": 1, "cp": 1}))
    db = root / "m.duckdb"
    assert not ingest([root], db=db, workers=1).errors
    return db


def _bad_loo_pct() -> dict[int, float]:
    """The tp2 family's leave-one-out errors from the construction: compute a + b/N (a, b ≥ 0, least
    squares) through the other two runs, the rest of the step (IDLE_US) carried; the 1 µs all_reduce is
    left out (the model's ring transfer of it moves an error by under a point).
    without 4: 300 at 2 and 8 -> flat 300: (300 + 200 − 3200) ÷ 3200 = −84.4 %;
    without 2: 3000 at 4, 300 at 8 want b < 0 -> the best non-negative fit is b alone,
      b = (3000/4 + 300/8) ÷ (1/4² + 1/8²) = 10,080 (residual 1.15e6 < a alone's 3.6e6): 5,040 at 2:
      (5,040 + 200 − 500) ÷ 500 = +948 %;
    without 8: 300 at 2, 3000 at 4 want b < 0 -> a alone, 1,650 (residual 3.6e6 < b alone's 6.5e6):
      (1,650 + 200 − 500) ÷ 500 = +270 %."""
    b = (3000 / 4 + 300 / 8) / (1 / 16 + 1 / 64)
    predicted = {4: 300, 2: b / 2, 8: (300 + 3000) / 2}
    return {n: 100 * (predicted[n] - BAD[n]) / (BAD[n] + IDLE_US) for n in BAD}


def test_a_failed_fit_is_a_table_row_and_no_line(reported):
    from scaletrace.queries.analysis.projection import UNRELIABLE_PCT
    from scaletrace.reports.charts_projection import build_projection

    loo = _bad_loo_pct()
    assert loo[4] == pytest.approx(-84.4, abs=0.05) and loo[2] == pytest.approx(948, abs=0.5)
    worst = max(abs(v) for v in loo.values())
    data, result = reported("misfit")
    rows = {r["sweep"]: r for r in data.projection_fits.iter_rows(named=True)}
    bad, good = rows["m (tp2-pp1-cp1)"], rows["m (tp1-pp1-cp1)"]
    # the failed fit: its row, with the error and the reason, in the construction's numbers
    assert bad["gpu_counts"] == "2, 4, 8" and bad["points"] == 3 and not bad["drawn"]
    assert bad["loo_error_pct"] == pytest.approx(worst, abs=1) and worst > UNRELIABLE_PCT
    assert bad["reason"] == (f"leave-one-out error {bad['loo_error_pct']:.1f} % > {UNRELIABLE_PCT} %: the model "
                             "does not explain these runs")
    for n, pct in loo.items():
        (said,) = re.findall(rf"(?:^|; ){n} GPUs: ([+−]?[\d.]+) %", bad["loo_by_gpus"])
        assert float(said.replace("−", "-")) == pytest.approx(pct, abs=1), (n, bad["loo_by_gpus"])
    # the model's own form fits: drawn
    assert good["drawn"] and good["reason"] is None and good["loo_error_pct"] < 1
    # the chart: the failed fit's runs are points, no line, band, ideal or edge carries it
    spec = build_projection(data.projection).to_dict()
    def values(layer) -> list[dict]:
        d = layer.get("data") or {}
        return d.get("values") or spec.get("datasets", {}).get(d.get("name"), [])

    marks = [((layer["mark"] if isinstance(layer["mark"], str) else layer["mark"]["type"]),
              {v.get("sweep") for v in values(layer)}) for layer in spec["layer"]]
    for mark, sweeps in marks:
        assert ("m (tp2-pp1-cp1)" in sweeps) == (mark == "point"), (mark, sweeps)  # its measured runs only
    assert any(mark == "line" and "m (tp1-pp1-cp1)" in sweeps for mark, sweeps in marks)
    # the sentence says it is not projected and claims no knee for it
    (line,) = [s for s in data.projection_notes if s.startswith("m (tp2-pp1-cp1):")]
    assert bad["reason"] in line and "knee at" not in line
    # the page: the row, in the table under the chart
    page = result.path.read_text()
    table = page[page.index('<table class="projection">'):]
    table = table[:table.index("</table>")]
    assert (f"<td>m (tp2-pp1-cp1)</td><td>2, 4, 8</td><td>{bad['loo_error_pct']:.1f} %</td>" in table)
    assert f"not drawn: leave-one-out error {bad['loo_error_pct']:.1f} % &gt; {UNRELIABLE_PCT} %" in table


# -- every "not shown" note agrees with the runs table --------------------------------------------------

# A note's claim -> (whose rows in the runs table it speaks of: the fastest run of each sweep at each
# GPU count, or every run; what each of those rows must then show).
def _zero(x) -> bool:
    return x is None or x == 0


CLAIMS = {
    "No idle time": ("best", lambda r: r["idle_pct"] == 0),
    "No communication kernels": ("best", lambda r: _zero(r["exposed_comm_pct"])),
    "No FLOP-counted ops": ("best", lambda r: True),
    "No ProfilerStep windows": ("best", lambda r: True),
    "No collectives inside profiled steps": ("best", lambda r: _zero(r["exposed_comm_pct"])),
    "No critical path": ("best", lambda r: True),
    "No MFU": ("all", lambda r: r["mfu_pct"] is None),
    "No power samples": ("all", lambda r: r["energy_per_token_j"] is None),
    "No step time": ("all", lambda r: r["step_time_ns"] is None),
    "No device activity": ("all", lambda r: r["compute_pct"] is None),
}


def _fastest(data) -> list[str]:
    """The fastest run of each sweep at each GPU count (the scaling rows the charts mark is_best)."""
    return data.scaling.filter("is_best")["run_id"].to_list() if "is_best" in data.scaling.columns else []


def assert_notes_agree_with_the_table(data, notes: list[str]) -> None:
    """Each note's claim holds for the runs table's rows it speaks of; a claim about the fastest runs
    needs such runs (none: it would say what runs that do not exist lack); every run the note names is
    one of them and holds it too."""
    table = {r["run_id"]: r for r in data.runs.iter_rows(named=True)}
    best = _fastest(data)
    for note in notes:
        for claim, (scope, holds) in CLAIMS.items():
            if claim not in note:
                continue
            rows = [table[b] for b in best] if scope == "best" else list(table.values())
            assert rows, f"{note!r}: no fastest run it could speak of"
            assert all(holds(r) for r in rows), (note, [(r["run_id"], r["idle_pct"]) for r in rows])
            named = [run for run in table if re.search(rf"(?<![\w.-]){re.escape(run)}(?![\w.-])", note)]
            assert all(holds(table[run]) and (scope == "all" or run in best) for run in named), (note, named)
        if "No idle time" in note:  # of the device window; the step-time chart's idle outside it is said
            for r in data.breakdown.filter(pl.col("run_id").is_in(best)).iter_rows(named=True):
                if r["step_time_ns"] and r["idle_of_step_ns"] >= 0.01 * r["step_time_ns"]:
                    assert f"{r['run_id']}'s" in note and "step-time chart" in note, (note, r["run_id"])


@pytest.fixture(scope="module")
def unswept_db(tmp_path_factory):
    """Two runs without a workload (no sweep, so no fastest runs): a 1,000 µs step holding 300 µs of
    compute and a 100 µs all_reduce, 50 µs of it after the compute: idle 650 ÷ 1,000 = 65 % a step
    (the window, the steady-state slots of steps 2 and 3: from step 1's last kernel's end to step
    3's, 2,000 µs, 1,300 idle: 65 %), exposed communication 50 µs a step."""
    root = tmp_path_factory.mktemp("unswept")
    for n in (2, 4):
        write_run(root, SynthRun(f"u-{n}", ranks=n, steps=3, step_us=1000, compute_us=300, overlap_us=50,
                                 transfer_us=100, workload=None))
    db = root / "u.duckdb"
    assert not ingest([root], db=db, workers=1).errors
    return db


@pytest.fixture(scope="module")
def idle_free_db(tmp_path_factory):
    """A sweep whose fastest run has no idle (a 350 µs step: 300 µs of compute, then the all_reduce's 50
    µs past it; the next step's compute starts as it ends) beside a slower run of the same count that is
    idle most of its 1,000 µs step."""
    root = tmp_path_factory.mktemp("idle-free")
    for run, step in (("busy-2", 350), ("slow-2", 1000)):
        write_run(root, SynthRun(run, ranks=2, steps=3, step_us=step, compute_us=300, overlap_us=50,
                                 transfer_us=100, workload="z", tokens_per_step=TOKENS))
    db = root / "z.duckdb"
    assert not ingest([root], db=db, workers=1).errors
    return db


@pytest.fixture(scope="module")
def long_step_db(tmp_path_factory):
    """One profiled step of 1,000 µs whose device work (300 µs of compute, the all_reduce 50 µs past it)
    spans 350 µs: no idle in its device window (the runs table's 0 %); the step-time chart draws that
    350 µs window (the device period, idle 0) labelled with the host's 1 ms step beside it."""
    root = tmp_path_factory.mktemp("long-step")
    write_run(root, SynthRun("long-2", ranks=2, steps=1, step_us=1000, compute_us=300, overlap_us=50,
                             transfer_us=100, workload="y", tokens_per_step=TOKENS))
    db = root / "y.duckdb"
    assert not ingest([root], db=db, workers=1).errors
    return db


@pytest.mark.parametrize("which", ["known", "demo", "unswept", "idle_free", "long_step", "misfit"])
def test_every_note_says_what_the_table_beside_it_shows(which, reported):
    data, result = reported(which)
    assert_notes_agree_with_the_table(data, result.omitted + data.notes)
    idle = {r["run_id"]: r["idle_pct"] for r in data.runs.iter_rows(named=True)}
    if which == "unswept":  # idle well over 20 % of the step, and no fastest run to speak of
        # the window: 2,000 µs; idle 2 gaps of 650 µs between the steps' device work
        assert all(pct == pytest.approx(100 * 1300 / 2000) for pct in idle.values())
        assert not _fastest(data)
        assert not any("No idle time" in n for n in result.omitted)
    if which == "idle_free":
        assert _fastest(data) == ["busy-2"] and idle["busy-2"] == 0 and idle["slow-2"] >= 20
        (note,) = [n for n in result.omitted if n.startswith("Why the GPUs sit idle: ")]
        assert "No idle time" in note and "busy-2" in note and "slow-2" not in note
    if which == "long_step":
        (row,) = data.breakdown.to_dicts()
        assert idle["long-2"] == 0 and row["idle_of_step_ns"] == 0 and row["step_basis_ns"] == pytest.approx(350e3)
        (note,) = [n for n in result.omitted if n.startswith("Why the GPUs sit idle: ")]
        assert "No idle time" in note and "is 0 for long-2" in note
        from scaletrace.reports.charts_step import _spread
        assert _spread(data.breakdown)["si_label"].to_list() == ["350 µs device · host step 1 ms"]
        # and its own sentence ("Run by run") says never idle of the window, not of the step
        (said,) = data.run_sentences.filter(pl.col("about") == "idle")["sentence"].to_list()
        assert said == "The GPUs were never idle in the device window of the profiled steps."
