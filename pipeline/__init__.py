"""scaletrace pipeline: ingest Chrome / Kineto traces into DuckDB and query them.

>>> from pipeline import ingest, connect
>>> report = ingest(["runs/llama-64gpu"], db="scaletrace.duckdb")
>>> connect("scaletrace.duckdb").query("rank_breakdown")   # a polars DataFrame
"""

from scaletrace.pipeline.classify import DEFAULT_RULES, Rule, load_rules
from scaletrace.pipeline.db import Database, connect
from scaletrace.pipeline.ingest import IngestReport, Outcome, ingest
from scaletrace.pipeline.schema import DatabaseError

__all__ = ["DEFAULT_RULES", "Database", "DatabaseError", "IngestReport", "Outcome", "Rule",
           "connect", "ingest", "load_rules"]
