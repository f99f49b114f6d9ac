"""Collective names: one canonical spelling from kernel args, CPU ops or kernel names."""

from __future__ import annotations

import re

# nccl-tests / c10d spellings -> canonical name.  Keys have "_" removed.
_CANONICAL = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "alltoallv": "all_to_all",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "sendrecv": "send_recv",
    "send": "send",
    "recv": "recv",
    "barrier": "barrier",
    "gather": "gather",
    "scatter": "scatter",
}
_NOISE = ("_into_tensor", "_coalesced", "_base", "_tensor")
_KERNEL_RE = re.compile(r"^(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)
_PREFIXES = ("c10d::", "nccl:", "gloo:", "mpi:", "ucc:")


def canonical(raw: str | None) -> str | None:
    """``allreduce``, ``nccl:all_reduce``, ``c10d::allreduce_`` -> ``all_reduce``."""
    if not raw:
        return None
    text = raw.strip().lower()
    for prefix in _PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix):]
    text = text.strip("_")
    for noise in _NOISE:
        text = text.replace(noise, "")
    key = text.replace("_", "")
    return _CANONICAL.get(key, text or None)


def from_kernel_name(name: str) -> str | None:
    """``ncclKernel_AllReduce_RING_LL_Sum_float`` -> ``all_reduce``; ``Generic`` -> None."""
    match = _KERNEL_RE.match(name)
    if not match or match.group(1).lower() == "generic":
        return None
    return canonical(match.group(1))
