"""The marginal-returns chart of the decision card (reports/card.py): time against cost per 1e9 tokens.

One point per run with a throughput: x = GPU-hours per billion tokens (what the tokens cost),
y = hours per billion tokens (how long they take); a line per sweep and layout (chartkit.layout_name,
coloured as in every chart) joins its
runs in GPU-count order.  Perfect strong scaling moves a line straight down (less time, same
cost); where the line bends to the right, the added GPUs buy little time for much more cost.
"""

from __future__ import annotations

import altair as alt
import polars as pl

from scaletrace.reports.chartkit import HEIGHT, LABEL_FONT, LAYOUT, WIDTH, dash, data, layout_colour, layout_name
from scaletrace.reports.words import units_title


def build_marginal_returns(points: pl.DataFrame) -> alt.LayerChart:
    if LAYOUT not in points.columns:
        points = points.with_columns(pl.struct("tp", "pp", "cp", "strategy").map_elements(
            lambda r: layout_name(r["tp"], r["pp"], r["cp"], r["strategy"]), return_dtype=pl.String).alias(LAYOUT))
    noun = units_title(points["cpu_only"].to_list()) if "cpu_only" in points.columns else "GPUs"
    hours = {"CPU ranks": "CPU-rank-hours", "GPUs or CPU ranks": "GPU- or CPU-rank-hours"}.get(noun, "GPU-hours")
    df = points.select("run_id", "sweep", "world_size", "layout", LAYOUT, "tokens_per_s",
                       "hours_per_billion_tokens", "gpu_hours_per_billion_tokens") \
        .with_columns(line=pl.col("sweep") + " · " + pl.col(LAYOUT),
                      gpus_label=pl.col("world_size").cast(pl.String)).sort(["line", "world_size"])
    many_sweeps = df["sweep"].n_unique() > 1
    colour = layout_colour(df, orient="right")
    base = alt.Chart(data(df)).encode(
        x=alt.X("gpu_hours_per_billion_tokens:Q", title=f"{hours} per 1e9 tokens (cost)",
                scale=alt.Scale(type="log"), axis=alt.Axis(format="~s")),
        y=alt.Y("hours_per_billion_tokens:Q", title="hours per 1e9 tokens (time)", scale=alt.Scale(type="log"),
                axis=alt.Axis(format="~s")),
        color=colour,
        tooltip=["run_id:N", "sweep:N", "layout:N", alt.Tooltip("world_size:Q", title=noun),
                 alt.Tooltip("tokens_per_s:Q", format=",.0f", title="tokens/s"),
                 alt.Tooltip("hours_per_billion_tokens:Q", format=".3~g", title="hours per 1e9 tokens"),
                 alt.Tooltip("gpu_hours_per_billion_tokens:Q", format=".3~g", title=f"{hours} per 1e9 tokens")])
    # a line per sweep and layout; several sweeps: dashed by sweep (the colour is the layout's)
    line = base.mark_line().encode(detail="line:N", order="world_size:Q",
                                   **({"strokeDash": dash("sweep", "sweep")} if many_sweeps else {}))
    points_ = base.mark_point(filled=True, size=40)
    labels = base.mark_text(dx=7, align="left", fontSize=LABEL_FONT, color="#333").encode(
        text="gpus_label:N")
    return (line + points_ + labels).properties(
        width=WIDTH + 160, height=HEIGHT + 60,
        title=f"Time vs cost per billion tokens (labels: {noun})")


__all__ = ["build_marginal_returns"]
