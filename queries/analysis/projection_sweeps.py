"""The projection per sweep: fitting each sweep and layout family, leave-one-out, the table that
``scaletrace project`` prints, and the report's curve and knee (the model: queries/analysis/projection.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import math
from dataclasses import dataclass

import polars as pl

from scaletrace.queries.analysis.projection import (COLUMNS, MAX_PROJECTED_GPUS, MIN_SIZES, NO_WORKLOAD, UNRELIABLE_PCT, Fit,
                                                    NotIdentifiableError, Point, ProjectionError, WhatIf, fit, load_points,
                                                    parse_what_if, predict)

if TYPE_CHECKING:  # a Database is passed in: the analysis never opens one
    from scaletrace.pipeline.store.db import Database


# ---- the sweep-level table -----------------------------------------------------------------------

@dataclass
class Sweep:
    """One sweep's fitted model and what the table and the chart need from its measured runs."""

    workload: str
    family: str  # layout family: tp, pp, cp degrees and strategy label
    label: str  # the workload, with the family when the workload has several
    points: list[Point]
    model: Fit
    loo_error_pct: dict[int, float]  # measured N -> 100 · (LOO prediction − measured) ÷ measured
    notes: list[str]
    # the sweep's baseline (scaling's: its fewest GPUs, any layout): (GPUs, tokens/s), None when unknown
    sweep_base: tuple[int, float] | None = None

    @property
    def band_pct(self) -> float:
        """The largest leave-one-out error (absolute, %): the band drawn around projections."""
        return max(abs(v) for v in self.loo_error_pct.values())

    @property
    def fits(self) -> bool:
        """Whether the model fits its own runs: no leave-one-out error above UNRELIABLE_PCT.  A sweep
        that does not fit is not drawn (the chart says why) and its projected rows are marked."""
        return bool(self.band_pct <= UNRELIABLE_PCT)

    @property
    def misfit_reason(self) -> str | None:
        """Why the sweep is not projected (None when it fits): the one wording of the report's projection
        table, the chart's subtitle, the findings and `project`'s notes."""
        if self.fits:
            return None
        return (f"leave-one-out error {self.band_pct:.1f} % > {UNRELIABLE_PCT} %: the model does not explain "
                "these runs")

    @property
    def misfit_note(self) -> str:
        return f"not a prediction: {self.misfit_reason}"

    @property
    def base(self) -> Point:
        return self.points[0]


MAX_SKIPPED_LINES = 3  # more sweeps left out than this: `project`'s error is a summary (not_projected_line)


@dataclass(frozen=True)
class Skipped:
    """A sweep (or layout family) left out of the projection, and why; ``str()`` is its one line."""

    label: str  # the sweep's label (a run without a workload: "RUN (no workload)")
    sizes: tuple[int, ...]  # its measured GPU counts (runs with ProfilerSteps)
    reason: str  # "sizes": fewer than MIN_SIZES GPU counts; "tokens": no tokens per step

    @property
    def no_workload(self) -> bool:
        """A run without a workload label: a sweep of its own, of one GPU count."""
        return self.label.endswith(NO_WORKLOAD)

    def __str__(self) -> str:
        if self.reason == "tokens":
            return (f"{self.label}: no tokens_per_step (or global_batch_size and seq_len) in run.json: "
                    "throughput cannot be projected")
        n = len(self.sizes)
        return (f"{self.label}: projection not identifiable: {n} measured GPU count{'s' if n != 1 else ''} "
                f"({', '.join(map(str, self.sizes)) or 'none with steps'}); the model needs at least {MIN_SIZES}")


def fit_sweeps(db: Database, workload: str | None = None) -> tuple[list[Sweep], list[Skipped]]:
    """Every identifiable sweep's model (or ``workload``'s) and each sweep left out (``str()``: its line).
    NotIdentifiableError when ``workload`` is given and has fewer than three GPU counts."""
    sweeps, skipped = [], []
    loaded = load_points(db, workload)
    bases = _sweep_baselines(db)
    families = {}
    for name, family, *_ in loaded:
        families[name] = families.get(name, 0) + 1
    for name, family, scaling, points in loaded:
        sizes = sorted({p.n for p in points})
        label = f"{name} ({family})" if families[name] > 1 else name
        if len(sizes) < MIN_SIZES:
            skipped.append(Skipped(label, tuple(sizes), "sizes"))
            continue
        if any(not p.tokens_per_step for p in points):
            skipped.append(Skipped(label, tuple(sizes), "tokens"))
            continue
        layout = points[-1].layout
        gpn = max((p.gpus_per_node for p in points if p.gpus_per_node), default=None)
        model = fit(points, scaling, layout, gpn)
        if gpn is None:
            model.notes.append("gpus_per_node / num_nodes unknown: every group taken to be inside one node")
        loo = {}
        for i, p in enumerate(points):
            rest = points[:i] + points[i + 1:]
            pred = predict(fit(rest, scaling, layout, gpn), p.n)["step_time_ns"]
            loo[p.n] = 100 * (pred - p.step_ns) / p.step_ns
        sweeps.append(Sweep(name, family, label, points, model, loo, model.notes, bases.get(name)))
    if workload is not None and not sweeps:
        raise NotIdentifiableError("; ".join(map(str, skipped)))
    return sweeps, skipped


