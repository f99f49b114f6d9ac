"""The overlap-headroom chart: per sweep and process group, the compute left to hide its communication ÷
that communication, against the GPU count; measured (solid, points) and projected (dashed) from
queries/analysis/headroom.py; the rule at 1 is where communication stops fitting under compute.
"""

from __future__ import annotations

import altair as alt
import polars as pl

from scaletrace.reports.chartkit import HEIGHT, LABEL_FONT, SWEEP, WIDTH, data, gpus_axis
from scaletrace.queries.analysis.headroom import MEASURED, PROJECTED


def build_overlap_headroom(df: pl.DataFrame) -> alt.FacetChart | alt.LayerChart:
    """df: queries.analysis.headroom.headroom_table (measured and projected rows)."""
    df = df.filter(pl.col("headroom_ratio").is_not_null()).with_columns(
        series=pl.col("process_group") + " (" + pl.col("collectives") + ")",
        comm_us=pl.col("comm_per_step_ns") / 1e3, hide_us=pl.col("hideable_compute_per_step_ns") / 1e3)
    # the projected line starts at the last measured point
    last = (df.filter(pl.col("basis") == MEASURED).sort("world_size").group_by(["sweep", "series"]).last()
            .join(df.filter(pl.col("basis") == PROJECTED).select("sweep", "series").unique(), on=["sweep", "series"])
            .with_columns(basis=pl.lit(PROJECTED)))
    lines = pl.concat([df, last.select(df.columns)])
    # linear around 1, where it matters; a headroom above Y_MAX is drawn at the top edge (tooltips: its value)
    top = min(Y_MAX, max(1.5, float(df["headroom_ratio"].max() or 0) * 1.1))
    y = alt.Y("headroom_ratio:Q", title="hideable compute ÷ communication (per step)",
              scale=alt.Scale(domain=[0, top], clamp=True, nice=False))
    tooltip = ["sweep:N", "series:N", "basis:N", "run_id:N", "world_size:Q",
               alt.Tooltip("headroom_ratio:Q", title="headroom", format=".3~r"),
               alt.Tooltip("comm_us:Q", title="communication (µs per step)", format=",.3~r"),
               alt.Tooltip("hide_us:Q", title="hideable compute (µs per step)", format=",.3~r")]
    colour = alt.Color("series:N", title="process group (collectives)", legend=alt.Legend(labelLimit=260))
    rows = pl.concat([lines.with_columns(role=pl.lit("line")), df.with_columns(role=pl.lit("point"))])
    line = alt.Chart().mark_line().transform_filter(alt.datum.role == "line").encode(
        x=gpus_axis(df), y=y, color=colour, detail="basis:N",
        strokeDash=alt.StrokeDash("basis:N", title="basis", scale=alt.Scale(domain=[MEASURED, PROJECTED],
                                                                         range=[[1, 0], [5, 3]]),
                                  legend=alt.Legend(symbolType="stroke")),
        tooltip=tooltip)
    points = alt.Chart().mark_point(filled=True, size=40).transform_filter(alt.datum.role == "point").encode(
        x=gpus_axis(df), y=y, color=colour, tooltip=tooltip)
    one = alt.Chart().mark_rule(color="#a00", strokeDash=[2, 2]).encode(y=alt.datum(1, type="quantitative"))
    # labels on the projected points only (the measured values are in the tooltips): no two collide. The
    # other points get an empty label rather than being filtered out, so no facet's layer is empty (a
    # sweep without a projection would give Vega an empty x extent)
    labels = alt.Chart().mark_text(dx=4, dy=-9, align="left", fontSize=LABEL_FONT, color="#333").transform_filter(
        alt.datum.role == "point").encode(
        x=gpus_axis(df), y=y, text=alt.condition(alt.datum.basis == PROJECTED,
                                                 alt.Text("headroom_ratio:Q", format=".2~r"), alt.value("")))
    chart = alt.layer(line, points, labels, one)
    title = alt.TitleParams("Overlap headroom per process group (below 1: communication longer than the "
                            "compute left to hide it)", subtitle=wrap(headroom_sentences(df)), subtitleFontSize=11,
                            anchor="start", subtitleLineHeight=14)
    if df["sweep"].n_unique() == 1:
        return chart.properties(data=data(rows), width=WIDTH + 80, height=HEIGHT, title=title)
    return alt.layer(line, points, labels, one, data=data(rows)).properties(width=WIDTH - 60, height=HEIGHT).facet(
        facet=alt.Facet("sweep:N", title=SWEEP), columns=2).resolve_scale(x="independent").properties(title=title)


Y_MAX = 3.0  # the y axis ends here (a headroom of 40 on one GPU would flatten every line near 1)
SUBTITLE_CHARS = 100  # a subtitle line at most this long (Vega does not wrap titles: no horizontal scroll)


def wrap(sentences: list[str]) -> list[str]:
    """The sentences as subtitle lines of at most SUBTITLE_CHARS characters, words kept whole."""
    import textwrap

    return [line for s in sentences for line in textwrap.wrap(s, SUBTITLE_CHARS)] or [
        "every group's communication fits under the compute left when it starts"]


__all__ = ["build_overlap_headroom"]


def _gpus(n) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def headroom_sentences(df: pl.DataFrame) -> list[str]:
    """Per sweep and process group, the first GPU count where its communication is longer than the
    compute that can hide it (headroom < 1), measured, else projected; nothing where it never is."""
    from scaletrace.reports.words import duration, figure

    if df.is_empty():
        return []
    out = []
    for (sweep, group), part in df.sort("world_size").group_by(["sweep", "process_group"], maintain_order=True):
        short = part.filter(pl.col("headroom_ratio") < 1)
        if short.is_empty():
            continue
        r = short.row(0, named=True)
        gpus = _gpus(r["world_size"])
        verb = "takes" if r["basis"] == MEASURED else "is projected to take"
        before = part.filter(pl.col("world_size") < r["world_size"])
        prev = (f"; at {_gpus(before['world_size'][-1])} its headroom was {figure(before['headroom_ratio'][-1])}"
                if not before.is_empty() and before["headroom_ratio"][-1] is not None else "")
        hide = r["hideable_compute_per_step_ns"]
        against = (f"against {duration(hide)} of compute left to hide it" if hide and hide > 0
                   else "with no compute left to hide it")
        out.append(f"{sweep}, process group {group} ({r['collectives']}): at {gpus} its communication {verb} "
                   f"{duration(r['comm_per_step_ns'])} per step {against} (headroom {figure(r['headroom_ratio'])}, "
                   f"below 1: the excess is exposed){prev}.")
    return out
