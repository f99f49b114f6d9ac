-- name: critical_path_rows
-- description: The critical path's segments, as the walk over critical_path_graph found them (empty until computed).
-- grain: one row per run × step × segment of the path
-- param: run VARCHAR a run_id, or NULL for every run
-- The longest path of a step is found by a walk in Python
-- (queries/analysis/critical_path.py) that a scaletrace connection runs
-- before a query reads this relation: on that connection this macro is
-- replaced by one over the walk's result.  Read with the plain duckdb CLI it
-- is empty (its columns and types are these).
-- Units: *_ns nanoseconds.
SELECT * FROM (VALUES (NULL::VARCHAR, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::INTEGER, NULL::VARCHAR,
                       NULL::VARCHAR, NULL::VARCHAR, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT,
                       NULL::BIGINT))
    AS v(run_id, step, seq, trace_id, rank, lane, kind, name, event_id, start_ns, dur_ns, offset_ns, clock_ns)
WHERE run_id IS NOT NULL AND (run IS NULL OR run_id = run)
