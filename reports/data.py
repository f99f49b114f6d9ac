"""The report's data: small, aggregated tables from the query files (aggregation happens in SQL)."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from pipeline.db import Database

MAX_RANK_RUNS = 6  # per-rank chart: at most this many runs (the largest)
MAX_RANKS = 256  # per-rank chart: at most this many ranks per run (the most exposed)


@dataclass
class ReportData:
    runs: pl.DataFrame  # run_summary
    scaling: pl.DataFrame
    layouts: pl.DataFrame
    breakdown: pl.DataFrame  # per run: shares of the step
    exposed_by_group: pl.DataFrame  # per run × process group × collective
    bandwidth: pl.DataFrame  # per run × collective × size bucket
    rank_wait: pl.DataFrame  # per run × rank (sampled)
    notes: list[str] = field(default_factory=list)  # what was sampled or left out


def _filter(df: pl.DataFrame, runs: list[str] | None) -> pl.DataFrame:
    return df if not runs or "run_id" not in df.columns else df.filter(pl.col("run_id").is_in(runs))


def load(db: Database, runs: list[str] | None = None) -> ReportData:
    summary = _filter(db.query("run_summary"), runs)
    wanted = summary["run_id"].to_list()
    notes: list[str] = []
    breakdown = db.sql("""
        SELECT run_id, sum(span_ns) AS span_ns, sum(compute_ns) AS compute_ns,
               sum(exposed_comm_ns) AS exposed_comm_ns, sum(exposed_memory_ns) AS exposed_memory_ns,
               sum(other_ns) AS other_ns, sum(idle_ns) AS idle_ns, sum(overlap_ns) AS overlap_ns,
               count(*) AS ranks
        FROM window_breakdown(false, NULL) GROUP BY run_id""")
    exposed = db.sql("""
        WITH spans AS (SELECT run_id, sum(span_ns) AS span_ns FROM window_breakdown(false, NULL) GROUP BY run_id)
        SELECT e.run_id, coalesce(e.pg_desc, e.pg_name, 'unnamed group') AS process_group,
               coalesce(e.collective, '?') AS collective,
               100.0 * sum(e.exposed_ns) / any_value(s.span_ns) AS exposed_pct
        FROM comm_events(NULL) e JOIN spans s USING (run_id)
        GROUP BY ALL""")
    bandwidth = db.query("collective_summary").filter(pl.col("median_busbw_gbps").is_not_null())
    rank_wait = db.query("rank_wait")
    rank_wait = _sample_ranks(_filter(rank_wait, wanted), summary, notes)
    scaling = db.query("scaling")
    layouts = db.query("layouts")
    order = summary.select("run_id", "world_size")
    breakdown = breakdown.join(order, on="run_id", how="left").sort(["world_size", "run_id"], nulls_last=True)
    return ReportData(
        runs=summary, scaling=_filter(scaling, wanted), layouts=_filter(layouts, wanted),
        breakdown=_filter(breakdown, wanted), exposed_by_group=_filter(exposed, wanted),
        bandwidth=_filter(bandwidth, wanted), rank_wait=rank_wait, notes=notes,
    )


def _sample_ranks(df: pl.DataFrame, summary: pl.DataFrame, notes: list[str]) -> pl.DataFrame:
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
