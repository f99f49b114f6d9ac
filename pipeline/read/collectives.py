"""Collective names: one canonical spelling from kernel args, CPU ops or kernel names.

The spellings themselves (prefixes, kernel-name pattern, canonical names) are ``pipeline/read/vocabulary.py``."""

from __future__ import annotations

import bisect
import re

from scaletrace.pipeline.read.families import function_name
from scaletrace.pipeline.read.vocabulary import (CANONICAL_COLLECTIVES, COLLECTIVE_FUNCTION_WORD, COLLECTIVE_KERNEL_RE,
                                                 COLLECTIVE_NAME_NOISE, COLLECTIVE_NAME_PREFIXES, COMM_KERNELS,
                                                 CPU_COMM_PREFIXES, GENERIC_KERNEL_COLLECTIVE)

_PREFIXES = (*COLLECTIVE_NAME_PREFIXES, *CPU_COMM_PREFIXES)  # stripped: `nccl:all_reduce` -> `all_reduce`


# a collective Function's name (`All2All_Pooled_Req`, `ReduceScatterBase_Wait`): vocabulary.COLLECTIVE_FUNCTION
_FUNCTION = re.compile(r"^(?:\w+_)?" + COLLECTIVE_FUNCTION_WORD + r"\w*_(?:req|wait)(?:backward)?$", re.IGNORECASE)


def canonical(raw: str | None) -> str | None:
    """``allreduce``, ``nccl:all_reduce``, ``c10d::allreduce_``, ``AllReduce_Req`` -> ``all_reduce``."""
    if not raw:
        return None
    function = _FUNCTION.match(raw.strip())
    if function:
        return CANONICAL_COLLECTIVES[function.group(1).lower()]
    text = raw.strip().lower()
    for prefix in _PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix):]
    text = text.strip("_")
    for noise in COLLECTIVE_NAME_NOISE:
        text = text.replace(noise, "")
    key = text.replace("_", "")
    return CANONICAL_COLLECTIVES.get(key, text or None)


_COMM_KERNELS = tuple((re.compile(p, re.IGNORECASE), c) for p, c in COMM_KERNELS)


def from_kernel_name(name: str) -> str | None:
    """``ncclKernel_AllReduce_RING_LL_Sum_float`` -> ``all_reduce``; ``Generic`` -> None;
    ``multimem_all_reduce_kernel<…>`` -> ``all_reduce`` (vocabulary.COMM_KERNELS)."""
    match = COLLECTIVE_KERNEL_RE.match(name)
    if match:
        return None if match.group(1).lower() == GENERIC_KERNEL_COLLECTIVE else canonical(match.group(1))
    function = function_name(name)
    for pattern, collective in _COMM_KERNELS:
        if pattern.search(function):
            return collective
    return None


def fill_by_period(rows: list[tuple], corr: list[int | None], names: list[str], max_steps: int = 8) -> list[tuple]:
    """Comm kernels whose launch is not in the trace (launched before the profiler started, e.g.
    RCCL's ``ncclDevKernel_Generic`` still running from the previous step) take the metadata of the
    same kernel one training period later.  A training loop repeats its launches, so the same
    collective recurs at a fixed distance P in correlation ids: P is the distance that maps the most
    kernels of known collective onto a kernel of the same name and collective.  ``rows``: the
    collective rows (extract's layout: index, collective, pg_name, pg_desc, group_size, dtype,
    in_nelems, out_nelems, seq, meta_source); ``corr``: each row's correlation id (None if absent).
    Filled rows get meta_source ``periodic`` and no seq (they are not matched across ranks by it)."""
    known = {c: i for i, (r, c) in enumerate(zip(rows, corr)) if r[1] is not None and c is not None}
    unknown = [i for i, (r, c) in enumerate(zip(rows, corr)) if r[1] is None and r[9] is None and c is not None]
    if not unknown or len(known) < 2:
        return rows
    keys = sorted(known)
    label = {c: (names[known[c]], rows[known[c]][1]) for c in keys}
    candidates = set()
    for i in unknown[:4]:  # the first few bound the work: the period is the same for all
        j = bisect.bisect_right(keys, corr[i])
        candidates.update(k - corr[i] for k in keys[j:j + 16])
    best, best_score = None, 1
    for period in sorted(candidates):
        score = sum(1 for c in keys if label.get(c + period) == label[c])
        if score > best_score:
            best, best_score = period, score
    if best is None:
        return rows
    out = list(rows)
    for i in unknown:
        for step in (s * sign for s in range(1, max_steps + 1) for sign in (1, -1)):
            j = known.get(corr[i] + step * best)
            if j is not None and names[j] == names[i]:
                src = rows[j]
                out[i] = (rows[i][0], *src[1:8], None, "periodic")
                break
    return out
