"""Every sentence explain and the report build stays whole, whatever the numbers (STYLE.md "A sentence
is data"): Hypothesis generates the query frames the sentence builders read (flat and degenerate
sweeps, one run, equal numbers, NULL tokens, huge and tiny values, NaN) and each sentence is checked
against the rules below.  The frames are built directly (no ingest), so the test takes seconds."""

from __future__ import annotations

import math
import re

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from scaletrace.reports import data as report_data, efficiency, explain, findings, run_explain
from scaletrace.reports.data import ReportData

NAN = float("nan")
# values that break sentences: missing, NaN, ±inf, zero, the same number twice, just below a rounding
# step, huge and tiny
AWKWARD = [None, NAN, math.inf, 0.0, 0.0, 1e-9, 0.04, 0.05, 0.3, 1.0, 40.1, 40.1, 40.14, 99.96, 100.0, 1e6, 1e15]
values = st.one_of(st.sampled_from(AWKWARD), st.floats(-50, 1e4, allow_nan=False))
shares = st.one_of(st.sampled_from([None, NAN, 0.0, 0.004, 12.5, 12.5, 38.0, 99.96, 100.0]),
                   st.floats(0, 100, allow_nan=False))
positive = st.one_of(st.sampled_from([None, NAN, 0.0, 1.0, 4000.0, 4000.0, 1e12]), st.floats(0.001, 1e7))
counts = st.sampled_from([1, 2, 4, 8, 16, 300])
names = st.sampled_from(["demo", "demo-gpt", "ws128", "unnamed group", "?"])

# -- the rules ---------------------------------------------------------------------------------
NUMBER = r"[−+-]?\d[\d,.]*(?: ?(?:%|×|[a-zµ]+(?:/[a-zA-Z]+)?))?"
RULES = [
    (r"\b(?:nan|NaN|None|null|inf|n/a)\b", "a missing value printed"),
    (r"\(\s*\)|,\s*[,.;:]|;\s*[;.,:]|:\s*[.;,]|\s[,.;:)]|\(\s", "an empty clause"),
    (r"\s{2,}", "a doubled space"),
    (rf"\bfrom ({NUMBER})(?: \([^)]*\))? to \1(?![\w,.]*\d)", "a range whose ends are equal"),
    (r"\b0\.0 points|stayed at 0\.0 %|[−+-]0(?:\.0+)?\b(?! ?[.,]\d)", "a zero change stated as a number"),
    (r"\d[eE][+-]?\d", "e-notation"),
    (r"(?:rose|fell) to 1\.00×|\b1\.0× the slowest", "a comparative for equal values"),
]


def malformed(text: str) -> str | None:
    """Why ``text`` is not a whole sentence, or None."""
    for pattern, why in RULES:
        if re.search(pattern, text):
            return f"{why}: {text!r}"
    if text.count("(") != text.count(")"):
        return f"unbalanced parentheses: {text!r}"
    if not text.endswith(".") or text.endswith(".."):
        return f"no full stop: {text!r}"
    if not (text[0].isupper() or text[0].isdigit() or re.match(r"[a-z][\w.-]*(?: at \d+ GPUs?)?:", text)):
        return f"does not start a sentence: {text!r}"
    return None


def check(sentences) -> None:
    for text in sentences:
        assert text, "an empty sentence"
        why = malformed(text)
        assert why is None, why


@pytest.mark.parametrize("text", [
    "MFU ranges from 40.1 % (a) to 40.1 % (b).",
    "demo: of the 0.0 points of scaling efficiency (vs the 8-GPU baseline) lost from 8 GPUs to 16 GPUs, .",
    "Exposed communication stayed at nan %.", "It reached 1.2e+03 TFLOP/s.", "A (b.", "no capital.",
    "demo: from 2 GPUs to 4 GPUs tokens/s rose to 1.00× for 2× the GPUs.", "Idle −0 %.",
])
def test_the_rules_catch_the_broken_sentences_of_issue_20(text):
    assert malformed(text)


