-- name: window_unions
-- description: |U(set)| per trace, window and set of kinds, with its first start and last end.
-- grain: one row per trace × window × set (window: the whole trace, or one ProfilerStep)
-- param: per_step BOOLEAN true: the ProfilerStep windows (step NOT NULL); false: the whole trace (step NULL)
-- param: run VARCHAR a run_id, or NULL for every run
-- Read from the interval_unions table that ingest fills (pipeline/read/intervals.py).
-- Sets: all, compute, comm, memory, cc (compute ∪ comm), ccm (compute ∪ comm ∪
-- memory).  Every breakdown metric follows by inclusion-exclusion, e.g.
-- |U(compute) ∩ U(comm)| = compute + comm − cc (window_breakdown).
-- Units: union_ns, first_ns, last_ns nanoseconds.
SELECT trace_id, run_id, rank, step, set_name, union_ns, first_ns, last_ns
FROM interval_unions
WHERE (run IS NULL OR run_id = run) AND (step IS NOT NULL) = per_step
