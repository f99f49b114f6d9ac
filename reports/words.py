"""Numbers in words, for sentences built from values ("A sentence is data").

A value is written so that it cannot say more than it is: a share just under 100 % is never
"100 %", a positive share is never "0 %", and a missing value is None (the caller leaves its
clause out) rather than "nan" or "None".
"""

from __future__ import annotations

import math

# The five parts of a step (run_summary's shares, scaling_attribution's parts), in stacking order.
STEP_PARTS = {"compute": "compute", "exposed_comm": "exposed communication", "exposed_memory": "exposed memory",
              "other": "other (sync, unclassified)", "idle": "idle"}
# The part of "other" that a CPU-only trace's threads sat blocked in a collective's wait
# (run_summary.collective_wait_pct: `_c10d_functional::wait_tensor`, TorchRec's `All2All_Pooled_Wait`).
COLLECTIVE_WAIT = "waiting for a collective (a CPU thread blocked in its wait)"


def present(x) -> bool:
    """A value a sentence can state: not None, not NaN, not infinite (a Decimal or an int too)."""
    if x is None or isinstance(x, bool):
        return x is not None
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def number(x) -> float | None:
    """``x`` as a float a sentence can state, else None (None, NaN, ±inf, not a number)."""
    return float(x) if present(x) else None


def change(what: str, a, b, words, rose: str = "rose", fell: str = "fell") -> str | None:
    """A change in words, decided from the values as written: 'MFU fell from 40 % to 31 %', 'MFU
    stayed at 40 %' where both ends read the same, None where either end is missing (``words``:
    the value -> text function, e.g. ``share``; ``rose`` / ``fell``: the verbs)."""
    a, b = number(a), number(b)
    if a is None or b is None or words(a) is None or words(b) is None:
        return None
    if words(a) == words(b):
        return f"{what} stayed at {words(a)}"
    return f"{what} {rose if b > a else fell} from {words(a)} to {words(b)}"


def points(x) -> str | None:
    """Percentage points: '0.3', '7.8', '15'; None where it would read '0.0' (too small to state)."""
    x = number(x)
    if x is None or abs(x) < 0.05:
        return None
    return f"{x:.1f}" if abs(x) < 10 else f"{x:.0f}"


def share(pct) -> str | None:
    """A percentage: '38 %', '5.9 %', '0.026 %', '99.6 %' (never rounded up to 100), 'under 0.01 %'."""
    if not present(pct):
        return None
    x = float(pct)
    if x < 0:  # a share below zero is an artefact of rounding in the data: say its size with a sign
        return "−" + share(-x)
    if x == 0 or x == 100:
        return f"{x:.0f} %"
    if 99 < x < 100:
        return f"{math.floor(x * 10) / 10:.1f} %"
    if abs(x) >= 10:
        return f"{x:.0f} %"
    if abs(x) >= 1:
        return f"{x:.1f} %"
    if abs(x) >= 0.01:
        return f"{x:.2g} %"
    return "under 0.01 %"


def duration(ns) -> str | None:
    """Nanoseconds in a readable unit, three significant digits: '1.76 µs', '19.9 ms', '13.3 s'."""
    if not present(ns):
        return None
    x = float(ns)  # DuckDB sums of BIGINT arrive as Decimal
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
        if abs(x) >= scale:
            return f"{figure(x / scale)} {unit}"
    return f"{figure(x)} ns"


def figure(x) -> str | None:
    """A quantity, three significant digits and never e-notation: '0.299', '24.6', '613', '2,000',
    'under 0.001'."""
    if not present(x):
        return None
    x = float(x)
    if x == 0:
        return "0"
    if abs(x) < 1e-3:
        return f"{'−' if x < 0 else ''}under 0.001"
    rounded = float(f"{x:.3g}")
    return f"{x:,.0f}" if abs(rounded) >= 1000 else f"{rounded:g}"


def ratio(x) -> str | None:
    """A ratio: '1.8×', '1.04×' (two decimals below 1.1, so 1.04 never reads '1.0×'), '12×'."""
    x = number(x)
    if x is None:
        return None
    return f"{x:.2f}×" if abs(x) < 1.1 else f"{x:.1f}×" if abs(x) < 10 else f"{x:,.0f}×"


def above_100(pct, why: str) -> str:
    """The clause a percentage above 100 % carries wherever it is shown: ' (above 100 %: {why})';
    '' for 100 % or less, or a missing value.  A share that cannot exceed 100 % but does is a
    warning, never a bare figure."""
    return f" (above 100 %: {why})" if present(pct) and float(pct) > 100 and share(pct) != "100 %" else ""


# why a process group's exposed communication (each collective's exposed time summed ÷ the span) can
# exceed the span: said beside such a figure by above_100, in the findings and explain alike
OVERLAPPING_COLLECTIVES = "its collectives overlap one another, each counted in full"


# A run whose traces hold no device events (run_summary.cpu_only) ran on CPU ranks: no sentence,
# card row or axis calls them GPUs.  The one rule for the noun, used by the card, the findings, the
# charts' axis titles and explain.
def unit(cpu_only, plural: bool = False) -> str:
    """'GPU' / 'GPUs', or 'CPU rank' / 'CPU ranks' for a run with no device (``cpu_only`` true)."""
    return ("CPU rank" if cpu_only else "GPU") + ("s" if plural else "")


def gpus(n, cpu_only=False) -> str:
    """'1 GPU', '4 GPUs'; '1 CPU rank', '300 CPU ranks' for a run with no device."""
    return f"{n} {unit(cpu_only, n != 1)}"


def units_title(cpu_only_flags) -> str:
    """The noun for many runs' counts (a column header, an axis title): 'GPUs', 'CPU ranks' when every
    run has no device, 'GPUs or CPU ranks' when both kinds are there."""
    flags = {bool(f) for f in cpu_only_flags}
    return "GPUs or CPU ranks" if flags == {True, False} else unit(flags == {True}, plural=True)


def count(n: int, noun: str, plural: str | None = None) -> str:
    """'1 rank', '8 ranks', '1 process group'."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def listing(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    items = [i for i in items if i]
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}" if items else ""


__all__ = ["OVERLAPPING_COLLECTIVES", "STEP_PARTS", "above_100", "change", "count", "figure", "duration", "gpus", "listing", "number", "points",
           "present", "ratio", "share", "unit", "units_title"]
