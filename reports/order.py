"""The one order of runs in every table and chart: workload, then GPU count numerically, then layout.

Run ids sort as text (w128, w16, w256); this key sorts by what the run is: its
sweep (run.json `workload`; runs without one last), its GPU count as a number,
its layout (tp, pp, cp as numbers, then the strategy label), and last the run
id, so equal runs keep one stable order.

>>> sort_runs(pl.DataFrame({"run_id": ["w16", "w128", "w2"], "workload": ["w"] * 3,
...                         "world_size": [16, 128, 2]}))["run_id"].to_list()
['w2', 'w16', 'w128']
"""

from __future__ import annotations

import math

import polars as pl

_LAST = math.inf


def _num(value) -> float:
    return _LAST if value is None else float(value)


def run_sort_key(row: dict) -> tuple:
    """The sort key of one run (a row of run_summary, scaling, layouts or the like): sweep (``workload``
    or ``sweep``; NULL last), world_size numerically, tp, pp, cp numerically, strategy, run_id."""
    sweep = row.get("workload", row.get("sweep"))
    if sweep == "(no workload)":
        sweep = None
    return (sweep is None, sweep or "", _num(row.get("world_size")), _num(row.get("tp")), _num(row.get("pp")),
            _num(row.get("cp")), row.get("strategy") or "", str(row.get("run_id") or ""))


def sort_runs(df: pl.DataFrame) -> pl.DataFrame:
    """``df``'s rows in run order (run_sort_key); the columns it lacks count as NULL."""
    if df.is_empty():
        return df
    keys = [run_sort_key(r) for r in df.iter_rows(named=True)]
    return df[sorted(range(df.height), key=keys.__getitem__)]


def run_order(df: pl.DataFrame) -> list[str]:
    """The distinct run ids of ``df`` in run order (a chart's ``sort=`` list)."""
    return list(dict.fromkeys(sort_runs(df)["run_id"].to_list()))


__all__ = ["run_order", "run_sort_key", "sort_runs"]
