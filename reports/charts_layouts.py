"""Parallel layouts at a fixed GPU count: bars per layout, and a heatmap over two parallel degrees.

A layout is its dp-tp-pp-cp string plus, when run.json labels it, the
strategy (ddp / fsdp / ...), which tells apart runs with the same degrees.
One colour per layout (chartkit.layout_colour), the same as in every other chart of the report.
"""

from __future__ import annotations

import altair as alt
import polars as pl

from scaletrace.reports.chartkit import LABEL_FONT, LAYOUT, data, layout_colour, layout_name

METRICS = {"tokens_per_s": ("tokens/s", ",.0f"), "mfu_pct": ("MFU (%)", ".2f"),
           "exposed_comm_pct": ("exposed comm (% of step)", ".1f")}
DEGREES = ("dp", "tp", "pp", "cp")
HEATMAP_MIN_LAYOUTS = 3


def _panel(df: pl.DataFrame, metric: str, colour: alt.Color, first: bool) -> alt.LayerChart:
    """One metric's bars for one group; only the first panel of a row names the layouts."""
    title, fmt = METRICS[metric]
    order = df["label"].to_list()  # df is sorted by tokens/s, fastest first
    base = alt.Chart(data(df)).encode(
        y=alt.Y("label:N", title=None, sort=order, axis=alt.Axis(labelLimit=260) if first else None),
        x=alt.X(f"{metric}:Q", title=title),
        tooltip=["run_id:N", "label:N", alt.Tooltip(f"{metric}:Q", format=fmt)])
    bars = base.mark_bar().encode(color=colour)
    text = base.mark_text(align="left", dx=3, fontSize=LABEL_FONT).encode(text=alt.Text(f"{metric}:Q", format=fmt))
    return (bars + text).properties(width=170, height=alt.Step(20))


def build_layouts(layouts: pl.DataFrame) -> alt.VConcatChart:
    """One row per workload × GPU count: tokens/s, MFU, exposed comm; bars sorted by tokens/s.
    The colour is the report's layout colour (chartkit.layout_colour), the same in every chart."""
    df = layouts.filter(pl.col("layouts_at_size") > 1).sort(["workload", "world_size", "rank_by_tokens_per_s"])
    if LAYOUT not in df.columns:
        df = df.with_columns(pl.struct("tp", "pp", "cp", "strategy").map_elements(
            lambda r: layout_name(r["tp"], r["pp"], r["cp"], r["strategy"]), return_dtype=pl.String).alias(LAYOUT))
    colour = layout_colour(df)
    rows = [alt.hconcat(*[_panel(group, m, colour, i == 0) for i, m in enumerate(METRICS)], spacing=30)
            .properties(title=alt.TitleParams(name, anchor="start", fontSize=12))
            for (name,), group in df.group_by(["group"], maintain_order=True)]
    return alt.vconcat(*rows).resolve_scale(color="shared").properties(
        title="Parallel layouts at a fixed GPU count (bars sorted by tokens/s, fastest on top)")


def heatmap_axes(df: pl.DataFrame) -> tuple[str, str]:
    """The two parallel degrees that vary most among ``df``'s runs (ties in dp, tp, pp, cp order)."""
    spread = sorted(DEGREES, key=lambda d: (-df[d].n_unique(), DEGREES.index(d)))
    return spread[0], spread[1]


def heatmap_table(layouts: pl.DataFrame) -> pl.DataFrame:
    """Groups (workload × GPU count) with at least three layouts, with cell coordinates.

    The row label carries the strategy when runs of one group share both
    degrees (ddp and fsdp at the same dp), so no two runs fill one cell.
    """
    df = layouts.filter(pl.col("layouts_at_size") >= HEATMAP_MIN_LAYOUTS)
    if df.is_empty():
        return df
    x_deg, y_deg = heatmap_axes(df)
    clash = pl.len().over(["group", x_deg, y_deg]) > 1
    return df.with_columns(
        x=pl.lit(x_deg) + pl.col(x_deg).cast(pl.String).fill_null("?"),
        y=pl.lit(y_deg) + pl.col(y_deg).cast(pl.String).fill_null("?")
        + pl.when(clash & pl.col("strategy").is_not_null()).then(" (" + pl.col("strategy") + ")").otherwise(pl.lit("")),
    )


def _heat_panel(df: pl.DataFrame, metric: str, x_title: str, y_title: str, first: bool) -> alt.LayerChart:
    title, fmt = METRICS[metric]
    mid = (df[metric].min() + df[metric].max()) / 2 if df[metric].drop_nulls().len() else 0
    scheme = "reds" if metric == "exposed_comm_pct" else "blues"
    base = alt.Chart(data(df)).encode(
        x=alt.X("x:N", title=x_title, axis=alt.Axis(labelAngle=0)),
        y=alt.Y("y:N", title=y_title if first else None, axis=alt.Axis(labels=first)))
    rect = base.mark_rect().encode(color=alt.Color(f"{metric}:Q", title=title, scale=alt.Scale(scheme=scheme)),
                                   tooltip=["run_id:N", "label:N", alt.Tooltip(f"{metric}:Q", format=fmt)])
    text = base.mark_text(fontSize=LABEL_FONT + 1).encode(
        text=alt.Text(f"{metric}:Q", format=fmt),
        color=alt.condition(f"datum['{metric}'] > {mid}", alt.value("white"), alt.value("black")))
    return (rect + text).properties(width=alt.Step(70), height=alt.Step(34), title=title)


def build_layout_heatmap(layouts: pl.DataFrame) -> alt.VConcatChart:
    df = heatmap_table(layouts)
    x_deg, y_deg = heatmap_axes(df)
    rows = []
    for (name,), group in df.group_by(["group"], maintain_order=True):
        panels = [_heat_panel(group, m, f"{x_deg} degree", f"{y_deg} degree", i == 0) for i, m in enumerate(METRICS)]
        rows.append(alt.hconcat(*panels).resolve_scale(color="independent")
                    .properties(title=alt.TitleParams(name, anchor="start", fontSize=12)))
    return alt.vconcat(*rows).properties(
        title=f"Layouts over {x_deg} × {y_deg} (groups with at least {HEATMAP_MIN_LAYOUTS} layouts)")
