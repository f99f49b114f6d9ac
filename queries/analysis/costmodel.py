"""The α–β cost of a ring collective over n ranks: latency steps and the bus-bandwidth factor (NCCL's
busBw convention). The projection fits α and β with it; the synthetic-sweep generator builds its
ground truth from it."""

from __future__ import annotations


def ring_factor(collective: str, n: int) -> float:
    """Bus-bandwidth factor: all_reduce 2(n−1)/n; all_gather, reduce_scatter, all_to_all (n−1)/n; else 1."""
    if n <= 1:
        return 0.0
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def ring_steps(collective: str, n: int) -> int:
    """Latency steps of the ring algorithm: all_reduce 2(n−1), all_gather / reduce_scatter / all_to_all n−1."""
    if n <= 1:
        return 0
    if collective == "all_reduce":
        return 2 * (n - 1)
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return n - 1
    return 1