@pytest.mark.parametrize("text", [
    "demo: from 8 GPUs to 16 GPUs, GPU-time per token went from 1.2 ms to 1.5 ms.",
    "MFU ranges from 40.1 % (a) to 40.14 % (b).", "MFU is 40.1 % in both runs that have one.",
    "demo at 8 GPUs: the fastest layout is dp8 with 4,000 tokens/s, 1.04× the slowest of 2 (dp4-tp2).",
])
def test_the_rules_pass_whole_sentences(text):
    assert malformed(text) is None


# -- explain: the GPU-count steps ----------------------------------------------------------------
PART_NAMES = list(explain.PARTS)


@st.composite
def attribution(draw):
    """One scaling_attribution row (vs previous), its by-group rows and run_diff growth."""
    a, b = sorted(draw(st.lists(counts, min_size=2, max_size=2, unique=True)))
    row = {"sweep": draw(st.sampled_from(["demo", "demo-gpt"])), "from_run": "r-a", "to_run": "r-b",
           "from_gpus": a, "to_gpus": b, "baseline_gpus": draw(st.sampled_from([1, a])),
           "from_gpu_ns_per_token": draw(positive), "to_gpu_ns_per_token": draw(positive),
           "from_scaling_efficiency_pct": draw(shares), "to_scaling_efficiency_pct": draw(shares),
           "exposed_comm_wait_lost_pts": draw(values)}
    parts = {p: draw(values) for p in PART_NAMES}
    row.update({f"{p}_lost_pts": x for p, x in parts.items()})
    stated = [x for x in parts.values() if x is not None and math.isfinite(x)]
    row["efficiency_lost_pts"] = draw(st.sampled_from([sum(stated), None, NAN, 0.0, 0.04]))
    by_group = pl.DataFrame([{"sweep": row["sweep"], "from_run": "r-a", "to_run": "r-b", "process_group": g,
                              "collective": c, "exposed_comm_lost_pts": draw(values)}
                             for g, c in draw(st.lists(st.tuples(names, names), max_size=3))],
                            schema={"sweep": pl.String, "from_run": pl.String, "to_run": pl.String,
                                    "process_group": pl.String, "collective": pl.String,
                                    "exposed_comm_lost_pts": pl.Float64})
    growth = pl.DataFrame([{"sweep": row["sweep"], "run_a": "r-a", "run_b": "r-b", "family": f,
                            "delta_time_per_step_ns": draw(st.sampled_from([1e-3, 0.4, 120e3, 5e9, NAN]))}
                           for f in draw(st.lists(st.sampled_from(["GEMM", "all_reduce · dp"]), max_size=2))],
                          schema={"sweep": pl.String, "run_a": pl.String, "run_b": pl.String, "family": pl.String,
                                  "delta_time_per_step_ns": pl.Float64})
    return row, by_group, growth


@settings(max_examples=100, deadline=None)
@given(attribution())
def test_explain_step_and_cause_sentences_are_whole(case):
    row, by_group, growth = case
    check([explain.step_sentence(row, by_group, growth)])
    cause = explain.cause_sentence(row, by_group)
    if cause is not None:
        check([cause])
    ends = [row[f"{e}_scaling_efficiency_pct"] for e in ("from", "to")]
    if all(x is not None and math.isfinite(x) for x in ends) and f"{ends[0]:.0f}" == f"{ends[1]:.0f}":
        assert " stayed at " in explain.step_sentence(row, by_group, growth)


# -- the report's findings -----------------------------------------------------------------------
RUN_SCHEMA = {"run_id": pl.String, "world_size": pl.Int64, "ranks_traced": pl.Int64, "exposed_comm_pct": pl.Float64,
              "mfu_pct": pl.Float64}


