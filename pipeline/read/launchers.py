"""Per device event: the op that launched it, its family and its short name (``pipeline/read/families.py``).

The launching op is the innermost ``cpu_op`` on the launching thread that contains the runtime call
linked to the event by ``correlation`` (``pipeline/read/nesting.py``), else the op whose External id the
event or its runtime call carries (the 2021 schema's only link); ``record_function`` annotations
are not ops, except that an ``Optimizer.step#…`` annotation makes the kernels inside it optimizer
time.  Decisions are taken once per distinct name and applied to whole columns.
"""

from __future__ import annotations

import numpy as np

from scaletrace.pipeline.read import columns, families, intervals
from scaletrace.pipeline.read.columns import flags_by_code as by_code
from scaletrace.pipeline.read.nesting import Nesting
from scaletrace.pipeline.read.columns import NONE
from scaletrace.pipeline.read.vocabulary import CPU_OP_CATS, KERNEL_CATS, KINDS, STEP_NAME, USER_ANNOTATION_CAT

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
    """(launch_op name code or -1, family index or NO_OP / UNKNOWN) per device event.

    The op is the innermost one around the launching runtime call on the call's thread; where no op
    there holds it, the op whose External id the device event (else its runtime call) carries: the
    2021 schema numbers its ops' threads by the profiler's own thread ids and its runtime calls' by
    the system's, so only the id links them."""
    op_code = np.full(len(dev), -1, dtype=np.int64)
    family = np.full(len(dev), NO_OP, dtype=np.int64)
    if not len(cpu):
        return op_code, family
    is_op = (by_code(vocab.lower, lambda c: c in CPU_OP_CATS)[cpu.cat]
             & ~by_code(vocab.names, lambda n: STEP_NAME in n)[cpu.name])  # 2021: steps are `Operator`s too
    is_opt = (by_code(vocab.lower, lambda c: c == USER_ANNOTATION_CAT)[cpu.cat]
              & by_code(vocab.names, lambda n: families.OPTIMIZER_ANNOTATION_RE.match(n) is not None)[cpu.name])
    own, hands = _own_families(vocab.names, np.unique(cpu.name[is_op]))
    eff = np.full(len(cpu), UNKNOWN, dtype=np.int64)  # each op's family, handed down its thread's nesting
    found = np.full(len(dev), -1, dtype=np.int64)  # the position in cpu of each device event's op
    linked = np.flatnonzero(launch >= 0)
    rt = launch[linked]
    for ops in _by_thread(cpu.tid, np.flatnonzero(is_op)):
        nest = Nesting(cpu.ts[ops], cpu.ts[ops] + cpu.dur[ops])
        sorted_ops = ops[nest.order]
        codes = cpu.name[sorted_ops]
        handed = nest.down(np.where(hands[codes], own[codes], UNKNOWN), lambda v: np.isin(v, ABSORBING))
        eff[sorted_ops] = np.where(~hands[codes] & (handed == UNKNOWN), own[codes], handed)  # a wrapper's own kernels
        here = cpu.tid[rt] == cpu.tid[ops[0]]
        if here.any():
            inner = nest.innermost(cpu.ts[rt[here]])
            hit = inner >= 0
            found[linked[here][hit]] = sorted_ops[inner[hit]]
    # the instant each launch happened on its thread: the runtime call's, else (linked by id) the op's start
    at_tid = np.full(len(dev), -1, dtype=np.int64)
    at_ts = np.zeros(len(dev), dtype=np.int64)
    at_tid[linked], at_ts[linked] = cpu.tid[rt], cpu.ts[rt]
    by_id = _by_external_id(dev, cpu, is_op, launch, found)
    at_tid[by_id], at_ts[by_id] = cpu.tid[found[by_id]], cpu.ts[found[by_id]]
    hit = found >= 0
    op_code[hit] = cpu.name[found[hit]]
    family[hit] = eff[found[hit]]
    for opt in _by_thread(cpu.tid, np.flatnonzero(is_opt)):
        events = np.flatnonzero(at_tid == cpu.tid[opt[0]])
        inside = _inside(cpu.ts[opt], cpu.ts[opt] + cpu.dur[opt], at_ts[events])
        generic = inside & (np.isin(family[events], _GENERIC) | (family[events] == NO_OP))
        family[events[generic]] = FAMILY_INDEX["optimizer"]
    return op_code, family


def _by_thread(tid: np.ndarray, positions: np.ndarray) -> list:
    """``positions`` grouped by their thread (each group in file order)."""
    if not len(positions):
        return []
    order = positions[np.argsort(tid[positions], kind="stable")]
    cuts = np.flatnonzero(np.diff(tid[order])) + 1
    return np.split(order, cuts)


def _by_external_id(dev: columns.Side, cpu: columns.Side, is_op: np.ndarray, launch: np.ndarray,
                    found: np.ndarray) -> np.ndarray:
    """Fills ``found`` for the device events that no op holds the launch of by time: the op whose
    External id the event carries (else its runtime call does).  Returns where it did."""
    want = dev.ext.copy()
    from_call = (want == NONE) & (launch >= 0)
    want[from_call] = cpu.ext[launch[from_call]]
    todo = np.flatnonzero((found < 0) & (want != NONE))
    ops = np.flatnonzero(is_op & (cpu.ext != NONE))
    done = np.zeros(len(dev), dtype=bool)
    if not len(todo) or not len(ops):
        return done
    ops = ops[np.argsort(cpu.ext[ops], kind="stable")]
    keys = cpu.ext[ops]
    k = np.searchsorted(keys, want[todo], side="right") - 1
    hit = k >= 0
    hit[hit] = keys[k[hit]] == want[todo][hit]
    found[todo[hit]] = ops[k[hit]]
    done[todo[hit]] = True
    return done


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
