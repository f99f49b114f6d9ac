"""Reports: one self-contained HTML file of scaling trends (and PNG/SVG per chart).

>>> from scaletrace.reports import build_report
>>> result = build_report("runs.duckdb", "report.html", png_dir="figures")
>>> from scaletrace.pipeline import connect
>>> result = build_report(connect("runs.duckdb"), "report.html", runs=["llama-8", "llama-16"])
"""

from __future__ import annotations

import errno
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from scaletrace.reports import _altair  # noqa: F401  first: every chart module imports Altair
from scaletrace.pipeline.common.paths import Input, Output, refuse_overlap
from scaletrace.pipeline.store.db import Database, connect
from scaletrace.reports import charts as chart_defs
from scaletrace.reports import data as report_data
from scaletrace.reports import engine
from scaletrace.reports.card import card_from_db, card_lines
from scaletrace.reports.chartkit import layout_colours
from scaletrace.reports.words import gpus
from scaletrace.reports.data import ReportError
from scaletrace.reports.findings import findings as make_findings
from scaletrace.reports.html import cached_bundle, projection_table, render


@dataclass
class ReportResult:
    path: Path
    charts: list[str]  # keys of the charts drawn
    omitted: list[str]  # notes for charts left out
    findings: list[str]
    bytes: int = 0
    images: list[Path] = field(default_factory=list)
    headline: list[str] = field(default_factory=list)  # the decision card's lines, for the terminal
    warnings: list[str] = field(default_factory=list)  # run_summary warnings, one line per run
    created_dirs: list[Path] = field(default_factory=list)  # directories that did not exist before


def build_charts(data: report_data.ReportData) -> tuple[list[tuple[str, str, str, dict]], list[str]]:
    """(key, title, caption, Vega-Lite spec) for every chart with data, and notes for the rest; a chart
    against the GPU count (charts.VS_GPUS) whose data is all at one GPU count is left out (a note):
    the decision card and the runs table give those numbers as a table."""
    drawn, notes = [], []
    with layout_colours(data.layout_domain):  # one colour per layout in every chart
        for spec in chart_defs.CHARTS:
            _build(spec, data, drawn, notes)
    return drawn, notes


def _build(spec, data: report_data.ReportData, drawn: list, notes: list[str]) -> None:
    """One chart of CHARTS into ``drawn``, or its note into ``notes``."""
    df = spec.select(getattr(data, spec.source))
    if df.is_empty():
        notes.append(f"{spec.title}: {chart_defs.missing_note(spec, data)}")
        return
    if spec.key in chart_defs.VS_GPUS and "world_size" in df.columns and df["world_size"].n_unique() < 2:
        notes.append(f"{spec.title}: all its data is at one GPU count ({gpus(df['world_size'][0])}); "
                     "the decision card and the runs table give these numbers.")
        return
    # not validated against the Vega-Lite schema here (~0.6 s of a report's CPU on the demo sweep): every
    # builder's spec is, in tests/test_reports.py, on a sweep that feeds every chart
    drawn.append((spec.key, spec.title, spec.caption, spec.build(df).to_dict(validate=False)))


def build_report(db: str | Path | Database, out: str | Path = "report.html", runs: list[str] | None = None,
                 png_dir: str | Path | None = None, svg_dir: str | Path | None = None,
                 title: str = "scaletrace report") -> ReportResult:
    """Write the HTML report of the runs in ``db`` (a path or a ``pipeline.connect`` Database; all
    runs, or only ``runs``); PNG/SVG per chart on request.  Missing output directories are
    created (listed in ``created_dirs``).  Raises ReportError when the database holds no runs or
    ``runs`` names one it does not hold; nothing is written then.  An output that cannot be
    written raises its OSError before any work (the charts of a large database take seconds), an
    output onto the database (or inside a Parquet dataset) ``paths.OverwriteError``."""
    source_path = db.path if isinstance(db, Database) else db
    folder = os.path.isdir(source_path)  # a Parquet dataset or export: every file under it is read
    refuse_overlap([Input(source_path, "Parquet dataset" if folder else "database", holds_outputs=folder)],
                   [Output(out, "report"), Output(png_dir, "PNG folder"), Output(svg_dir, "SVG folder")])
    for path in (out, png_dir, svg_dir):
        if path:
            _check_writable(Path(path))
    no_v8 = engine.unavailable()  # under a small `ulimit -v` V8 aborts the process: say so before any work
    if no_v8 and (png_dir or svg_dir or cached_bundle() is None):
        raise ReportError(no_v8)
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
    svgs = {} if no_v8 else static_svgs(drawn)
    if no_v8:
        notes.append(f"No static images in this page (shown where JavaScript is off): {no_v8}.")
    text = render(title, subtitle, data.runs, found, drawn, data.notes + notes, data.warnings,
                  sections=_sections(drawn, data), run_sentences=data.run_sentences, card=data.card,
                  kernels=data.top_kernels, svgs=svgs,
                  tables={"projection": projection_table(data.projection_fits)})
    out.write_text(text, encoding="utf-8")
    images = []
    for directory, fmt in ((png_dir, "png"), (svg_dir, "svg")):
        if directory:
            created += _make_dirs(Path(directory))
            images += export_images(drawn, Path(directory), fmt, svgs)
    return ReportResult(out, [k for k, *_ in drawn], notes, found, len(text.encode()), images,
                        card_lines(data.card), data.warnings, created)


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


