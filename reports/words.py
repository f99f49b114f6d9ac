"""Numbers in words, for sentences built from values (STYLE.md "A sentence is data").

A value is written so that it cannot say more than it is: a share just under 100 % is never
"100 %", a positive share is never "0 %", and a missing value is None (the caller leaves its
clause out) rather than "nan" or "None".
"""

from __future__ import annotations

import math

# The five parts of a step (run_summary's shares, scaling_attribution's parts), in stacking order.
STEP_PARTS = {"compute": "compute", "exposed_comm": "exposed communication", "exposed_memory": "exposed memory",
              "other": "other (sync, unclassified)", "idle": "idle"}


def present(x) -> bool:
    """A value a sentence can state: not None and not NaN."""
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def share(pct) -> str | None:
    """A percentage: '38 %', '5.9 %', '0.026 %', '99.6 %' (never rounded up to 100), 'under 0.01 %'."""
    if not present(pct):
        return None
    x = float(pct)
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
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g} ns"


def figure(x) -> str | None:
    """A quantity, three significant digits and never e-notation: '0.299', '24.6', '613', '2,000'."""
    if not present(x):
        return None
    x = float(x)
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}" if abs(x) >= 1e-3 or x == 0 else f"{x:.1e}"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """'1 rank', '8 ranks', '1 process group'."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def listing(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    items = [i for i in items if i]
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}" if items else ""


__all__ = ["STEP_PARTS", "count", "figure", "duration", "listing", "present", "share"]
