"""One self-contained HTML file: Vega, Vega-Lite and vega-embed inlined (vl-convert), no network.

Every string that came from a trace or a manifest (run ids, kernel and
process-group names, labels) is HTML-escaped in text, and JSON embedded in
``<script>`` has ``<``, ``>`` and ``&`` escaped, so a trace cannot inject markup.
"""

from __future__ import annotations

import html
import json
import math
from functools import lru_cache

import polars as pl

from scaletrace.pipeline.common import cachefiles
from scaletrace.reports.confidence import LOW_CONFIDENCE, TOKEN_FIGURES, unsure
from scaletrace.reports.device_share import SLIVER_PCT
from scaletrace.reports.words import above_100, duration, share, units_title

SUMMARY_COLUMNS = {  # run_summary column -> (header, format)
    "run_id": ("run", "{}"), "workload": ("workload", "{}"), "world_size": ("GPUs", "{}"),
    "dp": ("dp", "{}"), "tp": ("tp", "{}"), "pp": ("pp", "{}"), "cp": ("cp", "{}"),
    "step_time_ns": ("step (ms)", "{:.2f}"), "tokens_per_s": ("tokens/s", "{:,.0f}"),
    "mfu_pct": ("MFU %", "{:.2f}"), "compute_pct": ("compute % of step", "{:.1f}"),
    "exposed_comm_pct": ("exposed comm % of step", "{:.1f}"),
    "exposed_memory_pct": ("exposed memory % of step", "{:.1f}"), "other_pct": ("other % of step", "{:.1f}"),
    "idle_pct": ("idle % of step", "{:.1f}"), "energy_per_token_j": ("J/token", "{:.3g}"),
}

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #222; }
li, p, h3 { overflow-wrap: anywhere; } .scroll, .vega, .static { max-width: 100%; overflow-x: auto; }
nav#toc { font-size: 0.9em; } nav#toc h2 { font-size: 1.1em; margin-bottom: 0.2em; }
ol.toc { display: flex; flex-wrap: wrap; gap: 0 2.2em; padding-left: 1.2em; margin: 0.2em 0; }
ul.toc.figs { columns: 3; padding-left: 0; margin: 0.4em 0; } ul.toc li { list-style: none; margin: 0.1em 0; }
ul.toc li.sec { font-weight: 600; break-after: avoid; } td { white-space: nowrap; }
#card { border: 2px solid #333; border-radius: 6px; padding: 0.3em 1em 0.6em; margin: 1em 0 2em; }
#card h2 { margin-top: 0.4em; } ul.verdict li { font-size: 1.05em; } table.card td, table.card th { white-space: nowrap; }
th { vertical-align: bottom; } table.card th:nth-child(n+3) { white-space: normal; } .base { color: #666; font-size: 0.9em; }
td.name { text-align: left; max-width: 28em; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
h1 { margin-bottom: 0.2em; } .sub { color: #666; margin-top: 0; }
table { border-collapse: collapse; font-size: 0.85em; margin: 1em 0; }
th, td { border-bottom: 1px solid #ddd; padding: 3px 8px; text-align: right; }
th:first-child, td:first-child, td:nth-child(2) { text-align: left; white-space: nowrap; }
.chart { margin: 1.5em 0 2.5em; } .caption { color: #444; max-width: 60em; }
.note { color: #8a5a00; } li { margin: 0.3em 0; }
.warn { color: #a00; } td.sliver { text-align: left; color: #8a5a00; font-style: italic; white-space: normal; }
div.run h3 { margin: 1em 0 0.2em; font-size: 1em; } div.run ul { margin-top: 0.2em; font-size: 0.92em; }
td.misfit { color: #8a5a00; white-space: normal; }
table.projection th:last-child, table.projection td:last-child { text-align: left; }
h2.section { border-top: 2px solid #333; padding-top: 0.6em; margin-top: 2em; } .legend { color: #555; font-size: 0.85em; max-width: 60em; }
"""


@lru_cache(maxsize=1)
def vega_bundle() -> str:
    """Vega, Vega-Lite and vega-embed as one script, inlined in every report.  vl-convert builds it in
    ~1.7 s; it is kept in the cache directory (pipeline/common/cachefiles.py) by vl-convert's version,
    so a machine builds it once per version.  Where the cache cannot be read or written, it is built."""
    import vl_convert

    kept = cached_bundle()
    if kept is not None:
        return kept
    bundle = vl_convert.javascript_bundle()
    try:
        folder, key = _bundle_place()
        cachefiles.write(folder, BUNDLE, key, "js", bundle.encode())
    except OSError:
        pass
    return bundle


BUNDLE = "vega-bundle"  # the bundle's kind in the cache directory


def _bundle_place() -> tuple:
    import vl_convert

    return cachefiles.cache_dir(), cachefiles.key_of(getattr(vl_convert, "__version__", "?"))


def cached_bundle() -> str | None:
    """The bundle kept in the cache directory for this vl-convert version, None when there is none
    (or the cache cannot be read)."""
    try:
        folder, key = _bundle_place()
        kept = cachefiles.read(folder, f"{BUNDLE}.{key}.*.js")
    except OSError:
        return None
    return kept.decode() if kept is not None else None


def finite(value):
    """``value`` with every NaN and ±infinity (a division by a zero the data held) made None:
    shown as missing, never a crash of the report."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def script_json(value) -> str:
    """JSON safe inside <script>: no `</script>`, no HTML comment or entity tricks; non-finite
    numbers are null (strict JSON has none)."""
    return (json.dumps(finite(value), allow_nan=False, default=str)
            .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


def _cell(value, fmt: str, column: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if column == "step_time_ns":
        value = value / 1e6
    try:
        return html.escape(fmt.format(value))
    except (ValueError, TypeError):
        return html.escape(str(value))


# The step's five shares: where a run's device span is a sliver of its step (``sliver_note``,
# reports/device_share.py), one cell across them says so instead of five shares of that sliver.
SHARE_COLUMNS = ("compute_pct", "exposed_comm_pct", "exposed_memory_pct", "other_pct", "idle_pct")


# A value resting on a fact the trace was read for (run_summary's *_basis "inferred: …") is marked,
# the basis in the cell's tooltip: tokens/s and MFU on tokens per step, GPUs on the world size.
INFERRED_MARK = "†"
BASIS_OF = {"tokens_per_s": ("tokens_per_step_basis",), "mfu_pct": ("tokens_per_step_basis", "flops_per_token_basis"),
            "world_size": ("world_size_basis",)}


def _inferred(r: dict, column: str) -> str:
    """The "inferred: …" bases behind a cell (empty when none)."""
    bases = [f"{b.removesuffix('_basis').replace('_', ' ')}: {r[b]}" for b in BASIS_OF.get(column, ())
             if isinstance(r.get(b), str) and r[b].startswith("inferred")]
    return "; ".join(bases)


def _value_cell(r: dict, c: str, mixed: bool = False) -> str:
    text = _cell(r[c], SUMMARY_COLUMNS[c][1], c)
    basis = _inferred(r, c) if r[c] is not None else ""
    if c == "world_size" and mixed and r.get("cpu_only"):  # a table of GPU and CPU runs: say which is which
        text += " CPU"
    if c.endswith("_pct") and above_100(r[c], "x"):  # an impossible share: never a bare figure
        why = r.get("warnings") or "a percentage above 100 % (see Warnings)"
        text += f' <span class="warn" title="{html.escape(why)}">⚠ above 100 %</span>'
    if c in TOKEN_FIGURES and r[c] is not None and unsure(r):  # reports/confidence.py: said in words
        why = f"tokens per step inferred with {LOW_CONFIDENCE}: {r.get('tokens_per_step_confidence_basis') or ''}"
        return (f'<td title="{html.escape(why)}">{text}{INFERRED_MARK if basis else ""} '
                f'<span class="warn">({LOW_CONFIDENCE})</span></td>')
    if basis:
        return f'<td title="{html.escape(basis)}">{text}{INFERRED_MARK}</td>'
    return f"<td>{text}</td>"


def _row(r: dict, cols: list[str], mixed: bool = False) -> str:
    note = r.get("sliver_note")
    shares = [c for c in cols if c in SHARE_COLUMNS]
    cells = []
    for c in cols:
        if note and c in shares:
            if c == shares[0]:
                cells.append(f'<td class="sliver" colspan="{len(shares)}">{html.escape(note)}</td>')
            continue
        cells.append(_value_cell(r, c, mixed))
    return "<tr>" + "".join(cells) + "</tr>"


def summary_table(runs: pl.DataFrame) -> str:
    cols = [c for c in SUMMARY_COLUMNS if c in runs.columns]
    # the count's noun as the runs have it (words.units_title: 'CPU ranks' for runs without a device)
    noun = units_title(runs["cpu_only"].to_list()) if "cpu_only" in runs.columns and runs.height else "GPUs"
    head = "".join(f"<th>{html.escape(noun if c == 'world_size' else SUMMARY_COLUMNS[c][0])}</th>" for c in cols)
    rows = "".join(_row(r, cols, noun == "GPUs or CPU ranks") for r in runs.iter_rows(named=True))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def run_sections(sentences: pl.DataFrame) -> str:
    """The "Run by run" section: each run's name, then its sentences (reports/run_explain.py)."""
    if sentences.is_empty():
        return ""
    blocks = "".join(
        f'<div class="run"><h3>{html.escape(run)}</h3><ul>'
        + "".join(f"<li>{html.escape(text)}</li>" for text in part["sentence"]) + "</ul></div>"
        for (run,), part in sentences.group_by(["run_id"], maintain_order=True))
    return f'<h2 class="section" id="run-by-run">Run by run</h2><div id="runs-explained">{blocks}</div>'


TABLE_LEGEND = ("step: median over steps of the slowest rank's step, or the device's step period where the "
                "device runs behind the host (the run's warning says so). "
                "% of step: the part summed over the ranks' profiled steps after each rank's first (the "
                "device time from one step's work ending to the next one's, gaps between steps included; the "
                "whole trace without ProfilerSteps) ÷ that time "
                "(exposed comm = communication not hidden under compute). Where the device's activity "
                f"spans under {SLIVER_PCT:g} % of the step, the shares describe that sliver, not the step, "
                f"and the table says so instead. {INFERRED_MARK}: rests on a fact read from the trace, not "
                "run.json or --meta (tokens per step from the token embedding's shapes, FLOPs per token from "
                "the recorded shapes, the world size from distributedInfo); hover for the basis. "
                f"({LOW_CONFIDENCE}): tokens/s, MFU and J/token rest on tokens per step inferred with low "
                "confidence (the embedding may not carry the tokens the step processes): left out of the "
                "decision card and the findings' rankings. CPU: a run whose traces hold no device events "
                "(its ranks are CPU ranks). ⚠ above 100 %: a share that cannot exceed 100 % does (hover for "
                "run_summary's warning).")


def _section_head(heading: str, sentences: list[str]) -> str:
    anchor = "-".join(heading.lower().split())
    items = "".join(f"<li>{html.escape(x)}</li>" for x in sentences)
    return f'<h2 class="section" id="{html.escape(anchor)}">{html.escape(heading)}</h2>' + \
        (f'<ul class="why">{items}</ul>' if items else "")


def kernels_table(kernels: pl.DataFrame) -> str:
    """The top-kernels table (kernel_summary): per card run, its kernels with the most GPU time."""
    if kernels is None or kernels.is_empty():
        return ""
    head = "".join(f"<th>{h}</th>" for h in ("run", "kernel (base name)", "kind", "family", "launches",
                                             "total time", "mean", "share of kernel time"))
    rows = "".join(
        "<tr>" + f"<td>{html.escape(str(r['run_id']))}</td>"
        + f'<td class="name" title="{html.escape(str(r["name"]))}">{html.escape(str(r["short_name"] or r["name"]))}</td>'
        + f"<td>{html.escape(str(r['kind']))}</td>"
        + f"<td>{html.escape(str(r['family']))}"
        + (f' <span class="base">({html.escape(BASIS_WORDS.get(r["family_basis"], str(r["family_basis"])))})</span>'
           if r.get("family_basis") else "") + "</td>"
        + f"<td>{r['launches']:,}</td><td>{html.escape(duration(r['total_ns']) or '–')}</td>"
        + f"<td>{html.escape(duration(r['mean_ns']) or '–')}</td>"
        + f"<td>{html.escape(share(r['time_pct_of_kernel_time']) or '–')}</td></tr>"
        for r in kernels.iter_rows(named=True))
    return (f'<h2 class="section" id="top-kernels">Top kernels</h2><div class="scroll"><table class="kernels">'
            f"<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>"
            f'<p class="legend">{html.escape(KERNELS_LEGEND)}</p>')


PROJECTION_HEADERS = ("sweep (layout family)", "measured GPU counts", "leave-one-out error (largest)",
                      "leave-one-out error per GPU count", "projection")


def projection_table(fits: pl.DataFrame) -> str:
    """The projection chart's table (reports/charts_projection.py fit_table): a row per sweep and layout
    family, its line drawn or, in words, why not; a failed fit is a row here, never a line."""
    if fits is None or fits.is_empty():
        return ""
    head = "".join(f"<th>{h}</th>" for h in PROJECTION_HEADERS)
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(text)}</td>" for text in (
            r["sweep"], r["gpu_counts"] or "none with steps",
            f"{r['loo_error_pct']:.1f} %" if r["loo_error_pct"] is not None else "–", r["loo_by_gpus"] or "–"))
        + ("<td>line and band drawn</td>" if r["drawn"] else
           f'<td class="misfit">not drawn: {html.escape(r["reason"])}</td>') + "</tr>"
        for r in fits.iter_rows(named=True))
    return (f'<div class="scroll"><table class="projection"><thead><tr>{head}</tr></thead>'
            f"<tbody>{rows}</tbody></table></div>")


BASIS_WORDS = {"op": "from its launching op", "name": "from its name"}
KERNELS_LEGEND = ("For the fastest run of each sweep at each GPU count (the decision card's runs): its kernels "
                  "with the most GPU time (query kernel_summary), summed over every rank and the whole trace; "
                  "share = that kernel's time ÷ the run's summed device-event time (concurrent kernels each "
                  "count, so it is a share of kernel time, not of the step). The family comes from the op that "
                  "launched the kernel, else from its base name; hover a name for the full one.")


def _anchor(text: str) -> str:
    return "-".join(text.lower().split())


def render(title: str, subtitle: str, runs: pl.DataFrame, findings: list[str],
           charts: list[tuple[str, str, str, dict]], notes: list[str], warnings: list[str] = (),
           sections: dict[str, tuple[str, list[str]]] | None = None,
           run_sentences: pl.DataFrame | None = None, card=None, kernels: pl.DataFrame | None = None,
           svgs: dict[str, str] | None = None, tables: dict[str, str] | None = None) -> str:
    """charts: (key, title, caption, Vega-Lite spec), numbered in order; warnings: shown above the
    findings; sections: chart key -> (heading, sentences) shown before that chart (the first of a
    report section); run_sentences: every run's own sentences, after the runs table (run_id, about,
    sentence); card: the decision card (reports/card.py), first; kernels: the top-kernels table's rows
    (kernel_summary); svgs: chart key -> static SVG, shown inside <noscript> (JavaScript off); tables:
    chart key -> an HTML table shown under that chart's caption."""
    from scaletrace.reports.card import card_html

    sections, svgs, tables = sections or {}, svgs or {}, tables or {}
    items = "".join(f"<li>{html.escape(f)}</li>" for f in findings) or "<li>No findings: too little data.</li>"
    toc = [("card", "Decision")] if card is not None else []
    toc += ([("sec-warnings", "Warnings")] if warnings else []) + [("sec-findings", "Findings"), ("sec-runs", "Runs")]
    toc += [("top-kernels", "Top kernels")] if kernels is not None and not kernels.is_empty() else []
    toc += [("run-by-run", "Run by run")] if run_sentences is not None and not run_sentences.is_empty() else []
    figures, body = [], []
    for n, (k, t, c, _) in enumerate(charts, 1):
        if k in sections:
            body.append(_section_head(*sections[k]))
            figures.append((_anchor(sections[k][0]), sections[k][0], None))
        figures.append((f"fig-{k}", f"{n}. {t}", n))
        static = (f'<noscript><div class="static">{svgs[k]}</div></noscript>' if k in svgs else
                  "<noscript><p class=\"note\">This chart needs JavaScript.</p></noscript>")
        body.append(f'<section class="chart" id="fig-{html.escape(k)}"><h2>{html.escape(f"{n}. {t}")}</h2>'
                    f'<div class="vega" id="chart-{html.escape(k)}"></div>{static}'
                    f'<p class="caption">{html.escape(c)}</p>{tables.get(k, "")}</section>')
    if notes:
        figures.append(("sec-notes", "Not shown", None))
    nav = "".join(f'<li><a href="#{html.escape(a)}">{html.escape(t)}</a></li>' for a, t in toc)
    nav_figs = "".join(f'<li class="{"fig" if n else "sec"}"><a href="#{html.escape(a)}">{html.escape(t)}</a></li>'
                       for a, t, n in figures)
    warn_items = "".join(f'<li class="warn">{html.escape(w)}</li>' for w in warnings)
    note_items = "".join(f'<li class="note">{html.escape(n)}</li>' for n in notes)
    specs = script_json({k: spec for k, _, _, spec in charts})
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>{STYLE}</style>
<script>{vega_bundle()}</script>
</head><body>
<h1>{html.escape(title)}</h1><p class="sub">{html.escape(subtitle)}</p>
<nav id="toc"><h2>Contents</h2><ol class="toc">{nav}</ol><ul class="toc figs">{nav_figs}</ul></nav>
{card_html(card) if card is not None else ''}
{f'<div id="sec-warnings"><h2>Warnings</h2><ul id="warnings">{warn_items}</ul></div>' if warnings else ''}
<div id="sec-findings"><h2>Findings</h2><ul id="findings">{items}</ul></div>
<div id="sec-runs"><h2>Runs</h2><div class="scroll">{summary_table(runs)}</div><p class="legend">{html.escape(TABLE_LEGEND)}</p></div>
{kernels_table(kernels)}
{run_sections(run_sentences) if run_sentences is not None else ''}
{"".join(body)}
{f'<div id="sec-notes"><h2>Not shown</h2><ul id="notes">{note_items}</ul></div>' if notes else ''}
<script type="application/json" id="specs">{specs}</script>
<script>
const specs = JSON.parse(document.getElementById("specs").textContent);
for (const [key, spec] of Object.entries(specs)) {{
  vegaEmbed("#chart-" + key, spec, {{actions: false, renderer: "svg"}})
    .catch(err => console.error("chart " + key + ": " + err));
}}
</script>
</body></html>
"""
