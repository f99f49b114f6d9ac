"""Shared pieces of the chart builders: inline data, the GPU axis, data labels, titles.

One place for the words the charts share, so every chart says "sweep" for a
group of runs sharing a workload label, and "N GPU" / "N GPUs" correctly.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from contextvars import ContextVar

import altair as alt
import polars as pl

from scaletrace.reports import words
from scaletrace.reports.words import duration, present

WIDTH, HEIGHT = 420, 260
SWEEP = "sweep"  # legend title for runs grouped by run.json `workload` (docs/metrics.md, "Across runs")
PARTS = {  # step-breakdown parts in stacking order; the five shares sum to 100 % of the span
    "compute": "compute", "exposed_comm": "exposed comm", "exposed_memory": "exposed memory",
    "other": "other", "idle": "idle",
}
PART_COLOURS = ["#4c78a8", "#e45756", "#f58518", "#bab0ac", "#eeeeee"]
LABEL_FONT = 10
MS = ",.3~r"  # tooltips in ms: three significant digits, never e-notation (0.0405, 12.9, 105, 1,200)
SI_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def _digits(x: float) -> str:
    """Three significant digits in fixed notation: '44', '2.78', '0.299', '0.000123' (never '4.4e+4')."""
    if x == 0:
        return "0"
    places = max(0, 2 - math.floor(math.log10(abs(x))))
    return f"{x:.{places}f}".rstrip("0").rstrip(".") if places else f"{x:.0f}"


def si(x, unit: str, glue: bool = False) -> str | None:
    """A chart's number in SI with its unit, three significant digits: '44 k tokens/J', '2.78 M tokens/s',
    '613 tokens/s', '0.299 tokens/J'; ``glue`` joins the prefix to an SI unit ('9.05 TFLOP').  Times in
    seconds and their fractions use :func:`si_time`.  None for a missing value (the label is left out)."""
    if not present(x):
        return None
    v = float(x)
    for scale, prefix in SI_PREFIXES:
        if abs(v) >= scale * 0.9995:  # 999.96 is '1 k', not '1e+03'
            return f"{_digits(v / scale)} {prefix}{'' if glue else ' '}{unit}"
    return f"{_digits(v)} {unit}"


def si_time(ns) -> str | None:
    """Nanoseconds as a chart label: '2.78 s', '19.9 ms', '1.76 µs' (words.duration, the sentences' rule)."""
    return duration(ns) if present(ns) else None


def with_label(df: pl.DataFrame, field: str, unit: str | None = None, ns_per: float | None = None,
               name: str = "si_label") -> pl.DataFrame:
    """``df`` with a text column ``name``: ``field`` in SI with ``unit`` (:func:`si`), or, with ``ns_per``
    (nanoseconds per unit of ``field``: 1e6 for ms), as a duration (:func:`si_time`)."""
    values = df[field].to_list() if field in df.columns else []
    text = [si_time(v * ns_per) if ns_per and present(v) else si(v, unit or "") if not ns_per else None
            for v in values]
    return df.with_columns(pl.Series(name, text, dtype=pl.String))


class SharedData(alt.Data):
    """Inline rows that Altair's deep copies share: a layered chart deep-copies its layers on every
    ``+``, ``.properties()`` and ``to_dict()``, rows included (100,000 of the 758,000 copy calls of the
    demo sweep's charts); nothing changes the rows once a chart holds them.  Layers built from one base
    chart then hold the same rows, which Altair writes once, on the layered chart: the same rows drawn."""

    def __deepcopy__(self, memo=None) -> SharedData:
        return self


def data(df: pl.DataFrame) -> alt.Data:
    """Inline values (the tables are aggregated, so small); decimals as floats for JSON."""
    return SharedData(values=df.with_columns(pl.col(pl.Decimal).cast(pl.Float64)).to_dicts())


def gpus_axis(df: pl.DataFrame | None = None, title: str | None = None) -> alt.X:
    """log2 GPU-count axis; ticks at the GPU counts of ``df`` when given (no 1.5-GPU ticks).  Its title
    (unless given): 'CPU ranks' where every run of ``df`` has no device (its ``cpu_only`` column,
    run_summary's; words.units_title), else 'GPUs (ranks)'."""
    if title is None:
        title = ("CPU ranks" if df is not None and "cpu_only" in df.columns and not df.is_empty()
                 and words.units_title(df["cpu_only"].to_list()) == "CPU ranks" else "GPUs (ranks)")
    ticks = {"values": sorted(df["world_size"].drop_nulls().unique().to_list())} if df is not None else {}
    # padding: a label centred on the first or last GPU count stays inside the plot
    return alt.X("world_size:Q", title=title, scale=alt.Scale(type="log", base=2, padding=28),
                 axis=alt.Axis(tickMinStep=1, format="d", **ticks))


def sweep_colour(field: str = "sweep") -> alt.Color:
    return alt.Color(f"{field}:N", title=SWEEP)


def dash(field: str, title: str, sort: list[str] | None = None) -> alt.StrokeDash:
    """Line style by ``field``, with a legend that shows the dash pattern (not a dot)."""
    return alt.StrokeDash(f"{field}:N", title=title,
                          legend=alt.Legend(symbolType="stroke", symbolStrokeColor="#333", symbolStrokeWidth=2,
                                            symbolSize=300),
                          **({"sort": sort} if sort else {}))


def dashed_points(line: alt.Chart) -> alt.Chart:
    """Point marks for a line whose style encodes a field: ``mark_line(point=True)`` would merge the
    points into the dash legend and blank its symbols, so the points are a layer of their own."""
    points = line.mark_point(filled=True, size=30).copy(deep=True)
    points.encoding.strokeDash = alt.Undefined
    return points


def point_labels(chart: alt.Chart, field: str, fmt: str | None, dy: int = -9) -> alt.Chart:
    """Text marks reusing ``chart``'s encodings: the value of ``field`` above each point or bar end
    (``fmt`` None: ``field`` is a text column already formatted, e.g. by :func:`with_label`)."""
    text = alt.Text(f"{field}:N") if fmt is None else alt.Text(f"{field}:Q", format=fmt)
    labels = chart.mark_text(dy=dy, fontSize=LABEL_FONT, color="#333").encode(text=text).copy(deep=True)
    labels.encoding.strokeDash = alt.Undefined  # text has no stroke dash (Vega-Lite warns)
    return labels


def with_slivers(chart, df: pl.DataFrame, y: str, order: list[str], x_scale: alt.Scale):
    """``chart`` + the words of the sliver runs of ``df`` (column sliver_note, reports/device_share.py)
    at the start of their row ``y``, where their bars would have been (``chart`` alone when none)."""
    if "sliver_note" not in df.columns:
        return chart
    rows = df.filter(pl.col("sliver_note").is_not_null()).select(y, "sliver_note", x0=pl.lit(0.0))
    if rows.is_empty():
        return chart
    words = alt.Chart(data(rows)).mark_text(align="left", dx=2, fontSize=LABEL_FONT, fontStyle="italic",
                                            color="#8a5a00").encode(
        y=alt.Y(f"{y}:N", sort=order), x=alt.X("x0:Q", scale=x_scale), text="sliver_note:N")
    return chart + words


def drawn(df: pl.DataFrame) -> pl.DataFrame:
    """The rows drawn as parts: every run but the slivers (sliver_note set)."""
    return df.filter(pl.col("sliver_note").is_null()) if "sliver_note" in df.columns else df


def baseline(n, cpu_only=False) -> str:
    """'the 1-GPU baseline' ('the 1-CPU-rank baseline' without a device): the run with the fewest GPUs
    of a sweep (docs/metrics.md, "Across runs")."""
    return f"the {n}-{words.unit(cpu_only).replace(' ', '-')} baseline"


def baseline_words(scaling: pl.DataFrame) -> str:
    """baseline(n) when every sweep's baseline has n GPUs, else a general phrase."""
    counts = scaling["base_gpus"].unique().drop_nulls().to_list() if "base_gpus" in scaling.columns else []
    return baseline(counts[0]) if len(counts) == 1 else "each sweep's baseline (its fewest GPUs)"


# ---- one colour per layout, the same in every chart of a report ------------------------------------

# Tableau 10, then Tableau 20's light shades: a report with more layouts than this reuses colours
LAYOUT_COLOURS = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#eeca3b", "#ff9da6",
                  "#9d755d", "#79706e", "#9ecae9", "#ffbf79", "#88d27a", "#ff9d98", "#b7e4e0", "#d6a5c9",
                  "#f2cf5b", "#fcbfd2", "#d8b5a5", "#bab0ac"]
