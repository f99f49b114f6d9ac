"""Project scaling: step time, throughput and efficiency at GPU counts not yet run (README "Projection").

Per sweep (runs sharing run.json ``workload``, one layout family), from its measured runs:

* compute per step of the slowest rank: strong scaling a + b/N, weak scaling constant;
* per collective type × parallel dimension: an α–β ring model on the transfer time (waiting
  excluded), t = α·steps(n) + S·factor(n)·β with nccl-tests' factors (pipeline/synth.py
  ``ring_factor`` / ``ring_steps``), α and β (1 / bus bandwidth) shared by every collective and
  fitted separately for groups inside one node and groups spanning nodes; without message sizes
  (CPU gloo traces) a per-collective t = α·steps(n) + γ·factor(n);
* overlap: the collectives that start under compute hide under the share of the step's compute
  still to run when the first of them starts (measured, carried as a fraction); exposed = what does
  not fit;
* waiting of the slowest rank: constant, or growing with log2 N when the data says so;
* the rest of the step (idle, memory, other) constant.

The model is a set of numbers (:class:`Fit`) fitted by :func:`fit` and evaluated by :func:`predict`;
:mod:`queries.analysis.projection_sweeps` fits each sweep and returns the polars table and the chart's points.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import itertools
import math
import re
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from scaletrace.queries.analysis.costmodel import ring_factor, ring_steps

if TYPE_CHECKING:  # a Database is passed in: the analysis never opens one
    from scaletrace.pipeline.store.db import Database

MIN_SIZES = 3  # fewer measured GPU counts: the projection is not identifiable
MAX_PROJECTED_GPUS = 2**24  # a GPU count beyond this (16,777,216) is a typo, not a cluster
WHAT_IF_RANGE = (1e-3, 1e3)  # a --what-if factor outside it is a typo (1e-320 would divide to infinity)
NO_WORKLOAD = " (no workload)"  # after the run id: a run without a workload label, a sweep of its own
OVERLAP_MIN_RATIO = 0.05  # a collective with less compute than this share after its start is not overlapped
DIMS_INNER_TO_OUTER = ("tp", "cp", "dp", "pp")  # rank order of the layout (torchtitan's mesh: pp, dp, cp, tp)
DIM_WORDS = {"tp": ("tp", "tensor"), "cp": ("cp", "context"), "pp": ("pp", "pipe", "pipeline"),
             "dp": ("dp", "data", "fsdp", "shard", "replicate", "ddp")}
COLUMNS = ["workload", "layout_family", "world_size", "num_nodes", "measured", "step_time_ns", "tokens_per_s",
           "tokens_per_s_per_gpu", "mfu_pct", "scaling_efficiency_vs_layout_baseline_pct",
           "scaling_efficiency_vs_sweep_baseline_pct", "compute_ns", "comm_ns", "exposed_comm_ns", "loo_error_pct",
           "fits", "what_if", "predicted_step_time_ns",
           "run_id", "notes"]
UNRELIABLE_PCT = 50  # a leave-one-out error above this: the model does not fit its runs (not drawn, marked)


class ProjectionError(ValueError):
    """Bad input to a projection: an unknown workload, a GPU count the layout cannot take, a bad what-if."""


class NotIdentifiableError(ProjectionError):
    """Fewer than three measured GPU counts: the model's parameters cannot be told apart.
    ``skipped``: the sweeps left out and why (projection_sweeps.Skipped), for a caller to word."""

    def __init__(self, message: str, skipped: tuple = ()):
        super().__init__(message)
        self.skipped = tuple(skipped)


@dataclass(frozen=True)
class WhatIf:
    """Hardware changes applied to the fitted model: compute F× faster, inter-node bandwidth × F."""

    compute: float = 1.0
    network: float = 1.0

    @property
    def label(self) -> str:
        parts = [f"{k}={v:g}" for k, v in (("compute", self.compute), ("network", self.network)) if v != 1]
        return ",".join(parts) or "none"


def parse_what_if(text: str | None) -> WhatIf | None:
    """'compute=2,network=0.5' -> WhatIf; ProjectionError for anything else."""
    if not text:
        return None
    values = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        key = key.strip()
        if key not in ("compute", "network"):
            raise ProjectionError(f"--what-if: unknown knob {key!r} (compute=F, network=F)")
        try:
            values[key] = float(value)
        except ValueError:
            raise ProjectionError(f"--what-if: {key} wants a number, got {value!r}") from None
        if not values[key] > 0 or not math.isfinite(values[key]):
            raise ProjectionError(f"--what-if: {key} must be a positive factor, got {value}")
        low, high = WHAT_IF_RANGE
        if not low <= values[key] <= high:
            raise ProjectionError(f"--what-if: {key} must be a factor between {low:g} and {high:g}, got {value}")
    return WhatIf(**values)


@dataclass
class Coll:
    """One collective type × parallel dimension in one measured run (per step of one rank)."""

    key: tuple[str, str]  # (collective, dimension: tp / cp / pp / dp / world / n<size>)
    n: int  # group size
    count: float  # instances per step
    bytes: float | None  # message size S (algbw's); None: the trace has no sizes
    transfer_ns: float  # median transfer of one instance (waiting excluded)
    room: float | None  # compute after its start ÷ the step's compute


@dataclass
class Point:
    """One measured run, the numbers the model is fitted on (per step; slowest rank)."""

    run_id: str
    n: int
    nodes: int | None
    step_ns: float
    tokens_per_step: float
    compute_ns: float
    comm_ns: float
    exposed_comm_ns: float
    wait_ns: float
    colls: list[Coll]
    flops_per_token: float | None = None
    peak_flops: float | None = None  # run_summary's peak_flops_per_gpu: one peak per run, every command
    layout: dict[str, int] = field(default_factory=dict)
    gpus_per_node: int | None = None  # run.json gpus_per_node, else world_size ÷ num_nodes
    mfu_pct: float | None = None  # run_summary's: a measured row states the run's own MFU


@dataclass
class Fit:
    scaling: str
    unit: int  # tp × pp × cp: GPU counts are multiples of it
    layout: dict[str, int]
    gpus_per_node: int | None
    compute: tuple[float, float]  # a, b: compute = a + b / N (weak: b = 0)
    link: dict[str, tuple[float, float]]  # 'intra' / 'inter' -> (α ns per step, β ns per byte)
    unsized: dict[tuple, tuple[float, float]]  # key -> (α ns per step, γ ns) for keys without sizes
    keys: dict[tuple, dict]  # key -> count, bytes, room
    capacity: float  # share of compute after the first overlapped collective starts
    other_ns: float
    wait: tuple[str, float, float]  # ('constant' | 'log2', w0, w1): wait = w0 + w1·log2 N
    notes: list[str] = field(default_factory=list)


# ---- reading the measured runs ---------------------------------------------------------------------

def _dim(desc: str | None, size: int, layout: dict[str, int], world: int) -> str:
    """The parallel dimension of a process group: named in its description, else the degree its size equals."""
    text = (desc or "").lower()
    for dim, words in DIM_WORDS.items():
        if any(re.search(rf"(?<![a-z]){w}(?![a-z])", text) for w in words):
            return dim
    for dim in ("dp", "tp", "cp", "pp"):
        if layout.get(dim, 1) > 1 and size == layout[dim]:
            return dim
    if size == world:  # every rank: the data-parallel group when the layout has no other dimension
        return "dp" if layout["tp"] * layout["pp"] * layout["cp"] == 1 else "world"
    return f"n{size}"


def _layout(row: dict) -> dict[str, int]:
    tp, pp, cp = (int(row.get(k) or 1) for k in ("tp", "pp", "cp"))
    return {"tp": tp, "pp": pp, "cp": cp, "dp": int(row.get("dp") or row["world_size"] // (tp * pp * cp))}


def _family(row: dict) -> str:
    """A layout family: the fixed degrees (tp, pp, cp) and the strategy label (run.json labels.layout)."""
    lay = _layout(row)
    return f"tp{lay['tp']}-pp{lay['pp']}-cp{lay['cp']}" + (f" {row['strategy']}" if row.get("strategy") else "")


def load_points(db: Database, workload: str | None = None) -> list[tuple[str, str, str, list[Point]]]:
    """Per sweep and layout family: (workload, family, scaling, measured runs), one run per GPU count
    (the fastest), in GPU-count order."""
    summary = db.query("run_summary").filter(pl.col("step_time_ns").is_not_null())
    # a run without a workload label is a sweep of its own (one GPU count: not identifiable, said so)
    summary = summary.with_columns(workload=pl.col("workload").fill_null(pl.col("run_id") + NO_WORKLOAD))
    topology = db.query("run_topology")
    if workload is not None:
        if workload not in topology["workload"].to_list():
            raise ProjectionError(f"no workload {workload!r} in {db.path}")
        summary = summary.filter(pl.col("workload") == workload)
    extra = topology.select("run_id", "gpus_per_node", "strategy")
    steps = db.query("rank_step_breakdown")
    fits = db.query("run_collective_fit")
    waits = db.query("rank_wait")
    rows = summary.join(extra, on="run_id", how="left").sort(["workload", "world_size", "tokens_per_s"],
                                                              descending=[False, False, True]).to_dicts()
    groups: dict[tuple[str, str], dict[int, dict]] = {}
    for r in rows:
        groups.setdefault((r["workload"], _family(r)), {}).setdefault(r["world_size"], r)  # fastest per count
    out = []
    for (sweep, family), by_size in groups.items():
        runs = [by_size[n] for n in sorted(by_size)]
        points = [p for p in (_point(r, steps, fits, waits) for r in runs) if p]
        out.append((sweep, family, runs[-1]["scaling"] or "strong", points))
    return out


def _point(row: dict, steps: pl.DataFrame, fits: pl.DataFrame, waits: pl.DataFrame) -> Point | None:
    run = row["run_id"]
    s = steps.filter(pl.col("run_id") == run)
    if s.is_empty():
        return None
    per_rank = s.group_by("rank").agg(pl.col("compute_ns", "comm_ns", "exposed_comm_ns").median(),
                                      n_steps=pl.len())
    slow = per_rank.sort(["compute_ns", "rank"], descending=[True, False]).row(0, named=True)
    w = waits.filter((pl.col("run_id") == run) & (pl.col("rank") == slow["rank"]))
    wait = (w["exposed_wait_ns"][0] / slow["n_steps"]) if not w.is_empty() else 0.0
    layout, world = _layout(row), row["world_size"]
    colls = []
    for c in fits.filter(pl.col("run_id") == run).iter_rows(named=True):
        n = int(c["group_size"] or world)  # no group size (gloo traces): the default group, every rank
        if n < 2 or not c["transfer_ns"]:
            continue
        colls.append(Coll((c["collective"], _dim(c["pg_desc"], n, layout, world)), n, c["instances_per_step_ratio"],
                          c["message_bytes"], c["transfer_ns"], c["room_ratio"]))
    gpn = row.get("gpus_per_node") or (world // row["num_nodes"] if row.get("num_nodes") else None)
    nodes = row.get("num_nodes") or (math.ceil(world / gpn) if gpn else None)
    return Point(run, world, nodes, row["step_time_ns"], row["tokens_per_step"], slow["compute_ns"],
                 slow["comm_ns"], slow["exposed_comm_ns"], wait, colls, row["flops_per_token"],
                 row["peak_flops_per_gpu"], layout, gpn, row["mfu_pct"])


# ---- fitting -------------------------------------------------------------------------------------

def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative least squares for a few columns: the best non-negative solution over every
    subset of the columns (exact; 2^k small solves, k ≤ 4 here)."""
    k = a.shape[1]
    best, best_res = np.zeros(k), float(np.sum(b * b))
    for size in range(1, k + 1):
        for cols in itertools.combinations(range(k), size):
            x, *_ = np.linalg.lstsq(a[:, cols], b, rcond=None)
            if np.any(x < 0):
                continue
            res = float(np.sum((a[:, cols] @ x - b) ** 2))
            if res < best_res - 1e-12 * max(best_res, 1):
                best, best_res = np.zeros(k), res
                best[list(cols)] = x
    return best


