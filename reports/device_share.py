"""When a run's device activity is a sliver of its step: the one rule, and its words.

The numbers are query ``run_device_share``'s (device busy time and span per profiled step,
÷ the step time); this module decides which runs are slivers and says so.  The runs table
(reports/html.py), the step-time charts (reports/charts_step.py) and the run sentences of
``scaletrace explain`` and the report (reports/run_explain.py) all take their words from here.

Why the span: the step's shares (run_summary's compute_pct, ...) are shares of the device span,
so they describe the step only when the span covers it.  A run whose span covers the step but
whose device is mostly idle is not a sliver: its breakdown says "idle", truly (the MI250 trace:
busy 3 % of the step, span 190 %).  A run whose span is a small part of the step (the Triton
trace: 1.76 µs of kernels in a 13.3 s step) would be drawn as a 13.3 s step of pure compute.
"""

from __future__ import annotations

import polars as pl

from scaletrace.reports.words import duration, present

SLIVER_PCT = 10.0  # device span under this % of the step time: the breakdown describes a sliver


def is_sliver(row: dict) -> bool:
    """run_device_share row -> whether its device span is under SLIVER_PCT % of its step time."""
    pct = row.get("device_span_pct_of_step_time")
    return present(pct) and pct < SLIVER_PCT


def sliver_words(row: dict, ranks: int | None = None) -> str | None:
    """'the GPU was busy 1.76 µs of a 13.3 s step: the breakdown describes that sliver' (None: not a
    sliver).  ``ranks``: ranks traced (several: 'the GPUs were busy … per step, mean over ranks')."""
    if not is_sliver(row):
        return None
    several = (ranks or 1) > 1
    who = ("the traced CPU threads were" if row.get("cpu_only")
           else "the GPUs were" if several else "the GPU was")
    busy, span, step = (duration(row[c]) for c in ("device_busy_ns", "device_span_ns", "step_time_ns"))
    window = f" within a {span} span" if span != busy else ""
    mean = " (mean over ranks)" if several else ""
    return f"{who} busy {busy}{window} of a {step} step{mean}: the breakdown describes that sliver"


def cpu_only_runs(db) -> list[str]:
    """The runs whose traces hold no device events (run_summary.cpu_only, for callers without its row;
    the connection computes run_summary once): their ranks are CPU ranks (words.gpus)."""
    summary = db.query("run_summary")
    return summary.filter(pl.col("cpu_only"))["run_id"].to_list() if "cpu_only" in summary.columns else []


def sliver_notes(share: pl.DataFrame, ranks: dict[str, int] | None = None) -> dict[str, str]:
    """run_id -> sliver_words, for the runs of ``share`` (run_device_share rows) that are slivers."""
    ranks = ranks or {}
    out = {}
    for row in share.iter_rows(named=True):
        words = sliver_words(row, ranks.get(row["run_id"]))
        if words:
            out[row["run_id"]] = words
    return out


__all__ = ["SLIVER_PCT", "cpu_only_runs", "is_sliver", "sliver_notes", "sliver_words"]
