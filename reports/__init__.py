"""Reports: one self-contained HTML file of scaling trends (and PNG/SVG per chart).

>>> from reports import build_report
>>> result = build_report("runs.duckdb", "report.html", png_dir="figures")
>>> from pipeline import connect
>>> result = build_report(connect("runs.duckdb"), "report.html", runs=["llama-8", "llama-16"])
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from scaletrace.pipeline.db import Database, connect
from scaletrace.reports import charts as chart_defs
from scaletrace.reports import data as report_data
from scaletrace.reports.chartkit import gpus
from scaletrace.reports.data import ReportError
from scaletrace.reports.findings import findings as make_findings
from scaletrace.reports.html import render


@dataclass
class ReportResult:
    path: Path
    charts: list[str]  # keys of the charts drawn
    omitted: list[str]  # notes for charts left out
    findings: list[str]
    bytes: int = 0
    images: list[Path] = field(default_factory=list)
    headline: list[str] = field(default_factory=list)  # best run per GPU count, for the terminal
    warnings: list[str] = field(default_factory=list)  # run_summary warnings, one line per run
    created_dirs: list[Path] = field(default_factory=list)  # directories that did not exist before


def build_charts(data: report_data.ReportData) -> tuple[list[tuple[str, str, str, dict]], list[str]]:
    """(key, title, caption, Vega-Lite spec) for every chart with data, and notes for the rest."""
    drawn, notes = [], []
    for spec in chart_defs.CHARTS:
        df = spec.select(getattr(data, spec.source))
        if df.is_empty():
            notes.append(f"{spec.title}: {spec.missing}")
            continue
        drawn.append((spec.key, spec.title, spec.caption, spec.build(df).to_dict()))
    return drawn, notes


def build_report(db: str | Path | Database, out: str | Path = "report.html", runs: list[str] | None = None,
                 png_dir: str | Path | None = None, svg_dir: str | Path | None = None,
                 title: str = "scaletrace report") -> ReportResult:
    """Write the HTML report of the runs in ``db`` (a path or a ``pipeline.connect`` Database; all
    runs, or only ``runs``); PNG/SVG per chart on request.  Missing output directories are
    created (listed in ``created_dirs``).  Raises ReportError when the database holds no runs or
    ``runs`` names one it does not hold; nothing is written then."""
    if isinstance(db, Database):
        data = report_data.load(db, runs)
        source = db.path
    else:
        with connect(db) as database:
            data = report_data.load(database, runs)
        source = Path(db)
    drawn, notes = build_charts(data)
    found = make_findings(data)
    subtitle = (f"{data.runs.height} runs, {int(data.runs['ranks_traced'].sum() or 0)} rank traces, "
                f"from {source.name}; generated {time.strftime('%Y-%m-%d %H:%M')}")
    out = Path(out)
    created = _make_dirs(out.parent)
    text = render(title, subtitle, data.runs, found, drawn, data.notes + notes, data.warnings,
                  sections=_sections(drawn, data), run_sentences=data.run_sentences)
    out.write_text(text, encoding="utf-8")
    images = []
    for directory, fmt in ((png_dir, "png"), (svg_dir, "svg")):
        if directory:
            created += _make_dirs(Path(directory))
            images += export_images(drawn, Path(directory), fmt)
    return ReportResult(out, [k for k, *_ in drawn], notes, found, len(text.encode()), images,
                        headline_lines(data.runs), data.warnings, created)


def _sections(drawn, data: report_data.ReportData) -> dict[str, tuple[str, list[str]]]:
    """The first drawn chart of each report section -> (heading, its sentences)."""
    from scaletrace.reports.charts_explain import WHY

    section_of = {spec.key: spec.section for spec in chart_defs.CHARTS}
    out, seen = {}, set()
    for key, *_ in drawn:
        section = section_of.get(key, "")
        if section and section not in seen:
            seen.add(section)
            out[key] = (section, data.why if section == WHY else [])
    return out


def _make_dirs(directory: Path) -> list[Path]:
    """Create ``directory`` and its parents; returns it when it did not exist."""
    if directory.is_dir():
        return []
    directory.mkdir(parents=True, exist_ok=True)
    return [directory]


def export_images(drawn, directory: Path, fmt: str) -> list[Path]:
    import vl_convert

    paths = []
    for key, _, _, spec in drawn:
        spec = {**spec, "config": {**spec.get("config", {}), "background": "white"}}  # papers: no transparency
        path = directory / f"{key}.{fmt}"
        if fmt == "png":
            path.write_bytes(vl_convert.vegalite_to_png(spec, scale=2))
        else:
            path.write_text(vl_convert.vegalite_to_svg(spec))
        paths.append(path)
    return paths


def headline_lines(runs) -> list[str]:
    """A few lines for the terminal: the fastest run of each sweep at each GPU count and its figures
    (runs of different workloads are not compared: their tokens are not the same work)."""
    lines = []
    sweeps = runs.with_columns(pl.col("workload").fill_null("(no workload)"))
    width = max(sweeps["workload"].str.len_chars().max() + 2, 0) if sweeps["workload"].n_unique() > 1 else 0
    for r in sweeps.sort(["workload", "world_size", "tokens_per_s"], descending=[False, False, True],
                         nulls_last=True).group_by(["workload", "world_size"], maintain_order=True) \
            .first().iter_rows(named=True):
        tps = "n/a" if r["tokens_per_s"] is None else f"{r['tokens_per_s']:,.0f} tokens/s"
        mfu = "" if r["mfu_pct"] is None else f", MFU {r['mfu_pct']:.1f} %"
        exp = "" if r["exposed_comm_pct"] is None else f", exposed comm {r['exposed_comm_pct']:.1f} % of step"
        sweep = f"{r['workload']}:".ljust(width) if width else ""
        lines.append(f"{sweep}{gpus(r['world_size']):>9}  best {r['run_id']}: {tps}{mfu}{exp}")
    return lines


def headline(db: str | Path | Database, runs: list[str] | None = None) -> list[str]:
    """headline_lines of the runs in ``db`` (all, or ``runs``)."""
    def lines(database: Database) -> list[str]:
        summary = database.query("run_summary")
        wanted = report_data.select_runs(summary, runs)
        return headline_lines(summary.filter(pl.col("run_id").is_in(wanted)))

    if isinstance(db, Database):
        return lines(db)
    with connect(db) as database:
        return lines(database)


__all__ = ["ReportError", "ReportResult", "build_report", "headline"]