def _sweep_baselines(db: Database) -> dict[str, tuple[int, float]]:
    """Per workload, scaling's baseline run (fewest GPUs, any layout): (its GPUs, its tokens/s)."""
    scaling = db.query("scaling")
    if scaling.is_empty():
        return {}
    base = scaling.filter(pl.col("run_id") == pl.col("baseline_run"))
    return {r["sweep"]: (r["world_size"], r["tokens_per_s"]) for r in base.iter_rows(named=True)}


def _efficiency(scaling: str, tps: float, n: int, base_n: int, base_tps: float) -> float:
    """"Across runs" (docs/inputs.md): speedup ÷ (GPUs ÷ baseline GPUs) (strong), per-GPU tokens/s ratio (weak)."""
    return 100 * (tps / n) / (base_tps / base_n) if scaling == "weak" else 100 * (tps / base_tps) / (n / base_n)


def _row(sw: Sweep, n: int, pred: dict, what_if: WhatIf, base_tps: float, measured: Point | None) -> dict:
    f, base = sw.model, sw.base
    tokens = base.tokens_per_step / base.n * n if f.scaling == "weak" else base.tokens_per_step
    step = measured.step_ns if measured else pred["step_time_ns"]
    tps = (measured.tokens_per_step if measured else tokens) / (step / 1e9)
    eff = _efficiency(f.scaling, tps, n, base.n, base_tps)
    # against the sweep's baseline (scaling's scaling_efficiency_vs_sweep_baseline_pct); a what-if
    # scenario changes its own baseline, so it has only the layout baseline
    sweep_eff = (_efficiency(f.scaling, tps, n, *sw.sweep_base)
                 if sw.sweep_base and sw.sweep_base[1] and what_if == WhatIf() else None)
    # a measured row states run_summary's MFU (the run's own peak); a projection the largest measured run's
    top = sw.points[-1]
    mfu = (measured.mfu_pct if measured else
           100 * tps * top.flops_per_token / (n * top.peak_flops) if top.flops_per_token and top.peak_flops else None)
    parts = ({"compute_ns": measured.compute_ns, "comm_ns": measured.comm_ns,
              "exposed_comm_ns": measured.exposed_comm_ns} if measured else pred)
    notes = list(sw.notes)
    if not measured and f.gpus_per_node and n > f.gpus_per_node * max(p.nodes or 1 for p in sw.points):
        notes.append("more nodes than any measured run")
    if not measured and not sw.fits:
        notes.insert(0, sw.misfit_note)
    return {"workload": sw.workload, "layout_family": sw.family, "world_size": n,
            "num_nodes": math.ceil(n / f.gpus_per_node) if f.gpus_per_node else (measured.nodes if measured else None),
            "measured": measured is not None, "step_time_ns": step, "tokens_per_s": tps,
            "tokens_per_s_per_gpu": tps / n, "mfu_pct": mfu,
            "scaling_efficiency_vs_layout_baseline_pct": eff, "scaling_efficiency_vs_sweep_baseline_pct": sweep_eff,
            **{k: parts[k] for k in ("compute_ns", "comm_ns", "exposed_comm_ns")},
            "loo_error_pct": sw.loo_error_pct[n] if measured else sw.band_pct, "fits": sw.fits,
            "what_if": what_if.label,
            "predicted_step_time_ns": pred["step_time_ns"], "run_id": measured.run_id if measured else None,
            "notes": "; ".join(notes) or None}


def _check_sizes(sw: Sweep, to: list[int]) -> None:
    for n in to:
        if n > MAX_PROJECTED_GPUS:
            raise ProjectionError(f"{sw.label}: {n} GPUs is beyond the {MAX_PROJECTED_GPUS:,} GPUs scaletrace projects to")
        if n < 1 or n % sw.model.unit:
            raise ProjectionError(f"{sw.label}: {n} GPUs is not a positive multiple of tp × pp × cp = "
                                  f"{sw.model.unit} (the sweep's layout family)")