@st.composite
def sweeps(draw):
    """A report's frames: one or two sweeps of runs (GPU counts, layouts, tokens/s), built as the
    `scaling` and `layouts` queries would give them, then report_data._scaling as load() does."""
    runs, scaling, layouts = [], [], []
    for sweep in draw(st.lists(st.sampled_from(["demo", "ws"]), min_size=1, max_size=2, unique=True)):
        sizes = draw(st.lists(counts, min_size=1, max_size=4, unique=True))
        flat = draw(st.booleans())
        tps0 = draw(st.sampled_from([4000.0, 1e-3, 1e12]))
        for n in sorted(sizes):
            for layout in draw(st.lists(st.sampled_from(["dp", "tp2"]), min_size=1, max_size=2, unique=True)):
                run = f"{sweep}-{layout}-{n}"
                tps = tps0 if flat else draw(st.one_of(st.just(tps0), positive))
                runs.append({"run_id": run, "world_size": n, "ranks_traced": draw(st.sampled_from([1, n])),
                             "exposed_comm_pct": draw(shares), "mfu_pct": draw(st.one_of(st.just(40.1), shares))})
                if tps is not None and not math.isnan(tps):
                    scaling.append({"run_id": run, "sweep": sweep, "world_size": n, "tokens_per_s": tps,
                                    "tokens_per_s_per_gpu": tps / n})
                layouts.append({"workload": sweep, "world_size": n, "run_id": run, "label": layout,
                                "tokens_per_s": tps})
    scaling_df = pl.DataFrame(scaling, schema={"run_id": pl.String, "sweep": pl.String, "world_size": pl.Int64,
                                               "tokens_per_s": pl.Float64, "tokens_per_s_per_gpu": pl.Float64})
    base = scaling_df.sort("world_size", "run_id").group_by("sweep", maintain_order=True).first()
    scaling_df = scaling_df.join(base.select("sweep", baseline_run="run_id", b_n="world_size", b_tps="tokens_per_s"),
                                 on="sweep", how="left")
    eff = 100 * (pl.col("tokens_per_s") / pl.col("b_tps")) / (pl.col("world_size") / pl.col("b_n"))
    scaling_df = scaling_df.with_columns(scaling_efficiency_pct=eff, scaling_efficiency_vs_sweep_baseline_pct=eff)
    layouts_df = pl.DataFrame(layouts, schema={"workload": pl.String, "world_size": pl.Int64, "run_id": pl.String,
                                               "label": pl.String, "tokens_per_s": pl.Float64})
    layouts_df = layouts_df.with_columns(layouts_at_size=pl.len().over("workload", "world_size"))
    return pl.DataFrame(runs, schema=RUN_SCHEMA), scaling_df.drop("b_n", "b_tps"), layouts_df


GROUPS = {"run_id": pl.String, "process_group": pl.String, "collective": pl.String,
          "group_exposed_comm_pct": pl.Float64}
WAITS = {"run_id": pl.String, "rank": pl.Int64, "num_collectives": pl.Int64, "comm_ns": pl.Float64,
         "wait_ns": pl.Float64, "straggler_count": pl.Int64}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sweeps(), st.data())
def test_report_findings_are_whole_and_agree_with_the_table(frames, data):
    runs, scaling_q, layouts = frames
    scaling = report_data._scaling(scaling_q, runs["run_id"].to_list(), [])
    first = runs["run_id"][0]
    groups = pl.DataFrame([{"run_id": r, "process_group": data.draw(names), "collective": data.draw(names),
                            "group_exposed_comm_pct": data.draw(shares)} for r in runs["run_id"]], schema=GROUPS)
    waits = pl.DataFrame([{"run_id": first, "rank": k, "num_collectives": data.draw(st.sampled_from([0, 1, 4])),
                           "comm_ns": data.draw(positive), "wait_ns": data.draw(positive),
                           "straggler_count": data.draw(st.sampled_from([0, 0, 2]))} for k in range(2)], schema=WAITS)
    empty = pl.DataFrame()
    report = ReportData(runs=runs, scaling=scaling, layouts=layouts, breakdown=empty, best_breakdown=empty,
                        exposed_by_group=groups, collectives=empty, bandwidth=empty, rank_wait=waits)
    said = findings.scaling_findings(report) + findings.layout_findings(report) + findings.comm_findings(report) \
        + findings.run_findings(report)
    check(said)
    # the most exposed communication is the runs table's largest exposed_comm_pct, as the table writes it
    stated = runs.filter(pl.col("exposed_comm_pct").is_not_null() & pl.col("exposed_comm_pct").is_not_nan()
                         & (pl.col("exposed_comm_pct") > 0))
    most = [s for s in said if s.startswith("The most exposed communication")]
    assert len(most) == (0 if stated.is_empty() else 1)
    if most:
        top = stated["exposed_comm_pct"].max()
        assert f": {findings._pct(top)} of the step" in most[0]
    # equal tokens/s are never "slower"
    for s in said:
        if "stops paying off" in s:
            m = re.search(r"\(([\d,.]+)(?: vs ([\d,.]+))? tokens/s\)", s)
            assert ("slower" in s) == (m.group(2) is not None and m.group(1) != m.group(2)), s


