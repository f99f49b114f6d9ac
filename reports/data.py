"""The report's data: small, aggregated tables from the query files (aggregation happens in SQL).

``load`` reads every table the report draws from, keeps only the selected
runs (``--runs``), and derives what needs the selection itself: the fastest
run of each sweep at each GPU count among the selected runs, and the
neighbour-to-neighbour figures between them (efficiency vs the previous GPU
count, marginal tokens/s per added GPU), so findings and charts share them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from scaletrace.pipeline.store.db import Database
from scaletrace.reports.card import decision_card
from scaletrace.reports.chartkit import LAYOUT, layout_domain, run_layouts
from scaletrace.reports.words import gpus
from scaletrace.reports.device_share import sliver_notes
from scaletrace.reports.order import sort_runs

MAX_RANK_RUNS = 6  # per-rank chart: at most this many runs (the largest)
MAX_RANKS = 256  # per-rank chart: at most this many ranks per run (the most exposed)
MAX_LISTED = 20  # an unknown-run error lists at most this many known runs
NO_SWEEP = "(no workload)"


class ReportError(ValueError):
    """Nothing to report: no runs in the database, or a selected run that is not there."""


@dataclass
class ReportData:
    runs: pl.DataFrame  # run_summary, selected runs, + sliver_note (reports/device_share.py; NULL: none)
    scaling: pl.DataFrame  # scaling + base_* figures, is_best, step_efficiency_pct (best rows)
    layouts: pl.DataFrame  # layouts + label, group; layouts_at_size among the selected runs
    breakdown: pl.DataFrame  # run_breakdown + sweep, sliver_note
    best_breakdown: pl.DataFrame  # run_breakdown of the best run per sweep × GPU count
    exposed_by_group: pl.DataFrame  # run_exposed_comm_by_group of the best runs
    collectives: pl.DataFrame  # run_collectives of the best runs
    bandwidth: pl.DataFrame  # collective_summary rows with a bandwidth
    rank_wait: pl.DataFrame  # per run × rank (sampled)
    warnings: list[str] = field(default_factory=list)  # run_summary.warnings, one line per run
    notes: list[str] = field(default_factory=list)  # what was sampled or left out
    # "Why efficiency drops" (reports/explain.py): scaling_attribution of consecutive GPU counts, its
    # per-group split, run_diff's growing families, sweep_run_parts of the best runs, the sentences
    attribution: pl.DataFrame = field(default_factory=pl.DataFrame)
    attribution_by_group: pl.DataFrame = field(default_factory=pl.DataFrame)
    growth: pl.DataFrame = field(default_factory=pl.DataFrame)
    gpu_time_parts: pl.DataFrame = field(default_factory=pl.DataFrame)  # + sliver_note
    # reports/efficiency.py, the best runs: idle_breakdown's parts per step, compute_efficiency and
    # op_efficiency per family (one row per run × series)
    idle_parts: pl.DataFrame = field(default_factory=pl.DataFrame)
    compute_parts: pl.DataFrame = field(default_factory=pl.DataFrame)
    why: list[str] = field(default_factory=list)
    why_more: list[str] = field(default_factory=list)  # the EXTRA_SENTENCES of `why` (also in the findings)
    # "Projection" (reports/charts_projection.py): the model's curve per sweep, and its sentences
    projection: pl.DataFrame = field(default_factory=pl.DataFrame)
    projection_notes: list[str] = field(default_factory=list)
    # its table (charts_projection.fit_table): per sweep and layout family, the leave-one-out error and
    # whether its line is drawn, else why not
    projection_fits: pl.DataFrame = field(default_factory=pl.DataFrame)
    # "Run by run": every selected run's own sentences (reports/run_explain.py: run_id, about, sentence)
    run_sentences: pl.DataFrame = field(default_factory=pl.DataFrame)
    # the decision card (reports/card.py) and its every-run points (the marginal-returns chart)
    card: object = None
    card_points: pl.DataFrame = field(default_factory=pl.DataFrame)
    # kernel_summary's top kernels of each card run (TOP_KERNELS each, by share of kernel time)
    top_kernels: pl.DataFrame = field(default_factory=pl.DataFrame)
    # every chart's layout colours: the layouts of every run in the database (chartkit.layout_colours);
    # runs, scaling, layouts and card_points carry each run's `layout_name` (chartkit.layout_name)
    layout_domain: list[str] = field(default_factory=list)
    # queries/analysis/headroom.py: overlap headroom of the best runs per process group, measured and projected
    headroom: pl.DataFrame = field(default_factory=pl.DataFrame)
    # step_time_spread (p50 / p95 over steps) joined to run_breakdown: the step-time chart's whiskers
    # are in `breakdown` (p50_ns, p95_ns); gpus_per_node per run (run_topology): the node boundary
    topology: pl.DataFrame = field(default_factory=pl.DataFrame)
    critical_path: pl.DataFrame = field(default_factory=pl.DataFrame)  # reports/charts_critical_path.path_parts


    def best_runs(self) -> list[str]:
        """The fastest selected run of each sweep at each GPU count: the runs the charts of "the fastest
        runs" draw, and the only runs their "not shown" notes may speak of."""
        return self.scaling.filter("is_best")["run_id"].to_list() if "is_best" in self.scaling.columns else []