def degree(dim: str, n_world: int, fit: Fit) -> int:
    """The group size of a dimension at N GPUs: dp and world grow with N, tp / cp / pp (and a group
    of no known dimension, 'n<size>') keep their size."""
    if dim == "dp":
        return n_world // fit.unit
    if dim == "world":
        return n_world
    return fit.layout[dim] if dim in fit.layout else int(dim[1:])


def spans_nodes(dim: str, group: int, n_world: int, fit: Fit) -> bool:
    """A group spans nodes when its ranks (its degree × the degrees of the dimensions inside it) do not
    fit in one node (``gpus_per_node`` unknown: every group is inside one node)."""
    if fit.gpus_per_node is None:
        return False
    if dim == "world":
        return n_world > fit.gpus_per_node
    if dim not in DIMS_INNER_TO_OUTER:
        return group > fit.gpus_per_node
    inner = math.prod(fit.layout[d] for d in DIMS_INNER_TO_OUTER[:DIMS_INNER_TO_OUTER.index(dim)])
    return group * inner > fit.gpus_per_node


def fit(points: list[Point], scaling: str, layout: dict[str, int], gpus_per_node: int | None) -> Fit:
    """The model's parameters from the measured runs (see the module docstring and the README)."""
    unit = layout["tp"] * layout["pp"] * layout["cp"]
    notes = []
    n = np.array([p.n for p in points], float)
    comp = np.array([p.compute_ns for p in points], float)
    if scaling == "weak":
        compute = (float(np.mean(comp)), 0.0)
    else:
        a, b = nnls(np.column_stack([np.ones_like(n), 1 / n]), comp)
        compute = (float(a), float(b))
    shell = Fit(scaling, unit, layout, gpus_per_node, compute, {}, {}, {}, 0.0, 0.0, ("constant", 0.0, 0.0), notes)
    keys: dict[tuple, list[Coll]] = {}
    for p in points:
        for c in p.colls:
            keys.setdefault(c.key, []).append(c)
    info = {}
    for key, cs in keys.items():
        sizes = [c.bytes for c in cs]
        rooms = [c.room for c in cs if c.room is not None]
        info[key] = {"count": float(np.median([c.count for c in cs])),
                     "bytes": float(np.median(sizes)) if all(s for s in sizes) else None,
                     "room": float(np.median(rooms)) if rooms else 0.0}
    shell.keys = info
    shell.link = _fit_links(points, shell)
    shell.unsized = _fit_unsized(keys, info, notes)
    overlapped = [v["room"] for v in info.values() if v["room"] >= OVERLAP_MIN_RATIO]
    shell.capacity = max(overlapped, default=0.0)
    shell.other_ns = float(np.mean([p.step_ns - p.compute_ns - p.exposed_comm_ns for p in points]))
    shell.wait = _wait_rule(points, notes)
    return shell