# -- the EXTRA_SENTENCES hooks (reports/efficiency.py) --------------------------------------------
@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(counts, positive, positive, st.sampled_from(["GEMM", "attention"]), shares, values, values),
                min_size=1, max_size=5))
def test_idle_and_compute_sentences_are_whole(rows):
    idle = pl.DataFrame([{"sweep": "demo", "world_size": n, "idle_ns": i, "host_wait_ns": h,
                          "host_wait_pct_of_idle": 100 * h / i if i and h is not None and i == i else None}
                         for n, i, h, *_ in rows],
                        schema={"sweep": pl.String, "world_size": pl.Int64, "idle_ns": pl.Float64,
                                "host_wait_ns": pl.Float64, "host_wait_pct_of_idle": pl.Float64})
    eff = pl.DataFrame([{"sweep": "demo", "world_size": n, "series": s, "pct_of_peak": p, "achieved_tflops": t,
                         "gflop_per_op": g} for n, _, _, fam, p, t, g in rows
                        for s in (efficiency.ALL_OPS, fam)],
                       schema={"sweep": pl.String, "world_size": pl.Int64, "series": pl.String,
                               "pct_of_peak": pl.Float64, "achieved_tflops": pl.Float64, "gflop_per_op": pl.Float64})
    check(efficiency.idle_sentences(idle) + efficiency.compute_sentences(eff))


# -- every run on its own (reports/run_explain.py) ----------------------------------------------
@settings(max_examples=100, deadline=None)
@given(st.data())
def test_run_sentences_are_whole(data):
    d = data.draw
    ranks = d(counts)
    summary = {"ranks_traced": ranks, "world_size": d(st.sampled_from([None, ranks, 2 * ranks])),
               "num_steps": d(st.sampled_from([None, 0, 1, 3])), "step_time_ns": d(positive),
               "step_time_source": d(st.sampled_from(["step_log", "profiler_step"])),
               "device_name": d(st.sampled_from([None, "", "NVIDIA H200"])),
               **{f"{p}_pct": d(shares) for p in run_explain.STEP_PARTS}}
    groups = pl.DataFrame([{"process_group": d(names), "collective": d(names), "comm_per_rank_ns": d(positive),
                            "exposed_per_rank_ns": d(positive), "group_exposed_comm_pct": d(shares)}
                           for _ in range(d(st.integers(0, 4)))],
                          schema={"process_group": pl.String, "collective": pl.String, "comm_per_rank_ns": pl.Float64,
                                  "exposed_per_rank_ns": pl.Float64, "group_exposed_comm_pct": pl.Float64})
    waits = pl.DataFrame([{"run_id": "r", "rank": k, "num_collectives": d(st.sampled_from([0, 1, 4])),
                           "comm_ns": d(positive), "wait_ns": d(positive),
                           "straggler_count": d(st.sampled_from([0, 1, 4]))} for k in range(d(st.integers(0, 3)))],
                         schema=WAITS)
    idle = pl.DataFrame([{"run_id": "r", "rank": k % 2, "step": d(st.sampled_from([None, 1])),
                          "idle_ns": d(positive), "host_wait_ns": d(positive), "dependency_wait_ns": d(positive),
                          "other_idle_ns": d(positive)} for k in range(d(st.integers(0, 3)))],
                        schema={"run_id": pl.String, "rank": pl.Int64, "step": pl.Int64, "idle_ns": pl.Float64,
                                "host_wait_ns": pl.Float64, "dependency_wait_ns": pl.Float64,
                                "other_idle_ns": pl.Float64})
    said = [run_explain.step_sentence(summary), run_explain.comm_sentence(summary, groups),
            run_explain.straggler_sentence(summary, waits),
            run_explain.idle_sentence(idle, d(st.sampled_from([None, True])), summary["idle_pct"])]
    check([s for s in said if s is not None])


