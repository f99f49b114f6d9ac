"""Storing what was read: the DuckDB schema and connection (``db``), the checks on an existing
database, writing one trace's tables, which stored traces are current, Parquet export."""