def _fit_links(points: list[Point], f: Fit) -> dict[str, tuple[float, float]]:
    rows, t = [], []
    for p in points:
        for c in p.colls:
            if f.keys[c.key]["bytes"] is None or c.bytes is None:
                continue
            inter = spans_nodes(c.key[1], c.n, p.n, f)
            x = [ring_steps(c.key[0], c.n), c.bytes * ring_factor(c.key[0], c.n)]
            rows.append(x + [0, 0] if not inter else [0, 0] + x)
            t.append(c.transfer_ns)
    if not rows:
        return {"intra": (0.0, 0.0), "inter": (0.0, 0.0)}
    a, t = np.array(rows, float), np.array(t, float)
    w = 1 / t  # relative error: small collectives count as much as large ones
    has_intra, has_inter = a[:, :2].any(), a[:, 2:].any()
    if has_inter and not has_intra:
        a = a[:, [2, 3, 0, 1]]  # the fitted class goes first below
    distinct = len({tuple(r) for r in a[:, 2:][a[:, 2:].any(axis=1)]}) if has_inter and has_intra else 0
    if has_inter and has_intra and distinct < 2:
        # one inter-node point cannot separate α from β: share α between the two classes
        x = nnls(np.column_stack([a[:, 0] + a[:, 2], a[:, 1], a[:, 3]]) * w[:, None], t * w)
        f.notes.append("one inter-node group size measured: α shared by intra- and inter-node groups")
        return {"intra": (x[0], x[1]), "inter": (x[0], x[2])}
    if has_inter and has_intra:
        x = nnls(a * w[:, None], t * w)
        return {"intra": (x[0], x[1]), "inter": (x[2], x[3])}
    x = nnls(a[:, :2] * w[:, None], t * w)
    fitted, missing = ("inter", "intra") if has_inter and not has_intra else ("intra", "inter")
    if fitted == "intra" and f.gpus_per_node is not None:
        f.notes.append("no measured group spans nodes: inter-node α and bandwidth taken equal to intra-node "
                       "(optimistic beyond one node)")
    elif fitted == "inter":
        f.notes.append("no measured group inside one node: intra-node cost taken equal to inter-node")
    return {fitted: (x[0], x[1]), missing: (x[0], x[1])}


