"""Collectors: profile training steps with torch.profiler, across runs.

* :func:`profile` — a context manager around your training loop;
* ``scaletrace collect -- CMD`` — the same for an unmodified script
  (`collectors.autostart`, hooked on every optimizer step);
* ``scaletrace sweep SWEEP.toml`` — the same job over a matrix of runs
  (`collectors.sweep`);
* ``python -m scaletrace.collectors.demo`` — a small GPT on synthetic tokens (DDP, FSDP2,
  tensor parallel, FSDP×TP) to try it all on CPU or GPU.

torch is imported lazily, inside the functions that need it: the pipeline
never needs torch.
"""

from scaletrace.collectors.config import ProfileConfig, RunInfo
from scaletrace.collectors.session import Session, profile

__all__ = ["ProfileConfig", "RunInfo", "Session", "profile"]
