"""The report's "Projection" chart and sentences: measured tokens/s, the model's curve to 4× the largest
measured GPU count with its leave-one-out band, the ideal line, and the knee (queries/analysis/projection.py).
"""

from __future__ import annotations

import altair as alt
import polars as pl

from scaletrace.pipeline.store.db import Database
from scaletrace.reports.chartkit import HEIGHT, WIDTH, data, gpus_axis, sweep_colour
from scaletrace.queries.analysis.projection import MIN_SIZES, NO_WORKLOAD, ProjectionError
from scaletrace.queries.analysis.projection_sweeps import Skipped, Sweep, curve, fit_sweeps, knee
from scaletrace.reports.words import count, gpus, listing

FACTOR = 4  # the curve runs to this many times the largest measured GPU count
MAX_NAMED = 4  # runs without a workload named in the not-projected line (then "and N more")


def fitted_sweeps(db: Database) -> tuple[list, list[Skipped | str]]:
    """fit_sweeps of every sweep, and those left out (a line of text when the projection failed as a whole)."""
    try:
        return fit_sweeps(db)
    except ProjectionError as exc:
        return [], [str(exc)]


def projection_data(db: Database, fitted: tuple | None = None) -> tuple[pl.DataFrame, list[Skipped | str]]:
    """The chart's curve (queries.analysis.projection.curve) of every identifiable sweep, and the sweeps that
    could not be projected (a line of text when the projection failed as a whole); ``fitted``:
    :func:`fitted_sweeps`' answer when already computed."""
    sweeps, skipped = fitted if fitted is not None else fitted_sweeps(db)
    return (curve(sweeps, FACTOR) if sweeps else pl.DataFrame()), skipped


def fit_table(sweeps: list[Sweep], skipped: list[Skipped | str]) -> pl.DataFrame:
    """The table under the projection chart: one row per sweep and layout family with a workload, in
    FIT_SCHEMA: its measured GPU counts, the leave-one-out error of each and the largest (the band),
    and whether its line is drawn, else why not (Sweep.misfit_reason: the subtitle's and the findings'
    words; a sweep the model cannot be fitted to: Skipped's)."""
    rows = [{"sweep": sw.label, "gpu_counts": ", ".join(str(p.n) for p in sw.points), "points": len(sw.points),
             "loo_error_pct": sw.band_pct,
             "loo_by_gpus": "; ".join(f"{gpus(n)}: {_signed(e)} %" for n, e in sorted(sw.loo_error_pct.items())),
             "drawn": sw.fits, "reason": sw.misfit_reason} for sw in sweeps]
    rows += [{"sweep": s.label, "gpu_counts": ", ".join(map(str, s.sizes)), "points": len(s.sizes),
              "loo_error_pct": None, "loo_by_gpus": None, "drawn": False, "reason": _skipped_reason(s)}
             for s in skipped if isinstance(s, Skipped) and not s.no_workload]
    return pl.DataFrame(rows, schema=FIT_SCHEMA)


def _signed(pct: float) -> str:
    """'+67.0', '−84.4', '0.0' (no sign on what rounds to zero)."""
    text = f"{abs(pct):.1f}"
    return text if float(text) == 0 else ("+" if pct > 0 else "−") + text


FIT_SCHEMA = {"sweep": pl.String, "gpu_counts": pl.String, "points": pl.Int64, "loo_error_pct": pl.Float64,
              "loo_by_gpus": pl.String, "drawn": pl.Boolean, "reason": pl.String}


def _skipped_reason(s: Skipped) -> str:
    if s.reason == "tokens":
        return "no tokens_per_step (or global_batch_size and seq_len) in run.json: throughput cannot be projected"
    return (f"{count(len(s.sizes), 'measured GPU count')}: the model needs at least {MIN_SIZES} "
            "(not identifiable)")


def misfit_words(df: pl.DataFrame) -> list[str]:
    """Why each sweep whose model does not fit its own runs is not drawn, one line each (its reason)."""
    if df.is_empty() or "fits" not in df.columns:
        return []
    rows = df.filter(~pl.col("fits")).group_by("sweep", maintain_order=True).agg(pl.col("reason").first())
    return [line for r in rows.iter_rows(named=True)
            for line in (f"{r['sweep']}: not drawn:", f"  {r['reason']}")]


