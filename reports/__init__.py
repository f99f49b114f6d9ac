"""Reports: one self-contained HTML file of scaling trends (and PNG/SVG per chart).

>>> from reports import build_report
>>> result = build_report("runs.duckdb", "report.html", png_dir="figures")
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.db import connect
from reports import charts as chart_defs
from reports import data as report_data
from reports.findings import findings as make_findings
from reports.html import render


@dataclass
class ReportResult:
    path: Path
    charts: list[str]  # keys of the charts drawn
    omitted: list[str]  # notes for charts left out
    findings: list[str]
    bytes: int = 0
    images: list[Path] = field(default_factory=list)


def build_charts(data: report_data.ReportData) -> tuple[list[tuple[str, str, str, dict]], list[str]]:
    """(key, title, caption, Vega-Lite spec) for every chart with data, and notes for the rest."""
    drawn, notes = [], []
    world = data.runs.select("run_id", "world_size", "workload")
    for spec in chart_defs.CHARTS:
        df = getattr(data, spec.source)
        if spec.source in ("exposed_by_group",):
            df = df.join(world, on="run_id", how="inner")
        df = spec.select(df)
        if df.is_empty():
            notes.append(f"{spec.title}: {spec.missing}")
            continue
        drawn.append((spec.key, spec.title, spec.caption, spec.build(df).to_dict()))
    return drawn, notes


def build_report(db: str | Path, out: str | Path = "report.html", runs: list[str] | None = None,
                 png_dir: str | Path | None = None, svg_dir: str | Path | None = None,
                 title: str = "scaletrace report") -> ReportResult:
    """Write the HTML report of the runs in ``db`` (all, or ``runs``); PNG/SVG per chart on request."""
    with connect(db) as database:
        data = report_data.load(database, runs)
    drawn, notes = build_charts(data)
    found = make_findings(data)
    subtitle = (f"{data.runs.height} runs, {int(data.runs['ranks_traced'].sum() or 0)} rank traces, "
                f"from {Path(db).name}; generated {time.strftime('%Y-%m-%d %H:%M')}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = render(title, subtitle, data.runs, found, drawn, data.notes + notes)
    out.write_text(text, encoding="utf-8")
    images = []
    for directory, fmt in ((png_dir, "png"), (svg_dir, "svg")):
        if directory:
            images += export_images(drawn, Path(directory), fmt)
    return ReportResult(out, [k for k, *_ in drawn], notes, found, len(text.encode()), images)


def export_images(drawn, directory: Path, fmt: str) -> list[Path]:
    import vl_convert

    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for key, _, _, spec in drawn:
        path = directory / f"{key}.{fmt}"
        if fmt == "png":
            path.write_bytes(vl_convert.vegalite_to_png(spec, scale=2))
        else:
            path.write_text(vl_convert.vegalite_to_svg(spec))
        paths.append(path)
    return paths


def headline(db: str | Path) -> list[str]:
    """A few lines for the terminal: the best run per GPU count and its figures."""
    with connect(db) as database:
        runs = database.query("run_summary")
    lines = []
    for r in runs.sort(["world_size", "tokens_per_s"], descending=[False, True], nulls_last=True) \
            .group_by("world_size", maintain_order=True).first().iter_rows(named=True):
        tps = "n/a" if r["tokens_per_s"] is None else f"{r['tokens_per_s']:,.0f} tokens/s"
        mfu = "" if r["mfu_pct"] is None else f", MFU {r['mfu_pct']:.1f} %"
        exp = "" if r["exposed_comm_pct"] is None else f", exposed comm {r['exposed_comm_pct']:.1f} %"
        lines.append(f"{r['world_size']:>4} GPUs  best {r['run_id']}: {tps}{mfu}{exp}")
    return lines


__all__ = ["ReportResult", "build_report", "headline"]
