"""Per-run charts: where step time goes (% of span and ms of the step), bandwidth by size, per rank.

A run whose device span is a sliver of its step (``sliver_note``, reports/device_share.py) is not
drawn as a stack of parts: its row carries the words instead (chartkit.with_slivers).
"""

from __future__ import annotations

import altair as alt
import polars as pl

from scaletrace.reports.chartkit import (LABEL_FONT, MS, PART_COLOURS, PARTS, WIDTH, data, drawn, with_label,
                                         with_slivers)

MIN_LABELLED_PCT = 7.0  # stacked segments narrower than this share of the bar carry no text label


def _long_parts(breakdown: pl.DataFrame) -> pl.DataFrame:
    """One row per run × part (slivers left out): its exact share of the span (run_summary's figure)
    and ms of the step; axis_pct = ms as a share of the longest step (whether a label fits)."""
    rows = []
    bars = drawn(breakdown)
    longest_ms = (bars["step_time_ns"].max() or 0) / 1e6
    for i, (key, name) in enumerate(PARTS.items()):
        rows.append(bars.select(
            "run_id", pct=pl.col(f"{key}_pct"), ms=pl.col(f"{key}_of_step_ns") / 1e6,
            step_ms=pl.col("step_time_ns") / 1e6, part=pl.lit(name), order=pl.lit(i)))
    long = pl.concat(rows)
    return long.with_columns(axis_pct=100 * pl.col("ms") / longest_ms if longest_ms else pl.lit(None))


def _stacked(long: pl.DataFrame, field: str, title: str, fmt: str, x_scale: alt.Scale | None,
             width_field: str, order: list[str] | None = None) -> alt.LayerChart:
    """Stacked bars of ``field`` per run and part, labelled where the segment is wide enough (``order``:
    the runs on the y axis, top first; default those of ``long``)."""
    order = order or breakdown_order(long)
    x = alt.X(f"{field}:Q", title=title, stack="zero", **({"scale": x_scale} if x_scale else {}))
    bars = alt.Chart(data(long)).mark_bar().encode(
        y=alt.Y("run_id:N", title=None, sort=order), x=x,
        color=alt.Color("part:N", title="part", sort=list(PARTS.values()),
                        scale=alt.Scale(domain=list(PARTS.values()), range=PART_COLOURS)),
        order="order:Q",
        tooltip=["run_id:N", "part:N", alt.Tooltip("pct:Q", title="% of span", format=".2f"),
                 alt.Tooltip("ms:Q", title="ms of the step", format=".2f")])
    dark = alt.FieldOneOfPredicate(field="part", oneOf=list(PARTS.values())[:3])
    labels = alt.Chart(data(long)).mark_text(align="right", dx=-3, fontSize=LABEL_FONT).encode(
        y=alt.Y("run_id:N", sort=order), x=x, order="order:Q",
        color=alt.condition(dark, alt.value("white"), alt.value("#333")),
        text=alt.condition(f"datum.{width_field} >= {MIN_LABELLED_PCT}", alt.Text(f"{field}:Q", format=fmt),
                           alt.value("")))
    return bars + labels


def breakdown_order(df: pl.DataFrame) -> list[str]:
    return df["run_id"].unique(maintain_order=True).to_list()


