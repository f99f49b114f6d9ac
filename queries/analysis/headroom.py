"""Overlap headroom: per sweep and process group, communication time per step against the compute
still to run when it starts, measured (query overlap_headroom) and projected (queries/analysis/projection.py).

headroom = hideable compute ÷ communication.  Above 1 a group's communication fits under the compute
that follows its first collective of the step; below 1 it is longer, and the excess is exposed.
Strong scaling shrinks the compute per GPU while a ring collective's time stays or grows, so the
headroom falls towards 1 before exposed communication appears: the knee shows one GPU count early.

Projected, for the layout family of the fastest run at a sweep's largest measured GPU count, from
that run's measured figures carried by the fitted model (:class:`queries.analysis.projection.Fit`):

* hideable compute(N) = measured hideable × compute(N) ÷ compute(L), compute(N) = a + b/N (the
  share of the step's compute left when the group starts stays what it was);
* communication(N) = measured communication − T(L) + T(N), T = Σ over the group's collective
  types of instances per step × the α–β transfer at N (waiting for slower peers carried as the
  measured constant);

so the projected line starts at the measured value at L.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from scaletrace.queries.analysis.projection import _dim, transfer

if TYPE_CHECKING:  # a Database is passed in: the analysis never opens one
    from scaletrace.pipeline.store.db import Database

FACTORS = (2, 4)  # projected at these multiples of the largest measured GPU count
COLUMNS = ["sweep", "world_size", "run_id", "process_group", "collectives", "basis", "comm_per_step_ns",
           "hideable_compute_per_step_ns", "headroom_ratio"]
MEASURED, PROJECTED = "measured", "projected"


def _label(desc, name) -> str:
    return desc or name or "unnamed group"


def _group_keys(db: Database, run_id: str, layout: dict, world: int, model) -> dict[str, set]:
    """process group label -> the projection's collective keys (collective, dimension) of ``run_id``."""
    keys: dict[str, set] = {}
    for c in db.query("run_collective_fit", run_id=run_id).iter_rows(named=True):
        n = int(c["group_size"] or world)
        key = (c["collective"], _dim(c["pg_desc"], n, layout, world))
        if n >= 2 and c["transfer_ns"] and key in model.keys:
            keys.setdefault(_label(c["pg_desc"], c["pg_name"]), set()).add(key)
    return keys


def _comm(model, keys: set, n: int) -> float:
    return sum(model.keys[k]["count"] * transfer(model, k, n)[0] for k in keys)


def _compute(model, n: int) -> float:
    a, b = model.compute
    return a + b / n


def projected(db: Database, measured: pl.DataFrame, sweeps) -> list[dict]:
    """Projected rows (see the module docstring) of each fitted sweep whose fastest run at its largest
    measured count is the largest measured run of that family; ``measured``: headroom rows of the best runs."""
    rows = []
    for sw in sweeps:
        top = sw.points[-1]
        m = measured.filter(pl.col("run_id") == top.run_id)
        if m.is_empty():
            continue
        keys = _group_keys(db, top.run_id, top.layout, top.n, sw.model)
        for r in m.iter_rows(named=True):
            group_keys = keys.get(r["process_group"])
            if not group_keys or not r["comm_per_step_ns"]:
                continue
            base_t, base_c = _comm(sw.model, group_keys, top.n), _compute(sw.model, top.n)
            for factor in FACTORS:
                n = factor * top.n
                if n % sw.model.unit:
                    continue
                comm = max(r["comm_per_step_ns"] - base_t + _comm(sw.model, group_keys, n), 0.0)
                hide = r["hideable_compute_per_step_ns"] * _compute(sw.model, n) / base_c if base_c else 0.0
                rows.append({"sweep": r["sweep"], "world_size": n, "run_id": None,
                             "process_group": r["process_group"], "collectives": r["collectives"],
                             "basis": PROJECTED, "comm_per_step_ns": comm, "hideable_compute_per_step_ns": hide,
                             "headroom_ratio": hide / comm if comm else None})
    return rows


def headroom_table(db: Database, best: pl.DataFrame, sweeps=()) -> pl.DataFrame:
    """overlap_headroom of ``best`` (run_id, sweep, world_size: the fastest run of each sweep at each GPU
    count) plus the projected rows of ``sweeps`` (queries.analysis.projection_sweeps.fit_sweeps), in COLUMNS."""
    q = db.query("overlap_headroom")
    if q.is_empty() or best.is_empty():
        return pl.DataFrame()
    measured = (q.drop("workload", "world_size").rename({"collectives_seen": "collectives"})
                .join(best.select("run_id", "sweep", "world_size"), on="run_id")
                .with_columns(basis=pl.lit(MEASURED)))
    if measured.is_empty():
        return pl.DataFrame()
    # a sweep whose model does not fit its own runs (leave-one-out error over 50 %) projects nothing
    rows = projected(db, measured, [s for s in sweeps if s.fits and s.workload in set(measured["sweep"].to_list())])
    out = measured.select(COLUMNS).with_columns(pl.col("world_size").cast(pl.Int64))
    if rows:
        out = pl.concat([out, pl.DataFrame(rows, schema=out.schema)])
    return out.sort(["sweep", "process_group", "world_size"])


__all__ = ["headroom_table", "projected"]