def _filter(df: pl.DataFrame, runs: list[str]) -> pl.DataFrame:
    return df.filter(pl.col("run_id").is_in(runs))


def select_runs(summary: pl.DataFrame, runs: list[str] | None) -> list[str]:
    """The run ids to report on; ReportError for an empty database or an unknown run."""
    known = summary["run_id"].to_list()
    if not known:
        raise ReportError("the database holds no runs: no report written (ingest traces first)")
    if not runs:
        return known
    unknown = [r for r in dict.fromkeys(runs) if r not in known]
    if unknown:
        listed = ", ".join(known[:MAX_LISTED]) + (f", … ({len(known)} in all)" if len(known) > MAX_LISTED else "")
        raise ReportError(f"unknown run{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                          f"known runs: {listed}")
    return list(dict.fromkeys(runs))


def load(db: Database, runs: list[str] | None = None) -> ReportData:
    from scaletrace.reports.run_explain import load_tables, run_sentences

    summary = db.query("run_summary")
    wanted = select_runs(summary, runs)
    tables = load_tables(db, wanted, summary)  # the run sentences' tables, read once for the report too
    summary = _with_slivers(tables.summary, tables.share)
    notes: list[str] = []
    # + cpu_only (run_summary's: the run has no device): the charts' axis titles say "CPU ranks" (words.units_title)
    device = summary.select("run_id", cpu_only=pl.col("cpu_only") if "cpu_only" in summary.columns else pl.lit(False))
    sweeps = summary.select("run_id", "sliver_note", sweep=pl.col("workload").fill_null(NO_SWEEP)).join(
        device, on="run_id", how="left")
    scaling_all = db.query("scaling")
    scaling = _scaling(scaling_all, wanted, notes).join(device, on="run_id", how="left")
    best = scaling.filter("is_best").select("run_id", "sweep", "world_size")
    spread = db.query("step_time_spread").select("run_id", "p50_ns", "p95_ns", spread_steps="num_steps")
    breakdown = (_filter(db.query("run_breakdown"), wanted).join(sweeps, on="run_id", how="left")
                 .join(spread, on="run_id", how="left"))
    topology = db.query("run_topology")
    layout_of = run_layouts(db.query("run_summary"), topology)
    by_group = tables.by_group.join(best, on="run_id", how="inner")
    # + gpus_per_node (run_topology): the node boundary on the bandwidth panel
    collectives = (db.query("run_collectives").join(best, on="run_id", how="inner")
                   .join(topology.select("run_id", "gpus_per_node"), on="run_id", how="left"))
    bandwidth = _filter(db.query("collective_summary"), wanted).filter(pl.col("median_busbw_gbps").is_not_null())
    rank_wait = _sample_ranks(tables.rank_wait, notes).join(  # + workload, world_size: the panels' run order
        summary.select("run_id", "workload", "world_size"), on="run_id", how="left")
    why = _why(db, wanted, best.join(device, on="run_id", how="left"), tables)  # + cpu_only: the sentences' nouns
    why["gpu_time_parts"] = why["gpu_time_parts"].join(sweeps.select("run_id", "sliver_note"), on="run_id",
                                                       how="left")
    why.update(_projection(db, best))
    layouts_all = db.query("layouts")
    card = decision_card(tables.summary, scaling_all, db.query("scaling_attribution"), wanted, layouts_all)
    return ReportData(
        **why, run_sentences=run_sentences(tables), card=card, card_points=_with_layout(card.points, layout_of),
        top_kernels=_top_kernels(db, card.rows["run_id"].to_list()),
        runs=sort_runs(_with_layout(summary, layout_of)), scaling=_with_layout(scaling, layout_of),
        layouts=_with_layout(_layouts(_filter(layouts_all, wanted)), layout_of).join(device, on="run_id", how="left"),
        layout_domain=layout_domain(layout_of[LAYOUT].to_list()), topology=_filter(topology, wanted),
        breakdown=breakdown, best_breakdown=breakdown.drop("sweep", "world_size").join(best, on="run_id"),
        exposed_by_group=by_group, collectives=collectives, bandwidth=bandwidth, rank_wait=rank_wait,
        warnings=_warnings(summary), notes=notes, critical_path=_critical_path(db, best),
    )


TOP_KERNELS = 5  # the top-kernels table: this many kernels per run


def _top_kernels(db: Database, run_ids: list[str]) -> pl.DataFrame:
    """kernel_summary's TOP_KERNELS kernels by share of kernel time of each of ``run_ids``, in run order."""
    try:
        ks = db.query("kernel_summary")
    except Exception:  # a database from before kernel_summary's columns: no table
        return pl.DataFrame()
    order = {r: i for i, r in enumerate(run_ids)}
    return (ks.filter(pl.col("run_id").is_in(run_ids))
            .sort(["run_id", "total_ns"], descending=[False, True]).group_by("run_id", maintain_order=True)
            .head(TOP_KERNELS)
            .with_columns(order=pl.col("run_id").replace_strict(order, return_dtype=pl.Int64))
            .sort(["order", "total_ns"], descending=[False, True]).drop("order"))


def _with_slivers(summary: pl.DataFrame, share: pl.DataFrame) -> pl.DataFrame:
    """run_summary + sliver_note: reports/device_share.py's words where the run's device span is a
    sliver of its step (NULL elsewhere): the runs table and the step-time charts say it."""
    ranks = dict(zip(summary["run_id"].to_list(), summary["ranks_traced"].to_list()))
    notes = sliver_notes(share, ranks)
    return summary.with_columns(sliver_note=pl.col("run_id").replace_strict(notes, default=None,
                                                                              return_dtype=pl.String))


def _why(db: Database, wanted: list[str], best: pl.DataFrame, tables) -> dict:
    """The "Why efficiency drops" tables and sentences, for the steps whose runs are both selected;
    idle and compute efficiency of ``best`` (the fastest selected run of each sweep at each GPU count;
    ``tables``: run_explain.RunTables of the selected runs, whose idle and efficiency rows are these)."""
    from scaletrace.reports import efficiency, explain

    expl = explain.for_runs(explain.explain(db, extras=False, runs_too=False), wanted)
    idle = efficiency.idle_per_step(tables.idle, best)
    compute = efficiency.efficiency_per_run(tables.compute, tables.ops, best)
    # what the EXTRA_SENTENCES hooks say (idle_hook, compute_hook), from the tables just read: the
    # hooks would run the same three queries again
    more = efficiency.idle_sentences(idle) + efficiency.compute_sentences(compute)
    return {"attribution": expl.attribution, "attribution_by_group": expl.by_group, "growth": expl.growth,
            "gpu_time_parts": _filter(explain.run_parts(db), wanted), "idle_parts": idle, "compute_parts": compute,
            "why": expl.sentences + more, "why_more": more}


def _projection(db: Database, best: pl.DataFrame) -> dict:
    """The projection's curve and sentences (every sweep in the database: the model needs all its runs),
    and the overlap headroom of ``best`` (measured, and projected by the same fitted sweeps)."""
    from scaletrace.reports.charts_projection import fit_table, fitted_sweeps, projection_data, projection_sentences
    from scaletrace.queries.analysis.headroom import headroom_table

    sweeps, skipped = fitted_sweeps(db)
    curve, skipped = projection_data(db, (sweeps, skipped))
    return {"projection": curve, "projection_notes": projection_sentences(curve, skipped),
            "projection_fits": fit_table(sweeps, skipped), "headroom": headroom_table(db, best, sweeps)}


def _with_layout(df: pl.DataFrame, layout_of: pl.DataFrame) -> pl.DataFrame:
    """``df`` with each run's layout name (chartkit.layout_name), the key of every chart's layout colour."""
    if df.is_empty() or "run_id" not in df.columns:
        return df
    return df.drop(LAYOUT, strict=False).join(layout_of, on="run_id", how="left")


def _scaling(scaling: pl.DataFrame, wanted: list[str], notes: list[str]) -> pl.DataFrame:
    """The selected runs of each sweep, with their baseline's figures (the baseline stays the
    sweep's fewest-GPU run in the database, as in the `scaling` query, even when not selected)."""
    base = scaling.select(baseline_run="run_id", base_gpus="world_size", base_tps="tokens_per_s",
                          base_tps_per_gpu="tokens_per_s_per_gpu")
    df = _filter(scaling.join(base, on="baseline_run", how="left"), wanted)
    for row in df.filter(~pl.col("baseline_run").is_in(wanted)).unique("sweep").sort("sweep").iter_rows(named=True):
        notes.append(f"Sweep {row['sweep']}: efficiency and ideal lines are against its {gpus(row['base_gpus'])} "
                     "baseline run, which is not among the selected runs.")
    df = df.drop("baseline_run").with_columns(
        is_best=pl.col("run_id") == pl.col("run_id").sort_by(["tokens_per_s", "run_id"], descending=[True, False])
        .first().over(["sweep", "world_size"]))
    # neighbours among the selected GPU counts of a sweep (the best run at each)
    sizes = (df.filter("is_best").sort("world_size")
             .select("sweep", "world_size",
                     prev_gpus=pl.col("world_size").shift(1).over("sweep", order_by="world_size"),
                     prev_tps=pl.col("tokens_per_s").shift(1).over("sweep", order_by="world_size")))
    df = df.join(sizes, on=["sweep", "world_size"], how="left")
    return df.with_columns(
        step_efficiency_pct=pl.when("is_best").then(
            100 * (pl.col("tokens_per_s") / pl.col("prev_tps")) / (pl.col("world_size") / pl.col("prev_gpus"))),
        marginal_tokens_per_s_per_gpu=(pl.col("tokens_per_s") - pl.col("prev_tps"))
        / (pl.col("world_size") - pl.col("prev_gpus")),
    ).sort(["sweep", "world_size", "run_id"])


def _layouts(layouts: pl.DataFrame) -> pl.DataFrame:
    """Layout labels (strategy tells apart runs with the same degrees) and counts among the selected runs."""
    key = ["workload", "world_size"]
    return layouts.with_columns(
        label=pl.col("layout") + pl.when(pl.col("strategy").is_not_null())
        .then(" (" + pl.col("strategy") + ")").otherwise(pl.lit("")),
        group=pl.col("workload") + " · " + pl.col("world_size").cast(pl.String)
        + pl.when(pl.col("world_size") == 1).then(pl.lit(" GPU")).otherwise(pl.lit(" GPUs")),
        layouts_at_size=pl.len().over(key),
        rank_by_tokens_per_s=pl.col("tokens_per_s").rank("min", descending=True).over(key),
    )


def _warnings(summary: pl.DataFrame) -> list[str]:
    """run_summary's `warnings` column (NULL when none), one line per run."""
    if "warnings" not in summary.columns:
        return []
    return [f"{r['run_id']}: {r['warnings']}" for r in summary.iter_rows(named=True) if r["warnings"]]


def _sample_ranks(df: pl.DataFrame, notes: list[str]) -> pl.DataFrame:
    multi = df.group_by("run_id").agg(pl.len().alias("n")).filter(pl.col("n") > 1)
    if multi.height > MAX_RANK_RUNS:
        keep = multi.sort(["n", "run_id"], descending=[True, False]).head(MAX_RANK_RUNS)["run_id"]
        notes.append(f"Per-rank chart: the {MAX_RANK_RUNS} runs with the most ranks of {multi.height}.")
        multi = multi.filter(pl.col("run_id").is_in(keep.to_list()))
    df = df.filter(pl.col("run_id").is_in(multi["run_id"].to_list()))
    big = multi.filter(pl.col("n") > MAX_RANKS)
    if big.height:
        notes.append(f"Per-rank chart: runs with more than {MAX_RANKS} ranks show their {MAX_RANKS} "
                     "ranks with the most exposed communication.")
        df = (df.sort("exposed_ns", descending=True).group_by("run_id", maintain_order=True)
              .head(MAX_RANKS).sort(["run_id", "rank"]))
    return df


def _critical_path(db: Database, best: pl.DataFrame) -> pl.DataFrame:
    from scaletrace.reports.charts_critical_path import path_parts

    return path_parts(db, best)