def build_step_breakdown(breakdown: pl.DataFrame) -> alt.HConcatChart:
    long = _long_parts(breakdown)
    order = breakdown_order(breakdown)
    pct_scale = alt.Scale(domain=[0, 100], nice=False)
    stacked = with_slivers(_stacked(long, "pct", "% of the traced span (mean over ranks)", ".0f", pct_scale, "pct",
                                     order), breakdown, "run_id", order, pct_scale).properties(
        title="Where step time goes (% of span)", width=WIDTH, height=alt.Step(22))
    hidden_bars = alt.Chart(data(breakdown)).mark_bar(color="#9ecae1").encode(
        y=alt.Y("run_id:N", title=None, sort=order, axis=None),
        x=alt.X("overlapped_comm_pct:Q", title="comm under compute (% of span)"),
        tooltip=["run_id:N", alt.Tooltip("overlapped_comm_pct:Q", format=".2f")])
    hidden = (hidden_bars + hidden_bars.mark_text(align="left", dx=3, fontSize=LABEL_FONT).encode(
        text=alt.Text("overlapped_comm_pct:Q", format=".1f"))).properties(
        title="Comm hidden under compute", width=WIDTH // 3, height=alt.Step(22))
    return alt.hconcat(stacked, hidden)


def build_step_time(breakdown: pl.DataFrame) -> alt.LayerChart:
    long = _long_parts(breakdown)
    order = breakdown_order(breakdown)
    totals = with_label(drawn(breakdown).select("run_id", "step_time_ns", step_ms=pl.col("step_time_ns") / 1e6),
                        "step_time_ns", ns_per=1)  # '2.78 s', '19.9 ms' (chartkit.si_time)
    room = alt.Scale(domain=[0, 1.12 * (totals["step_ms"].max() or 1)])  # the longest bar's total label fits
    stacked = _stacked(long, "ms", "step time (ms)", MS, room, "axis_pct", order)
    total = alt.Chart(data(totals)).mark_text(align="left", dx=4, fontSize=LABEL_FONT, fontWeight="bold").encode(
        y=alt.Y("run_id:N", sort=order), x=alt.X("step_ms:Q", scale=room),
        text="si_label:N")
    return with_slivers(stacked + total, breakdown, "run_id", order, room).properties(
        title="Step time and where it goes (ms)", width=WIDTH + 80, height=alt.Step(22))


def build_bandwidth(bandwidth: pl.DataFrame) -> alt.Chart:
    return alt.Chart(data(bandwidth)).mark_point(filled=True).encode(
        x=alt.X("size_bucket_bytes:Q", title="message size (bytes, power-of-two bucket)",
                scale=alt.Scale(type="log", base=2)),
        y=alt.Y("median_busbw_gbps:Q", title="median bus bandwidth (GB/s)"),
        color=alt.Color("collective:N", title="collective"), shape="collective:N",
        tooltip=["run_id:N", "collective:N", "pg_name:N", "count:Q",
                 alt.Tooltip("median_busbw_gbps:Q", format=".2f")],
    ).properties(title="Collective bus bandwidth vs message size", width=WIDTH, height=260)


def build_rank_wait(rank_wait: pl.DataFrame) -> alt.FacetChart:
    top = rank_wait.group_by("run_id").agg(pl.col("straggler_count").max().alias("top"))
    df = (rank_wait.join(top, on="run_id")
          .with_columns(straggler=(pl.col("straggler_count") == pl.col("top")) & (pl.col("top") > 0))
          .unpivot(index=["run_id", "rank", "straggler", "straggler_count", "num_steps"],
                   on=["exposed_transfer_ns", "exposed_wait_ns"], variable_name="part", value_name="ns")
          # per profiled step, the basis of every other chart (the whole trace where no ProfilerStep)
          .with_columns(ms=pl.col("ns") / 1e6 / pl.col("num_steps").fill_null(1).clip(lower_bound=1),
                        part=pl.col("part").replace_strict({"exposed_transfer_ns": "transfer",
                                                            "exposed_wait_ns": "waiting for a slow peer"})))
    return alt.Chart(data(df)).mark_bar().encode(
        x=alt.X("rank:O", title="rank"), y=alt.Y("sum(ms):Q", title="exposed comm (ms per step)"),
        color=alt.Color("part:N", title="exposed comm"), detail="straggler:N",
        stroke=alt.condition("datum.straggler", alt.value("black"), alt.value(None)),
        strokeWidth=alt.condition("datum.straggler", alt.value(2), alt.value(0)),
        tooltip=["run_id:N", "rank:O", "part:N", alt.Tooltip("ms:Q", format=".2f"), "straggler_count:Q"],
    ).properties(width=WIDTH, height=140).facet(row=alt.Row("run_id:N", title=None)).properties(
        title="Per rank: exposed comm split into transfer and waiting (outlined: the usual straggler)")