LAYOUT = "layout_name"  # the column of each run's layout name (layout_name) in the report's tables
_DOMAIN: ContextVar[tuple[str, ...] | None] = ContextVar("layout_domain", default=None)


def layout_name(tp=None, pp=None, cp=None, strategy: str | None = None) -> str:
    """A layout that keeps its name across GPU counts: the run.json strategy label (labels.layout) and the
    tensor, pipeline and context degrees above 1 ('ddp', 'fsdp', 'fsdp_tp·tp2', 'tp2·pp2'); data parallel
    alone is 'dp' (dp grows with the GPU count, so it is not part of the name); a strategy that only names
    the one degree shown is left out ('tp4', not 'tp·tp4'); nothing known: 'layout unknown'."""
    degrees = [f"{d}{int(v)}" for d, v in (("tp", tp), ("pp", pp), ("cp", cp)) if v is not None and int(v) > 1]
    dims = {d[:2] for d in degrees}
    parts = ([strategy] if strategy and not (len(dims) == 1 and strategy in dims) else []) + degrees
    if parts:
        return "·".join(parts)
    return "dp" if any(v is not None for v in (tp, pp, cp)) else "layout unknown"


def layout_key(name: str) -> tuple:
    """The order of layouts in legends: data parallel first, then by the degrees' product, then by name."""
    import re

    product = math.prod(int(x) for x in re.findall(r"(?:tp|pp|cp)(\d+)", name)) if name else 1
    return (name == "layout unknown", product, name)


