"""scaletrace pipeline: ingest Chrome / Kineto traces into DuckDB and query them.

>>> from scaletrace.pipeline import ingest, connect
>>> report = ingest(["runs/llama-64gpu"], db="scaletrace.duckdb")
>>> connect("scaletrace.duckdb").query("rank_breakdown")   # a polars DataFrame

Names are imported on first use: the collector imports ``pipeline.manifest``
(to write run.json) inside the training job, which must not pull in DuckDB,
polars or pyarrow.
"""

from __future__ import annotations

import importlib
import sys
import types

_API = {  # public name -> module that defines it
    "DEFAULT_RULES": "scaletrace.pipeline.classify",
    "Rule": "scaletrace.pipeline.classify",
    "load_rules": "scaletrace.pipeline.classify",
    "Database": "scaletrace.pipeline.db",
    "connect": "scaletrace.pipeline.db",
    "IngestReport": "scaletrace.pipeline.ingest",
    "Outcome": "scaletrace.pipeline.ingest",
    "ingest": "scaletrace.pipeline.ingest",
    "DatabaseError": "scaletrace.pipeline.schema",
}

__all__ = sorted(_API)


def __getattr__(name: str):
    if name not in _API:
        raise AttributeError(f"module 'scaletrace.pipeline' has no attribute {name!r}")
    value = getattr(importlib.import_module(_API[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))


class _Package(types.ModuleType):
    """Importing the submodule ``pipeline.ingest`` binds the attribute ``ingest`` of this package to
    that module; the public name is the function, so bind the function instead (as an eager
    ``from .ingest import ingest`` in this file would)."""

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, types.ModuleType) and name in _API and hasattr(value, name):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