def _fit_unsized(keys: dict, info: dict, notes: list[str]) -> dict[tuple, tuple[float, float]]:
    out = {}
    for key, cs in keys.items():
        if info[key]["bytes"] is not None:
            continue
        a = np.array([[ring_steps(key[0], c.n), ring_factor(key[0], c.n)] for c in cs], float)
        t = np.array([c.transfer_ns for c in cs], float)
        out[key] = tuple(float(v) for v in nnls(a / t[:, None], np.ones_like(t)))
        notes.append(f"{key[0]} ({key[1]}): no message sizes in the traces: per-collective time model "
                     "t = α·steps(n) + γ·factor(n), not split by link")
    return out


def _wait_rule(points: list[Point], notes: list[str]) -> tuple[str, float, float]:
    """Waiting of the slowest rank: log2 N growth when it grows with N and a log fit removes most of the
    spread around the mean, else constant (the median)."""
    n = np.array([p.n for p in points], float)
    w = np.array([p.wait_ns for p in points], float)
    constant = ("constant", float(np.median(w)), 0.0)
    if not w.any() or len(w) < MIN_SIZES:
        return constant
    x = np.column_stack([np.ones_like(n), np.log2(n)])
    coef, *_ = np.linalg.lstsq(x, w, rcond=None)
    sse_log, sse_mean = float(np.sum((x @ coef - w) ** 2)), float(np.sum((w - w.mean()) ** 2))
    grows = coef[1] > 0 and sse_mean > 0 and sse_log < 0.5 * sse_mean and np.all(np.diff(w) >= 0)
    if grows:
        notes.append("waiting for slower peers grows with log2 N in the measured runs: carried forward so")
        return ("log2", float(coef[0]), float(coef[1]))
    notes.append("waiting for slower peers carried forward as a constant (the measured median)")
    return constant


