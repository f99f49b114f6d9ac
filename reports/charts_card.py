"""The marginal-returns chart of the decision card (reports/card.py): time against cost per 1e9 tokens.

One point per run with a throughput: x = GPU-hours per billion tokens (what the tokens cost),
y = hours per billion tokens (how long they take); a line per sweep and layout family joins its
runs in GPU-count order.  Perfect strong scaling moves a line straight down (less time, same
cost); where the line bends to the right, the added GPUs buy little time for much more cost.
"""

from __future__ import annotations

import altair as alt
import polars as pl

from scaletrace.reports.chartkit import HEIGHT, LABEL_FONT, WIDTH, data


def build_marginal_returns(points: pl.DataFrame) -> alt.LayerChart:
    df = points.select("run_id", "sweep", "world_size", "layout", "layout_family", "tokens_per_s",
                       "hours_per_billion_tokens", "gpu_hours_per_billion_tokens") \
        .with_columns(line=pl.col("sweep") + " · " + pl.col("layout_family"),
                      gpus_label=pl.col("world_size").cast(pl.String)).sort(["line", "world_size"])
    many_sweeps = df["sweep"].n_unique() > 1
    colour = alt.Color("line:N" if many_sweeps else "layout_family:N",
                       title="sweep · layout" if many_sweeps else "layout",
                       legend=alt.Legend(orient="right", labelLimit=260))
    base = alt.Chart(data(df)).encode(
        x=alt.X("gpu_hours_per_billion_tokens:Q", title="GPU-hours per 1e9 tokens (cost)",
                scale=alt.Scale(type="log"), axis=alt.Axis(format="~s")),
        y=alt.Y("hours_per_billion_tokens:Q", title="hours per 1e9 tokens (time)", scale=alt.Scale(type="log"),
                axis=alt.Axis(format="~s")),
        color=colour,
        tooltip=["run_id:N", "sweep:N", "layout:N", alt.Tooltip("world_size:Q", title="GPUs"),
                 alt.Tooltip("tokens_per_s:Q", format=",.0f", title="tokens/s"),
                 alt.Tooltip("hours_per_billion_tokens:Q", format=".3~g", title="hours per 1e9 tokens"),
                 alt.Tooltip("gpu_hours_per_billion_tokens:Q", format=".3~g", title="GPU-hours per 1e9 tokens")])
    line = base.mark_line().encode(detail="line:N", order="world_size:Q")
    points_ = base.mark_point(filled=True, size=40)
    labels = base.mark_text(dx=7, align="left", fontSize=LABEL_FONT, color="#333").encode(
        text="gpus_label:N")
    return (line + points_ + labels).properties(
        width=WIDTH + 160, height=HEIGHT + 60,
        title="Time vs cost per billion tokens (labels: GPUs)")


__all__ = ["build_marginal_returns"]
