"""Collective names: one canonical spelling from kernel args, CPU ops or kernel names.

The spellings themselves (prefixes, kernel-name pattern, canonical names) are ``pipeline/vocabulary.py``."""

from __future__ import annotations

from scaletrace.pipeline.vocabulary import (CANONICAL_COLLECTIVES, COLLECTIVE_KERNEL_RE, COLLECTIVE_NAME_NOISE,
                                            COLLECTIVE_NAME_PREFIXES, CPU_COMM_PREFIXES, GENERIC_KERNEL_COLLECTIVE)

_PREFIXES = (*COLLECTIVE_NAME_PREFIXES, *CPU_COMM_PREFIXES)  # stripped: `nccl:all_reduce` -> `all_reduce`


def canonical(raw: str | None) -> str | None:
    """``allreduce``, ``nccl:all_reduce``, ``c10d::allreduce_`` -> ``all_reduce``."""
    if not raw:
        return None
    text = raw.strip().lower()
    for prefix in _PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix):]
    text = text.strip("_")
    for noise in COLLECTIVE_NAME_NOISE:
        text = text.replace(noise, "")
    key = text.replace("_", "")
    return CANONICAL_COLLECTIVES.get(key, text or None)


def from_kernel_name(name: str) -> str | None:
    """``ncclKernel_AllReduce_RING_LL_Sum_float`` -> ``all_reduce``; ``Generic`` -> None."""
    match = COLLECTIVE_KERNEL_RE.match(name)
    if not match or match.group(1).lower() == GENERIC_KERNEL_COLLECTIVE:
        return None
    return canonical(match.group(1))
