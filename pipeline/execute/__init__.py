"""Running the work: finding trace files, dispatching them to worker processes or a Ray cluster,
and writing the results, into DuckDB (``ingest``) or a Parquet dataset (``dataset``)."""