def _check_writable(path: Path) -> None:
    """Raise the OSError that writing ``path`` (a file, or a directory to create) would raise,
    judged from its nearest existing ancestor, without creating anything."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe != path and not probe.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))
    mode = os.W_OK | (os.X_OK if probe.is_dir() else 0)
    if not os.access(probe, mode, effective_ids=os.access in os.supports_effective_ids):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))


def _make_dirs(directory: Path) -> list[Path]:
    """Create ``directory`` and its parents; returns it when it did not exist."""
    if directory.is_dir():
        return []
    directory.mkdir(parents=True, exist_ok=True)
    return [directory]


_NOT_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")


def xml_safe(value):
    """``value`` (a chart spec: dicts, lists, strings) with every character XML cannot hold removed:
    vl-convert writes SVG, and a control character from a run id (an escape sequence in run.json)
    makes it abort the whole process instead of raising."""
    if isinstance(value, str):
        return _NOT_XML.sub("", value)
    if isinstance(value, dict):
        return {xml_safe(k): xml_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [xml_safe(v) for v in value]
    return value


def _for_paper(spec: dict) -> dict:
    """A spec vl-convert can render: XML-safe text, a white background (papers: no transparency)."""
    spec = xml_safe(spec)
    return {**spec, "config": {**spec.get("config", {}), "background": "white"}}


def static_svgs(drawn) -> dict[str, str]:
    """Every drawn chart as SVG (vl-convert, offline), for the report's <noscript> fallbacks; a chart
    vl-convert cannot render is left out of them (the page still draws it with JavaScript).
    ``SCALETRACE_STATIC_SVGS=0`` leaves them all out (about 0.4 s a chart; the test suite sets it
    except where it checks them)."""

    import vl_convert

    if os.environ.get("SCALETRACE_STATIC_SVGS", "1") == "0":
        return {}
    out = {}
    for key, _, _, spec in drawn:
        try:
            out[key] = vl_convert.vegalite_to_svg(_for_paper(spec))
        except Exception:  # noqa: BLE001 -- a fallback image is optional
            continue
    return out


def export_images(drawn, directory: Path, fmt: str, svgs: dict[str, str] | None = None) -> list[Path]:
    """Each drawn chart as ``directory/<key>.png`` or ``.svg``.  A chart already in ``svgs`` (the page's
    fallbacks, from static_svgs) is not rendered again: its SVG is written, or rasterized (the same
    bytes as vegalite_to_png, in about a third of the time)."""
    import vl_convert

    svgs = svgs or {}
    paths = []
    for key, _, _, spec in drawn:
        path = directory / f"{key}.{fmt}"
        svg = svgs.get(key)
        if fmt == "png":
            png = vl_convert.svg_to_png(svg, scale=2) if svg else vl_convert.vegalite_to_png(_for_paper(spec), scale=2)
            path.write_bytes(png)
        else:
            path.write_text(svg or vl_convert.vegalite_to_svg(_for_paper(spec)))
        paths.append(path)
    return paths


def headline(db: str | Path | Database, runs: list[str] | None = None) -> list[str]:
    """The decision card's lines (reports/card.py) of the runs in ``db`` (all, or ``runs``): what
    `scaletrace report` and `scaletrace card` print."""
    def lines(database: Database) -> list[str]:
        wanted = report_data.select_runs(database.query("run_summary"), runs)
        return card_lines(card_from_db(database, wanted))

    if isinstance(db, Database):
        return lines(db)
    with connect(db) as database:
        return lines(database)


__all__ = ["ReportError", "ReportResult", "build_report", "headline"]