# ---- predicting ----------------------------------------------------------------------------------

def transfer(f: Fit, key: tuple, n_world: int, what_if: WhatIf = WhatIf()) -> tuple[float, int, bool]:
    """(one instance's transfer ns, group size, spans nodes) of a collective key at N GPUs."""
    collective, dim = key
    group = degree(dim, n_world, f)
    if group < 2:
        return 0.0, group, False
    inter = spans_nodes(dim, group, n_world, f)
    slow = 1 / what_if.network if inter else 1.0
    info = f.keys[key]
    if info["bytes"] is None:
        alpha, gamma = f.unsized[key]
        return alpha * ring_steps(collective, group) + gamma * ring_factor(collective, group) * slow, group, inter
    alpha, beta = f.link["inter" if inter else "intra"]
    return (alpha * ring_steps(collective, group)
            + beta * slow * info["bytes"] * ring_factor(collective, group)), group, inter


def predict(f: Fit, n_world: int, what_if: WhatIf = WhatIf()) -> dict[str, float]:
    """compute, comm, exposed comm and step time (ns per step, slowest rank) at N GPUs."""
    a, b = f.compute
    compute = (a + b / n_world) / what_if.compute
    hidden, exposed, comm = 0.0, 0.0, 0.0
    for key, info in f.keys.items():
        t = info["count"] * transfer(f, key, n_world, what_if)[0]
        comm += t
        if info["room"] >= OVERLAP_MIN_RATIO:
            hidden += t
        else:
            exposed += t
    kind, w0, w1 = f.wait
    wait = max(0.0, w0 + w1 * math.log2(n_world)) if kind == "log2" else w0
    exposed_comm = max(0.0, hidden - f.capacity * compute) + exposed + wait
    return {"compute_ns": compute, "comm_ns": comm + wait, "exposed_comm_ns": exposed_comm,
            "step_time_ns": compute + exposed_comm + f.other_ns}
