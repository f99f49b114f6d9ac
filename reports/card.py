"""The decision card: per sweep and GPU count the best layout and what it costs, then where adding
GPUs stops paying.  One function (``decision_card``) builds it for the report's HTML, the CLI
headline (``scaletrace report``) and ``scaletrace card``.

>>> from scaletrace.pipeline import connect
>>> with connect("runs.duckdb") as db:
...     card = card_from_db(db)
>>> print("\\n".join(card_lines(card)))

Figures of a row (the fastest run of its sweep at its GPU count; ties: the first run id):

* tokens/s, tokens/s per GPU, MFU: run_summary's; an MFU that run_summary marks a lower bound
  (mfu_is_lower_bound: FLOPs counted from recorded shapes that see under half the matmul time) is
  written '≥ 1.7 %';
* efficiency vs the sweep's baseline (the run with the fewest GPUs): the `scaling` query's
  scaling_efficiency_vs_sweep_baseline_pct, and the baseline run is named;
* hours per billion tokens = 1e9 ÷ tokens/s ÷ 3600 (the job's wall-clock time for 1e9 tokens);
  GPU-hours per billion tokens = that × GPUs (what the tokens cost; constant under perfect scaling);
* tokens per joule = 1 ÷ run_summary's energy_per_token_j (only where NVML power was sampled).

A run whose tokens per step were inferred with low confidence (run_summary's
tokens_per_step_confidence: the token embedding's input may not be the tokens the step processes, such
as a diffusion model's text prompt) has no row: its tokens/s would lead the card on a guess.  A line
names such runs (``UNSURE_WORDS``).

**Where adding GPUs stops paying** (``STOP_RULE``): going from the best run at one GPU count to the
best at the next larger count of the sweep, the marginal tokens/s per added GPU is
(tokens/s(N) − tokens/s(prev)) ÷ (N − prev).  Adding GPUs stops paying at the first N whose marginal
tokens/s per added GPU is below ``MARGINAL_FLOOR_PCT`` % of the baseline's tokens/s per GPU: each
added GPU then delivers less than half of what a GPU of the baseline run did, i.e. the tokens the
added GPUs produce cost more than twice the baseline's GPU-hours each.  The sentence names that
count, the efficiency points (vs the sweep's baseline) lost from the previous count to it, and the
part of the step (scaling_attribution's split of those points) that lost the most of them.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

import polars as pl

from scaletrace.reports.chartkit import baseline, si as chart_si
from scaletrace.reports.confidence import split
from scaletrace.reports.order import sort_runs
from scaletrace.reports.words import STEP_PARTS, gpus as _count, present, share, unit, units_title

MARGINAL_FLOOR_PCT = 50.0
STOP_RULE = (f"Adding GPUs stops paying at the first GPU count where each added GPU (best run there vs the best "
             f"run at the previous GPU count of the sweep) adds less than {MARGINAL_FLOOR_PCT:g} % of the "
             "tokens/s a GPU of the sweep's baseline (its run with the fewest GPUs) delivers.")
NO_SWEEP = "(no workload)"
NO_SWEEP_WORDS = ("Runs without a workload (run.json `workload`) are rows of their own, compared with no other run: "
                  "their tokens need not be the same work.")
UNSURE_WORDS = ("Not on the card: {runs}: tokens/s rest on tokens per step inferred with low confidence "
                "(run_summary.tokens_per_step_confidence_basis says why); give tokens_per_step in run.json or --meta.")
SECONDS_PER_HOUR = 3600.0
BILLION = 1e9

CARD_COLUMNS = ["sweep", "world_size", "run_id", "layout", "runs_at_size", "tokens_per_s", "tokens_per_s_per_gpu",
                "scaling_efficiency_vs_sweep_baseline_pct", "baseline_run", "base_gpus", "mfu_pct", "mfu_is_lower_bound",
                "warnings", "cpu_only",
                "hours_per_billion_tokens", "gpu_hours_per_billion_tokens", "tokens_per_joule",
                "marginal_tokens_per_s_per_gpu", "marginal_pct_of_baseline_gpu"]


@dataclass
class Verdict:
    """Where adding GPUs stops paying in one sweep (``stops_at`` None: it has not, or cannot be told)."""

    sweep: str
    sentence: str
    stops_at: int | None = None
    prev_gpus: int | None = None
    marginal_pct: float | None = None
    lost_pts: float | None = None
    part: str | None = None  # key of words.STEP_PARTS
    part_pts: float | None = None


@dataclass
class DecisionCard:
    rows: pl.DataFrame  # CARD_COLUMNS, in run order (reports/order.py)
    verdicts: list[Verdict] = field(default_factory=list)
    points: pl.DataFrame = field(default_factory=pl.DataFrame)  # every run: the marginal-returns chart's data
    unsure: list[str] = field(default_factory=list)  # runs left out: tokens per step of low confidence

    def unsure_line(self) -> str | None:
        """UNSURE_WORDS for the runs left out, None when none."""
        return UNSURE_WORDS.format(runs=", ".join(self.unsure)) if self.unsure else None


def si(x, unit: str = "") -> str:
    """chartkit.si (the charts' SI rule: '4.1 M tokens/s', '44 k tokens/J', '612'), '–' where missing."""
    return (chart_si(x, unit) or "–").strip()


def hours(x, unit: str = "h") -> str:
    """Hours, three significant digits, no e-notation: '0.0678 h', '12.4 h', '1,230 h'."""
    if not present(x):
        return "–"
    v = float(x)
    return f"{v:,.0f} {unit}" if v >= 1000 else f"{v:.3g} {unit}" if v >= 1e-3 else f"{v:.7f}".rstrip("0") + f" {unit}"


def mfu_words(r: dict) -> str:
    """'1.7 %', or '≥ 1.7 %' where run_summary marks the MFU a lower bound."""
    return ("≥ " if r.get("mfu_is_lower_bound") else "") + share(r["mfu_pct"])


def _layout(r: dict) -> str:
    """'ddp dp2-tp1-pp1-cp1' from the degrees present in ``r`` and its strategy label; a family (no dp)
    with a strategy is the strategy alone."""
    degrees = "-".join(f"{d}{r[d]}" for d in ("dp", "tp", "pp", "cp") if r.get(d) is not None)
    if r.get("strategy") and "dp" not in r:
        return r["strategy"]
    return " ".join(x for x in (r.get("strategy"), degrees) if x) or "layout unknown"


def decision_card(summary: pl.DataFrame, scaling: pl.DataFrame, attribution: pl.DataFrame,
                  runs: list[str] | None = None, layouts: pl.DataFrame | None = None) -> DecisionCard:
    """The card from run_summary, the `scaling` query and scaling_attribution (all unfiltered),
    for ``runs`` (None: all); ``layouts`` (the layouts query) gives each run's strategy label.
    Runs without a workload get rows of their own, without efficiency.  A run's layout is its
    strategy and degrees ('ddp dp2-tp1-pp1-cp1'); its layout family, which a line follows across GPU
    counts, is the strategy, else tp-pp-cp (dp grows with the GPU count)."""
    wanted = set(summary["run_id"].to_list() if runs is None else runs)
    summary = summary.filter(pl.col("run_id").is_in(wanted) & pl.col("tokens_per_s").is_not_null())
    summary, unsure = split(summary)  # never lead with a throughput on guessed tokens (reports/confidence.py)
    base = scaling.select("run_id", base_gpus="world_size", base_tps_per_gpu="tokens_per_s_per_gpu") \
        .rename({"run_id": "baseline_run"})
    eff = scaling.select("run_id", "sweep", "scaling_efficiency_vs_sweep_baseline_pct", "baseline_run").join(
        base, on="baseline_run", how="left")
    strategy = (layouts.select("run_id", "strategy") if layouts is not None and "strategy" in layouts.columns
                else pl.DataFrame(schema={"run_id": pl.String, "strategy": pl.String}))
    df = summary.join(eff, on="run_id", how="left").join(strategy.unique("run_id"), on="run_id", how="left") \
        .with_columns(sweep=pl.coalesce("sweep", pl.col("workload"), pl.lit(NO_SWEEP)))
    df = df.with_columns(
        hours_per_billion_tokens=BILLION / pl.col("tokens_per_s") / SECONDS_PER_HOUR,
        gpu_hours_per_billion_tokens=BILLION * pl.col("world_size") / pl.col("tokens_per_s") / SECONDS_PER_HOUR,
        tokens_per_joule=pl.when(pl.col("energy_per_token_j") > 0).then(1 / pl.col("energy_per_token_j")),
        layout=pl.struct("dp", "tp", "pp", "cp", "strategy").map_elements(_layout, return_dtype=pl.String),
        layout_family=pl.struct("tp", "pp", "cp", "strategy").map_elements(_layout, return_dtype=pl.String),
        group_key=pl.when(pl.col("sweep") == NO_SWEEP).then(pl.col("run_id")).otherwise(pl.col("sweep")),
    )
    if "warnings" not in df.columns:
        df = df.with_columns(warnings=pl.lit(None, pl.String))
    if "mfu_is_lower_bound" not in df.columns:
        df = df.with_columns(mfu_is_lower_bound=pl.lit(None, pl.Boolean))
    if "cpu_only" not in df.columns:  # a run_summary from before the column: the runs had devices
        df = df.with_columns(cpu_only=pl.lit(False))
    # a baseline that is not among the selected runs is named by its GPU count only (--runs filters
    # every run id out of the page)
    df = df.with_columns(baseline_run=pl.when(pl.col("baseline_run").is_in(wanted)).then(pl.col("baseline_run")))
    points = sort_runs(df)
    best = (df.sort(["tokens_per_s", "run_id"], descending=[True, False])
            .group_by(["group_key", "world_size"], maintain_order=True)
            .agg(pl.all().first(), runs_at_size=pl.len()))
    best = sort_runs(best.with_columns(pl.col("sweep"))).with_columns(
        prev_gpus=pl.col("world_size").shift(1).over("group_key"),
        prev_tps=pl.col("tokens_per_s").shift(1).over("group_key"),
        prev_run=pl.col("run_id").shift(1).over("group_key"))
    best = best.with_columns(
        marginal_tokens_per_s_per_gpu=(pl.col("tokens_per_s") - pl.col("prev_tps"))
        / (pl.col("world_size") - pl.col("prev_gpus")))
    best = best.with_columns(
        marginal_pct_of_baseline_gpu=100 * pl.col("marginal_tokens_per_s_per_gpu") / pl.col("base_tps_per_gpu"))
    verdicts = [_verdict(sweep, part, attribution)
                for (sweep,), part in best.filter(pl.col("sweep") != NO_SWEEP)
                .group_by(["sweep"], maintain_order=True)]
    return DecisionCard(best.select(CARD_COLUMNS + ["prev_run", "prev_gpus"]), verdicts, points, unsure)


def card_from_db(db, runs: list[str] | None = None) -> DecisionCard:
    """decision_card of the runs in a ``pipeline.connect`` Database (all, or ``runs``)."""
    return decision_card(db.query("run_summary"), db.query("scaling"), db.query("scaling_attribution"), runs,
                         db.query("layouts"))


def stops_paying(rows: list[dict]) -> dict | None:
    """The first row (best run at a GPU count, ascending, after the sweep's first) whose marginal
    tokens/s per added GPU is below MARGINAL_FLOOR_PCT % of the baseline's tokens/s per GPU."""
    for r in rows[1:]:
        pct = r["marginal_pct_of_baseline_gpu"]
        if present(pct) and pct < MARGINAL_FLOOR_PCT:
            return r
    return None


def _verdict(sweep: str, group: pl.DataFrame, attribution: pl.DataFrame) -> Verdict:
    rows = group.to_dicts()
    cpu = all(r.get("cpu_only") for r in rows)  # a sweep of runs without a device counts CPU ranks

    def _gpus(n) -> str:
        return _count(n, cpu)

    one, many = unit(cpu), unit(cpu, plural=True)
    if len(rows) < 2:
        return Verdict(sweep, f"{sweep}: one {one} count ({_gpus(rows[0]['world_size'])}) measured, so nothing "
                              f"says yet whether adding {many} pays.")
    if any(not present(r["marginal_pct_of_baseline_gpu"]) for r in rows[1:]):
        return Verdict(sweep, f"{sweep}: the baseline's tokens/s per {one} is unknown, so the stop rule cannot be "
                              "applied.")
    stop = stops_paying(rows)
    if stop is None:
        low = min(rows[1:], key=lambda r: r["marginal_pct_of_baseline_gpu"])
        return Verdict(sweep, f"{sweep}: adding {many} has not stopped paying up to {_gpus(rows[-1]['world_size'])}: "
                              f"each added {one} bought at least {share(low['marginal_pct_of_baseline_gpu'])} of a "
                              f"baseline {one}'s tokens/s (lowest from {low['prev_gpus']} to "
                              f"{_gpus(low['world_size'])}; the rule: below {MARGINAL_FLOOR_PCT:g} %).",
                       marginal_pct=low["marginal_pct_of_baseline_gpu"])
    pct = stop["marginal_pct_of_baseline_gpu"]
    bought = (f"each added {one} bought " + (f"{share(pct)} of a baseline {one}'s tokens/s" if pct > 0 else
                                           "nothing: tokens/s did not rise" if pct == 0 else
                                           "less than nothing: tokens/s fell"))
    sentence = (f"{sweep}: adding {many} stops paying at {_gpus(stop['world_size'])}: from {stop['prev_gpus']} to "
                f"{_gpus(stop['world_size'])} {bought} (the rule: below {MARGINAL_FLOOR_PCT:g} %)")
    verdict = Verdict(sweep, "", stop["world_size"], stop["prev_gpus"], pct)
    att = attribution.filter((pl.col("vs") == "previous") & (pl.col("from_run") == stop["prev_run"])
                             & (pl.col("to_run") == stop["run_id"])) if not attribution.is_empty() else attribution
    if not att.is_empty():
        a = att.row(0, named=True)
        lost = a["efficiency_lost_pts"]
        named = a["baseline_run"] if stop["baseline_run"] else "not selected"
        start, end = share(a["from_scaling_efficiency_pct"]), share(a["to_scaling_efficiency_pct"])
        against = f"efficiency vs {baseline(a['baseline_gpus'], cpu)} ({named})"
        # a clause only for what the numbers show: no equal ends, no 0.0 points, no missing part
        ends = ("" if not (start and end) else f"{against} stayed at {start}" if start == end
                else f"{against} went from {start} to {end}")
        if present(lost) and f"{lost:.1f}" not in ("0.0", "-0.0") and lost > 0:
            verdict.lost_pts = lost
            parts = {p: a[f"{p}_lost_pts"] for p in STEP_PARTS
                     if present(a[f"{p}_lost_pts"]) and abs(a[f"{p}_lost_pts"]) != float("inf")}
            part = max(parts, key=parts.get) if parts else None
            lost_words = f"{lost:.1f} points lost"
            if part is not None and f"{parts[part]:.1f}" not in ("0.0", "-0.0") and parts[part] > 0:
                verdict.part, verdict.part_pts = part, parts[part]
                lost_words += f", {parts[part]:.1f} of them to {STEP_PARTS[part]} (query scaling_attribution)"
            sentence += "; " + ", ".join(x for x in (ends, lost_words) if x)
        elif ends:
            sentence += f"; {ends}"
    verdict.sentence = sentence + "."
    return verdict


# --- the terminal ---------------------------------------------------------------------------------

def card_lines(card: DecisionCard) -> list[str]:
    """The card for the terminal: one line per sweep × GPU count, then the verdicts."""
    lines = []
    rows = card.rows.to_dicts()
    width = max((len(r["sweep"]) for r in rows), default=0) + 1 if len({r["sweep"] for r in rows}) > 1 else 0
    counts = max((len(_count(r["world_size"], r.get("cpu_only"))) for r in rows), default=0)  # '2 CPU ranks' fits
    for r in rows:
        one = unit(r.get("cpu_only"))
        eff = ("" if not present(r["scaling_efficiency_vs_sweep_baseline_pct"]) else
               f", {share(r['scaling_efficiency_vs_sweep_baseline_pct'])} eff. vs "
               f"{baseline(r['base_gpus'], r.get('cpu_only')).removeprefix('the ')}")
        mfu = "" if not present(r["mfu_pct"]) else f", MFU {mfu_words(r)}" + ("(!)" if r["warnings"] else "")
        tpj = "" if not present(r["tokens_per_joule"]) else f", {si(r['tokens_per_joule'], 'tokens/J')}"
        sweep = f"{r['sweep']}:".ljust(width + 1) if width else ""
        of = f" of {r['runs_at_size']}" if r["runs_at_size"] > 1 else ""
        best = "run" if r["sweep"] == NO_SWEEP else f"best{of}"
        lines.append(f"{sweep}{_count(r['world_size'], r.get('cpu_only')):>{max(9, counts)}}  {best} {r['run_id']} ({r['layout']}): "
                     f"{si(r['tokens_per_s'], 'tokens/s')}, {si(r['tokens_per_s_per_gpu'], f'tokens/s/{one}')}{eff}"
                     f"{mfu}, {hours(r['gpu_hours_per_billion_tokens'], one.replace(' ', '-') + '-h')} per 1e9 "
                     f"tokens{tpj}")
    lines += [v.sentence for v in card.verdicts]
    if any(r["sweep"] == NO_SWEEP for r in rows):
        lines.append(NO_SWEEP_WORDS)
    if card.unsure_line():
        lines.append(card.unsure_line())
    if any(r["warnings"] for r in rows):
        lines.append("(!): run_summary warns about that run's numbers (the warnings; "
                     "`scaletrace query run_summary --columns run_id,warnings`).")
    return lines


# --- the HTML -------------------------------------------------------------------------------------

HEADERS = [("sweep", "sweep"), ("world_size", "GPUs"), ("run_id", "best run"), ("layout", "layout"),
           ("tokens_per_s", "tokens/s"), ("tokens_per_s_per_gpu", "tokens/s per GPU"),
           ("scaling_efficiency_vs_sweep_baseline_pct", "efficiency vs sweep baseline"), ("mfu_pct", "MFU"),
           ("gpu_hours_per_billion_tokens", "GPU-hours per 1e9 tokens"),
           ("hours_per_billion_tokens", "hours per 1e9 tokens"), ("tokens_per_joule", "tokens per joule"),
           ("marginal_pct_of_baseline_gpu", "added GPU vs baseline GPU")]


def headers(rows: list[dict]) -> list[tuple[str, str]]:
    """HEADERS, their GPU nouns as the rows' runs have them (words.units_title: 'CPU ranks' for runs
    without a device)."""
    many = units_title(r.get("cpu_only") for r in rows) if rows else "GPUs"
    one = many.replace("GPUs", "GPU").replace("ranks", "rank")
    return [(k, h.replace("GPUs", "\0").replace("GPU", one).replace("\0", many)) for k, h in HEADERS]


def _html_cell(r: dict, key: str) -> str:
    v = r[key]
    if key == "scaling_efficiency_vs_sweep_baseline_pct":
        named = (html.escape(str(r["baseline_run"])) if r["baseline_run"] else
                 f"{r['base_gpus']}-{unit(r.get('cpu_only'))} run, not selected")
        return "–" if not present(v) else f"{share(v)} <span class=\"base\">vs {named}</span>"
    if key == "mfu_pct":
        text = "–" if not present(v) else html.escape(mfu_words(r))
        return text + (f' <span class="warn" title="{html.escape(r["warnings"])}">⚠</span>' if r["warnings"] else "")
    if key in ("marginal_pct_of_baseline_gpu",):
        return "–" if not present(v) else html.escape(share(v))
    if key in ("gpu_hours_per_billion_tokens", "hours_per_billion_tokens"):
        return html.escape(hours(v))
    if key in ("tokens_per_s", "tokens_per_s_per_gpu", "tokens_per_joule"):
        return html.escape(si(v))
    if key == "run_id" and r["runs_at_size"] > 1:
        return f"{html.escape(str(v))} <span class=\"base\">of {r['runs_at_size']}</span>"
    return html.escape(str(v))


def card_html(card: DecisionCard) -> str:
    """The card as an HTML fragment (a table, the verdicts, the rule); every string escaped."""
    rows = card.rows.to_dicts()
    unsure = f"<p>{html.escape(card.unsure_line())}</p>" if card.unsure_line() else ""
    if not rows:
        return ('<section id="card"><h2>Decision</h2><p>No run has a throughput (tokens per step and step time), '
                f"so there is nothing to decide on.</p>{unsure}</section>")
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h in headers(rows))
    body = "".join("<tr>" + "".join(f"<td>{_html_cell(r, k)}</td>" for k, _ in HEADERS) + "</tr>" for r in rows)
    verdicts = "".join(f"<li>{html.escape(v.sentence)}</li>" for v in card.verdicts)
    if any(r["sweep"] == NO_SWEEP for r in rows):
        verdicts += f"<li>{html.escape(NO_SWEEP_WORDS)}</li>"
    if card.unsure_line():
        verdicts += f"<li>{html.escape(card.unsure_line())}</li>"
    return (f'<section id="card"><h2>Decision</h2>'
            f'<ul class="verdict">{verdicts}</ul>'
            f'<div class="scroll"><table class="card"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'
            f'<p class="legend">{html.escape(CARD_LEGEND)}</p></section>')


CARD_LEGEND = ("One row per sweep and GPU count: its fastest run. Efficiency is vs the sweep's baseline (its run "
               "with the fewest GPUs, named). GPU-hours per 1e9 tokens = GPUs × hours per 1e9 tokens "
               "(1e9 ÷ tokens/s ÷ 3600); tokens per joule from NVML power samples, where taken. "
               "Added GPU vs baseline GPU = tokens/s added per added GPU since the previous GPU count ÷ the "
               f"baseline's tokens/s per GPU. {STOP_RULE} ⚠: run_summary warns about the run (hover it, or see Warnings).")


__all__ = ["CARD_COLUMNS", "DecisionCard", "MARGINAL_FLOOR_PCT", "STOP_RULE", "UNSURE_WORDS", "Verdict", "card_from_db",
           "card_html", "card_lines", "decision_card", "hours", "si", "stops_paying"]