def run_layouts(summary: pl.DataFrame, strategies: pl.DataFrame | None = None) -> pl.DataFrame:
    """run_id -> layout (:func:`layout_name`) of every run of ``summary`` (run_summary: tp, pp, cp);
    ``strategies``: run_id, strategy (run_topology / layouts)."""
    df = summary.select("run_id", *[c for c in ("tp", "pp", "cp") if c in summary.columns])
    if strategies is not None and "strategy" in strategies.columns:
        df = df.join(strategies.select("run_id", "strategy").unique("run_id"), on="run_id", how="left")
    names = [layout_name(r.get("tp"), r.get("pp"), r.get("cp"), r.get("strategy")) for r in df.iter_rows(named=True)]
    return df.select("run_id").with_columns(pl.Series(LAYOUT, names, dtype=pl.String))


def layout_domain(layouts) -> list[str]:
    """The layouts (names) in legend order: the colour domain of a report."""
    return sorted(set(layouts), key=layout_key)


@contextmanager
def layout_colours(domain: list[str]):
    """Inside: every chart's layout colour uses ``domain`` (computed once per report from all runs), so a
    layout has one colour in every chart and at every GPU count."""
    token = _DOMAIN.set(tuple(domain))
    try:
        yield
    finally:
        _DOMAIN.reset(token)


def layout_scale(present: list[str] | None = None) -> alt.Scale:
    """The colour scale of layouts: the report's domain (:func:`layout_colours`), else ``present``'s."""
    domain = list(_DOMAIN.get() or layout_domain(present or []))
    for name in layout_domain(present or []):  # a layout outside the report's domain still gets a colour
        if name not in domain:
            domain.append(name)
    return alt.Scale(domain=domain, range=[LAYOUT_COLOURS[i % len(LAYOUT_COLOURS)] for i in range(len(domain))])


def layout_colour(df: pl.DataFrame, field: str = LAYOUT, title: str = "layout", **legend) -> alt.Color:
    """Colour by layout with the report's one scale; the legend lists only the layouts of ``df``."""
    present = df[field].drop_nulls().unique().to_list() if field in df.columns else []
    scale = layout_scale(present)
    return alt.Color(f"{field}:N", title=title, scale=scale,
                     legend=alt.Legend(values=layout_domain(present), labelLimit=260, **legend))
