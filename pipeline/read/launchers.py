"""Per device event: the op that launched it, its family and its short name (``pipeline/read/families.py``).

The launching op is the innermost ``cpu_op`` on the launching thread that contains the runtime call
linked to the event by ``correlation`` (``pipeline/read/nesting.py``); ``record_function`` annotations
are not ops, except that an ``Optimizer.step#…`` annotation makes the kernels inside it optimizer
time.  Decisions are taken once per distinct name and applied to whole columns.
"""

from __future__ import annotations

import numpy as np

from scaletrace.pipeline.read import columns, families, intervals
from scaletrace.pipeline.read.columns import flags_by_code as by_code
from scaletrace.pipeline.read.nesting import Nesting
from scaletrace.pipeline.read.vocabulary import CPU_OP_CAT, KERNEL_CATS, KINDS, USER_ANNOTATION_CAT

FAMILY_INDEX = {f: i for i, f in enumerate(families.FAMILIES)}
UNKNOWN = -1  # an op no rule knows (a custom op): the kernel's name decides
NO_OP = -2  # no launching op
ABSORBING = np.array(sorted(FAMILY_INDEX[f] for f in families.ABSORBING))
# what the optimizer annotation turns into optimizer time (not a GEMM or a norm inside the step)
_GENERIC = np.array([FAMILY_INDEX["elementwise"], FAMILY_INDEX["reduction"], FAMILY_INDEX["other"], UNKNOWN])
BASES = ("op", "name")


def _own_families(names: list, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """By code, for the op names at ``codes``: the family index (UNKNOWN when no rule knows it), and
    whether the op may hand it down (not the autograd engine's wrapper, ``families.hands_down``)."""
    own = np.full(len(names), UNKNOWN, dtype=np.int64)
    hands = np.ones(len(names), dtype=bool)
    for c in codes.tolist():
        found = families.op_family(names[c])
        own[c] = FAMILY_INDEX[found] if found else UNKNOWN
        hands[c] = families.hands_down(names[c])
    return own, hands


def launching(dev: columns.Side, cpu: columns.Side, vocab: columns.Vocab, launch: np.ndarray):
    """(launch_op name code or -1, family index or NO_OP / UNKNOWN) per device event."""
    op_code = np.full(len(dev), -1, dtype=np.int64)
    family = np.full(len(dev), NO_OP, dtype=np.int64)
    linked = np.flatnonzero(launch >= 0)
    if not len(linked) or not len(cpu):
        return op_code, family
    is_op = by_code(vocab.lower, lambda c: c == CPU_OP_CAT)[cpu.cat]
    is_opt = (by_code(vocab.lower, lambda c: c == USER_ANNOTATION_CAT)[cpu.cat]
              & by_code(vocab.names, lambda n: families.OPTIMIZER_ANNOTATION_RE.match(n) is not None)[cpu.name])
    own, hands = _own_families(vocab.names, np.unique(cpu.name[is_op]))
    rt = launch[linked]
    tids, ts = cpu.tid[rt], cpu.ts[rt]
    for tid in np.unique(tids).tolist():
        here = tids == tid
        points, events = ts[here], linked[here]
        ops = np.flatnonzero(is_op & (cpu.tid == tid))
        if len(ops):
            nest = Nesting(cpu.ts[ops], cpu.ts[ops] + cpu.dur[ops])
            sorted_ops = ops[nest.order]
            codes = cpu.name[sorted_ops]
            eff = nest.down(np.where(hands[codes], own[codes], UNKNOWN), lambda v: np.isin(v, ABSORBING))
            eff = np.where(~hands[codes] & (eff == UNKNOWN), own[codes], eff)  # a wrapper's own kernels
            found = nest.innermost(points)
            hit = found >= 0
            op_code[events[hit]] = cpu.name[sorted_ops[found[hit]]]
            family[events[hit]] = eff[found[hit]]
        opt = np.flatnonzero(is_opt & (cpu.tid == tid))
        if len(opt):
            inside = _inside(cpu.ts[opt], cpu.ts[opt] + cpu.dur[opt], points)
            generic = inside & (np.isin(family[events], _GENERIC) | (family[events] == NO_OP))
            family[events[generic]] = FAMILY_INDEX["optimizer"]
    return op_code, family


def _inside(starts: np.ndarray, ends: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Whether each instant lies in the union of the intervals."""
    merged = intervals.merge(sorted(zip(starts.tolist(), ends.tolist())))
    if not merged:
        return np.zeros(len(points), dtype=bool)
    lo = np.array([s for s, _ in merged], dtype=np.int64)
    hi = np.array([e for _, e in merged], dtype=np.int64)
    k = np.searchsorted(lo, points, side="right") - 1
    return (k >= 0) & (points < hi[np.maximum(k, 0)])


def gpu_columns(dev: columns.Side, cpu: columns.Side, vocab: columns.Vocab, launch: np.ndarray,
                kind: np.ndarray) -> dict:
    """launch_op, family, family_basis and short_name of every device event, as Python lists of
    distinct values and int codes (extract turns them into string columns).  Family and basis are
    given to compute events only; short_name is the base name of kernels, the name of the rest."""
    op_code, family = launching(dev, cpu, vocab, launch)
    names = vocab.names
    used = np.unique(dev.name).tolist()  # the device events' names only (the vocabulary holds every op's too)
    name_fam = np.zeros(len(names), dtype=np.int64)
    name_fam[used] = [FAMILY_INDEX[families.name_family(names[c])] for c in used]
    by_name = family < 0  # no launching op, or one no rule knows
    family = np.where(by_name, name_fam[dev.name], family)
    basis = np.where(by_name, BASES.index("name"), BASES.index("op"))
    compute = kind == KINDS.index("compute")
    is_kernel = by_code(vocab.lower, lambda c: c in KERNEL_CATS)[dev.cat]
    short = [None] * len(names)
    for c in used:
        short[c] = families.base_name(names[c])
    return {
        "launch_op": (np.where(op_code >= 0, op_code, len(names)), [*names, None]),
        "family": (np.where(compute, family, len(families.FAMILIES)), [*families.FAMILIES, None]),
        "family_basis": (np.where(compute, basis, len(BASES)), [*BASES, None]),
        "short_name": (np.where(is_kernel, dev.name, len(names) + dev.name), [*short, *names]),
    }


def cpu_family(name: str) -> str:
    """A CPU op's family on a CPU-only trace (the op is its own launcher)."""
    found = families.op_family(name)
    return found if found else families.OTHER
