"""scaletrace pipeline: ingest Chrome / Kineto traces into DuckDB and query them.

>>> from scaletrace.pipeline import ingest, connect
>>> report = ingest(["runs/llama-64gpu"], db="scaletrace.duckdb")
>>> connect("scaletrace.duckdb").query("rank_breakdown")   # a polars DataFrame

Names are imported on first use: the collector imports ``pipeline.read.manifest``
(to write run.json) inside the training job, which must not pull in DuckDB,
polars or pyarrow.
"""

from __future__ import annotations

import importlib

_API = {  # public name -> module that defines it
    "DEFAULT_RULES": "scaletrace.pipeline.read.classify",
    "Rule": "scaletrace.pipeline.read.classify",
    "load_rules": "scaletrace.pipeline.read.classify",
    "Database": "scaletrace.pipeline.store.db",
    "connect": "scaletrace.pipeline.store.db",
    "IngestReport": "scaletrace.pipeline.execute.ingest",
    "Outcome": "scaletrace.pipeline.execute.ingest",
    "ingest": "scaletrace.pipeline.execute.ingest",
    "DatabaseError": "scaletrace.pipeline.store.schema",
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