# -- the decision card (reports/card.py) ---------------------------------------------------------
CARD_PARTS = ("compute", "exposed_comm", "exposed_memory", "other", "idle")


@st.composite
def card_frames(draw):
    """run_summary, `scaling` and scaling_attribution frames of one or two sweeps (and maybe a run
    without a workload), built from drawn tokens/s as the queries define them: efficiency vs the
    sweep's baseline (fewest GPUs) = tokens/s ÷ (baseline tokens/s × N ÷ baseline N); the points lost
    between the best runs of consecutive GPU counts = the difference of their efficiencies."""
    tps_values = st.one_of(st.sampled_from([4000.0, 4000.0, 1e-3, 1e12, 0.0]), st.floats(0.001, 1e7))
    summary, scaling, attribution = [], [], []
    for sweep in draw(st.lists(st.sampled_from(["demo", "ws", None]), min_size=1, max_size=2, unique=True)):
        sizes = sorted(draw(st.lists(counts, min_size=1, max_size=4, unique=True)))
        flat = draw(st.booleans())
        tps0 = draw(tps_values)
        rows = []
        for n in sizes:
            for layout in draw(st.lists(st.sampled_from(["dp", "tp2"]), min_size=1, max_size=2, unique=True)):
                tps = tps0 * n if flat else draw(st.one_of(st.just(tps0), tps_values))
                run = f"{sweep or 'solo'}-{layout}-{n}"
                rows.append({"run_id": run, "workload": sweep, "world_size": n, "tokens_per_s": tps,
                             "tokens_per_s_per_gpu": tps / n, "mfu_pct": draw(shares),
                             "energy_per_token_j": draw(positive), "dp": n // (2 if layout == "tp2" else 1),
                             "tp": 2 if layout == "tp2" else 1, "pp": 1, "cp": 1,
                             "warnings": draw(st.sampled_from([None, "MFU 310 % is above 100 %"]))})
        summary += rows
        if sweep is None:
            continue
        base = min(rows, key=lambda r: (r["world_size"], r["run_id"]))
        eff = {}
        for r in rows:
            ideal = base["tokens_per_s"] * r["world_size"] / base["world_size"]
            eff[r["run_id"]] = 100 * r["tokens_per_s"] / ideal if ideal else None
            scaling.append({"run_id": r["run_id"], "sweep": sweep, "world_size": r["world_size"],
                            "tokens_per_s_per_gpu": r["tokens_per_s_per_gpu"],
                            "scaling_efficiency_vs_sweep_baseline_pct": eff[r["run_id"]],
                            "baseline_run": base["run_id"]})
        best = [max((r for r in rows if r["world_size"] == n), key=lambda r: (r["tokens_per_s"], -ord(r["run_id"][-3])))
                for n in sizes]
        for a, b in zip(best, best[1:]):
            lost = None if eff[a["run_id"]] is None else eff[a["run_id"]] - eff[b["run_id"]]
            attribution.append({"vs": "previous", "from_run": a["run_id"], "to_run": b["run_id"],
                                "baseline_run": base["run_id"], "baseline_gpus": base["world_size"],
                                "from_scaling_efficiency_pct": eff[a["run_id"]],
                                "to_scaling_efficiency_pct": eff[b["run_id"]], "efficiency_lost_pts": lost,
                                **{f"{p}_lost_pts": draw(st.one_of(st.just(lost), values)) for p in CARD_PARTS}})
    summary_df = pl.DataFrame(summary, schema={
        "run_id": pl.String, "workload": pl.String, "world_size": pl.Int64, "tokens_per_s": pl.Float64,
        "tokens_per_s_per_gpu": pl.Float64, "mfu_pct": pl.Float64, "energy_per_token_j": pl.Float64,
        "dp": pl.Int64, "tp": pl.Int64, "pp": pl.Int64, "cp": pl.Int64, "warnings": pl.String})
    scaling_df = pl.DataFrame(scaling, schema={
        "run_id": pl.String, "sweep": pl.String, "world_size": pl.Int64, "tokens_per_s_per_gpu": pl.Float64,
        "scaling_efficiency_vs_sweep_baseline_pct": pl.Float64, "baseline_run": pl.String})
    attribution_df = pl.DataFrame(attribution, schema={
        "vs": pl.String, "from_run": pl.String, "to_run": pl.String, "baseline_run": pl.String,
        "baseline_gpus": pl.Int64, "from_scaling_efficiency_pct": pl.Float64, "to_scaling_efficiency_pct": pl.Float64,
        "efficiency_lost_pts": pl.Float64, **{f"{p}_lost_pts": pl.Float64 for p in CARD_PARTS}})
    return summary_df, scaling_df, attribution_df