def sweep_rows(sw: Sweep, to: list[int], what_if: WhatIf | None = None) -> list[dict]:
    """The measured runs (measured values, in-sample prediction, LOO error) and the projections at ``to``
    (default 2× and 4× the largest measured count), then the same under ``what_if``."""
    to = sorted(set(to or [2 * sw.points[-1].n, 4 * sw.points[-1].n]))
    _check_sizes(sw, to)
    measured = {p.n: p for p in sw.points}
    base_tps = sw.base.tokens_per_step / (sw.base.step_ns / 1e9)
    rows = [_row(sw, p.n, predict(sw.model, p.n), WhatIf(), base_tps, p) for p in sw.points]
    rows += [_row(sw, n, predict(sw.model, n), WhatIf(), base_tps, None) for n in to if n not in measured]
    if what_if is not None:
        # against the same scenario's baseline: the what-if world's own scaling
        wb = predict(sw.model, sw.base.n, what_if)["step_time_ns"]
        wbase = sw.base.tokens_per_step / (wb / 1e9)
        rows += [_row(sw, n, predict(sw.model, n, what_if), what_if, wbase, None)
                 for n in sorted(set(measured) | set(to))]
    return rows


def project(db: Database, workload: str | None = None, to: list[int] | None = None,
            what_if: WhatIf | str | None = None) -> pl.DataFrame:
    """The projection table (README "Projection"): one row per sweep × GPU count × scenario.
    NotIdentifiableError when no sweep (or ``workload``) has three measured GPU counts."""
    if isinstance(what_if, str):
        what_if = parse_what_if(what_if)
    sweeps, skipped = fit_sweeps(db, workload)
    if not sweeps:
        raise NotIdentifiableError("; ".join(map(str, skipped)) if skipped else
                                   "projection not identifiable: no sweep (runs with a workload, tokens per "
                                   "step and ProfilerSteps) in the database", skipped)
    rows = [r for sw in sweeps for r in sweep_rows(sw, list(to or []), what_if)]
    return pl.DataFrame(rows, schema_overrides={"num_nodes": pl.Int64, "mfu_pct": pl.Float64,
                                                "scaling_efficiency_vs_sweep_baseline_pct": pl.Float64,
                                                "run_id": pl.String, "notes": pl.String},
                        infer_schema_length=None).select(COLUMNS)


def curve(sweeps: list[Sweep], factor: int = 4) -> pl.DataFrame:
    """The chart's points per sweep: GPU counts from the baseline to ``factor``× the largest measured
    (doubling, plus every measured count), predicted tokens/s with the LOO band, the ideal line, and
    the measured tokens/s where measured."""
    rows = []
    for sw in sweeps:
        base_tps = sw.base.tokens_per_step / (sw.base.step_ns / 1e9)
        sizes, n = {p.n for p in sw.points}, sw.base.n
        while n <= factor * sw.points[-1].n:
            sizes.add(n)
            n *= 2
        sizes = sorted(s for s in sizes | {factor * sw.points[-1].n} if s % sw.model.unit == 0)
        measured = {p.n: p for p in sw.points}
        for n in sizes:
            r = _row(sw, n, predict(sw.model, n), WhatIf(), base_tps, None)
            m = measured.get(n)
            rows.append({"sweep": sw.label, "world_size": n, "predicted_tps": r["tokens_per_s"],
                         # the step time off by ± the largest LOO error (at most −95 %)
                         "band_lo_tps": r["tokens_per_s"] / (1 + sw.band_pct / 100),
                         "band_hi_tps": r["tokens_per_s"] / max(1 - sw.band_pct / 100, 0.05),
                         "ideal_tps": base_tps * n / sw.base.n,
                         "measured_tps": m.tokens_per_step / (m.step_ns / 1e9) if m else None,
                         "band_pct": sw.band_pct, "max_measured": sw.points[-1].n, "fits": sw.fits,
                         "reason": sw.misfit_reason})
    return (pl.DataFrame(rows, schema_overrides={"measured_tps": pl.Float64, "reason": pl.String}) if rows
            else pl.DataFrame())


def knee(points: pl.DataFrame) -> int | None:
    """The GPU count beyond which each added GPU yields less than half its ideal throughput: the first
    n of the curve (one sweep, sorted) where (tps(next) − tps(n)) ÷ (next − n) < ½ · ideal tps per GPU."""
    rows = points.sort("world_size").to_dicts()
    for prev, cur in zip(rows, rows[1:]):
        ideal_per_gpu = (cur["ideal_tps"] - prev["ideal_tps"]) / (cur["world_size"] - prev["world_size"])
        if (cur["predicted_tps"] - prev["predicted_tps"]) / (cur["world_size"] - prev["world_size"]) < 0.5 * ideal_per_gpu:
            return prev["world_size"]
    return None
