"""Whether vl-convert's JavaScript engine (V8) can start in this process.

V8 reserves a large range of address space when it starts (its pointer cage and guard regions:
~64 GiB, measured with vl-convert 1.x: a `ulimit -v` of 64 GiB aborted it, 65 GiB did not). Under a
smaller `ulimit -v` it does not raise: it aborts the whole process (SIGTRAP). So the report asks
here before it starts V8: the Vega bundle (when not already cached), the static SVG fallbacks and
--png / --svg need it.
"""

from __future__ import annotations

import resource
from pathlib import Path

V8_ADDRESS_SPACE = 64 << 30  # bytes V8 reserves at start-up, beyond what the process already maps


def _mapped() -> int:
    """Bytes of address space this process maps now (VmSize), 0 where /proc is not there."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def unavailable() -> str | None:
    """Why V8 cannot start under this process's address-space limit (RLIMIT_AS), or None."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    mapped = _mapped()
    if soft - mapped >= V8_ADDRESS_SPACE:
        return None
    return (f"the charts are drawn by vl-convert, whose JavaScript engine reserves about "
            f"{V8_ADDRESS_SPACE >> 30} GiB of address space at start, and this process may map only "
            f"{soft / (1 << 30):.1f} GiB (ulimit -v), {mapped / (1 << 30):.1f} GiB of it in use: "
            "raise the limit (ulimit -v unlimited)")