def _expected_stop(summary: pl.DataFrame, sweep: str) -> int | None:
    """The card's rule by hand: the best (highest tokens/s) run at each GPU count; the first count
    whose tokens/s per added GPU is below MARGINAL_FLOOR_PCT % of the baseline's tokens/s per GPU.
    The baseline is the sweep's (as `scaling`): the run with the fewest GPUs, ties broken by the
    first run_id, which need not be the fastest run at that count."""
    from scaletrace.reports.card import MARGINAL_FLOOR_PCT

    rows = [r for r in summary.to_dicts() if r["workload"] == sweep]
    sizes = sorted({r["world_size"] for r in rows})
    best = {n: max(r["tokens_per_s"] for r in rows if r["world_size"] == n) for n in sizes}
    baseline = min(rows, key=lambda r: (r["world_size"], r["run_id"]))
    base_per_gpu = baseline["tokens_per_s"] / baseline["world_size"]
    for prev, n in zip(sizes, sizes[1:]):
        if base_per_gpu and 100 * (best[n] - best[prev]) / (n - prev) / base_per_gpu < MARGINAL_FLOOR_PCT:
            return n
    return None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(card_frames())
def test_card_sentences_are_whole_and_stop_where_the_rule_says(frames):
    from scaletrace.reports.card import NO_SWEEP_WORDS, card_lines, decision_card

    summary, scaling, attribution = frames
    card = decision_card(summary, scaling, attribution)
    said = [v.sentence for v in card.verdicts]
    check(said)
    lines = card_lines(card)
    assert all(line and "nan" not in line and "None" not in line for line in lines), lines
    if summary["workload"].is_null().any():
        assert NO_SWEEP_WORDS in lines
    for v in card.verdicts:
        sizes = summary.filter(pl.col("workload") == v.sweep)["world_size"].unique()
        if len(sizes) > 1 and summary.filter(pl.col("workload") == v.sweep)["tokens_per_s"].min() > 0:
            assert v.stops_at == _expected_stop(summary, v.sweep), (v, summary)
        if v.stops_at is not None:
            assert f"stops paying at {v.stops_at} GPU" in v.sentence
        # the points lost are scaling_attribution's, stated only when some were lost
        if v.lost_pts is not None and v.lost_pts > 0:
            assert f"{v.lost_pts:.1f} points lost" in v.sentence
        assert not re.search(r"(?<![\d.])0\.0 points", v.sentence), v.sentence