def build_projection(df: pl.DataFrame) -> alt.LayerChart:
    """df: projection_data's curve (one row per sweep × GPU count).  A sweep whose leave-one-out error
    exceeds UNRELIABLE_PCT (Sweep.fits) keeps its measured points; its line and band are not drawn and the subtitle
    says why, in words."""
    x = gpus_axis(df)
    y_scale = alt.Scale(type="log")
    fitted = df.filter(pl.col("fits")) if "fits" in df.columns else df
    band = alt.Chart(data(fitted)).mark_area(opacity=0.18).encode(
        x=x, y=alt.Y("band_lo_tps:Q", title="tokens/s (whole job, log scale)", scale=y_scale,
                                    axis=alt.Axis(format="~s")),
        y2="band_hi_tps:Q", color=sweep_colour())
    ideal = alt.Chart(data(fitted)).mark_line(strokeDash=[6, 4], color="gray").encode(
        x=x, y=alt.Y("ideal_tps:Q", scale=y_scale), detail="sweep:N")
    predicted = alt.Chart(data(fitted)).mark_line().encode(
        x=x, y=alt.Y("predicted_tps:Q", scale=y_scale), color=sweep_colour(),
        tooltip=["sweep:N", "world_size:Q", alt.Tooltip("predicted_tps:Q", format=",.0f"),
                 alt.Tooltip("band_pct:Q", title="LOO error (±%)", format=".1f")])
    measured = alt.Chart(data(df.filter(pl.col("measured_tps").is_not_null()))).mark_point(
        filled=True, size=60, opacity=0.9).encode(
        x=x, y=alt.Y("measured_tps:Q", title="tokens/s (whole job, log scale)", scale=y_scale,
                     axis=alt.Axis(format="~s")), color=sweep_colour(),
        tooltip=["sweep:N", "world_size:Q", alt.Tooltip("measured_tps:Q", format=",.0f")])
    edge = alt.Chart(data(fitted.select("sweep", "max_measured").unique())).mark_rule(
        color="#999", strokeDash=[2, 2]).encode(x="max_measured:Q")
    # the points first: the shared colour legend takes its symbols from the first layer; no empty
    # layers (Vega warns of an infinite extent) when no sweep fits
    layers = [measured] + ([predicted, ideal, edge, band] if not fitted.is_empty() else [])
    return alt.layer(*layers).properties(
        title=alt.TitleParams(f"Projected throughput to {FACTOR}× the largest measured GPU count",
                              subtitle=["points: measured; line: model; band: leave-one-out error; dashed: ideal; "
                                        "dotted: largest measured", *misfit_words(df)]), width=WIDTH, height=HEIGHT)


def not_projected_line(skipped: list[Skipped | str], projected: list[str]) -> str | None:
    """One line for the whole report: which sweeps were projected and why the others were not
    (runs without a workload counted together, each other sweep named with its GPU counts)."""
    if not skipped:
        return None
    alone = [s.label.removesuffix(NO_WORKLOAD) for s in skipped if isinstance(s, Skipped) and s.no_workload]
    few = [s for s in skipped if isinstance(s, Skipped) and not s.no_workload and s.reason == "sizes"]
    tokens = [s.label for s in skipped if isinstance(s, Skipped) and s.reason == "tokens" and not s.no_workload]
    why = [str(s) for s in skipped if not isinstance(s, Skipped)]
    if alone:
        named = ", ".join(alone[:MAX_NAMED]) + (f" and {len(alone) - MAX_NAMED} more" if len(alone) > MAX_NAMED else "")
        why.append(f"{count(len(alone), 'run')} without a workload in run.json, each a sweep of one GPU count "
                   f"({named})")
    if few:
        why.append(listing([f"{s.label} ({count(len(s.sizes), 'measured GPU count')}"
                            f"{': ' + ', '.join(map(str, s.sizes)) if s.sizes else ', none with steps'})"
                            for s in few]))
    if tokens:
        why.append(f"{listing(tokens)} without tokens_per_step (or global_batch_size and seq_len) in run.json")
    head = (f"Projection: {listing(projected)} {'is' if len(projected) == 1 else 'are'} projected; not projected: "
            if projected else "Projection: no sweep could be projected: ")
    needs = (f"; the model needs at least {MIN_SIZES} measured GPU counts per sweep"
             if alone or few else "")
    return f"{head}{'; '.join(why)}{needs}."


def projection_sentences(df: pl.DataFrame, skipped: list[Skipped | str]) -> list[str]:
    """Per projected sweep: the knee, or that none is predicted within FACTOR× the largest measured count;
    then one line for the sweeps left out (not_projected_line)."""
    out = []
    fitted = df.filter(pl.col("fits")) if "fits" in df.columns else df
    projected = fitted["sweep"].unique(maintain_order=True).to_list() if not fitted.is_empty() else []
    line = not_projected_line(skipped, projected)
    if df.is_empty():
        return [line] if line else []
    for (sweep,), part in df.group_by(["sweep"], maintain_order=True):
        top = int(part["max_measured"][0])
        band = float(part["band_pct"][0])
        k = knee(part)
        basis = (f"(model fitted on {part['measured_tps'].is_not_null().sum()} measured GPU counts; "
                 f"leave-one-out error up to {band:.1f} %)")
        if not part["fits"][0]:
            out.append(f"{sweep}: not projected: {part['reason'][0]}; no line is drawn and no knee is claimed "
                       "(the projection chart's table; `scaletrace project` marks its rows \"not a prediction\").")
        elif k is None:
            out.append(f"{sweep}: no knee predicted up to {gpus(FACTOR * top)} ({FACTOR}× the largest measured "
                       f"count): each added GPU keeps yielding at least half its ideal throughput {basis}.")
        else:
            where = ("within the measured runs" if k < top else "the largest measured count" if k == top
                     else "beyond the measured runs")
            out.append(f"{sweep}: projected knee at {gpus(k)} ({where}): beyond it each added GPU yields less "
                       f"than half its ideal throughput {basis}.")
    return out + ([line] if line else [])
