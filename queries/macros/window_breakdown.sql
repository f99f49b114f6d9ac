-- name: window_breakdown
-- description: Every breakdown column of one window of one trace (README "Metric definitions").
-- grain: one row per trace × window (the whole trace, or one ProfilerStep)
-- param: per_step BOOLEAN true: one row per ProfilerStep window; false: one per whole trace
-- param: run VARCHAR a run_id, or NULL for every run
-- depends: window_unions
-- span = last end − first start of all device events in the window; busy =
-- |U(all)|; idle = span − busy; compute, comm, memory = |U(kind)|; overlap =
-- |U(compute) ∩ U(comm)| = compute + comm − cc; exposed_comm = cc − compute;
-- exposed_memory = ccm − cc; other = busy − ccm.
-- overlap_pct_of_comm = 100 · overlap ÷ comm (HTA's overlap; NULL without comm);
-- exposed_comm_pct = 100 · exposed_comm ÷ span.
-- Units: *_ns nanoseconds; percent (0–100): a bare *_pct of the span, *_pct_of_X of X.
WITH u AS (
    SELECT trace_id, run_id, rank, step,
           max(last_ns) FILTER (WHERE set_name = 'all') - min(first_ns) FILTER (WHERE set_name = 'all') AS span_ns,
           coalesce(sum(union_ns) FILTER (WHERE set_name = 'all'), 0)::BIGINT AS busy_ns,
           coalesce(sum(union_ns) FILTER (WHERE set_name = 'compute'), 0)::BIGINT AS compute_ns,
           coalesce(sum(union_ns) FILTER (WHERE set_name = 'comm'), 0)::BIGINT AS comm_ns,
           coalesce(sum(union_ns) FILTER (WHERE set_name = 'memory'), 0)::BIGINT AS memory_ns,
           coalesce(sum(union_ns) FILTER (WHERE set_name = 'cc'), 0)::BIGINT AS cc_ns,
           coalesce(sum(union_ns) FILTER (WHERE set_name = 'ccm'), 0)::BIGINT AS ccm_ns
    FROM window_unions(per_step, run)
    GROUP BY trace_id, run_id, rank, step
)
SELECT trace_id, run_id, rank, step, span_ns, busy_ns,
       span_ns - busy_ns AS idle_ns,
       compute_ns, comm_ns, memory_ns,
       compute_ns + comm_ns - cc_ns AS overlap_ns,
       cc_ns - compute_ns AS exposed_comm_ns,
       ccm_ns - cc_ns AS exposed_memory_ns,
       busy_ns - ccm_ns AS other_ns,
       100.0 * (compute_ns + comm_ns - cc_ns) / nullif(comm_ns, 0) AS overlap_pct_of_comm,
       100.0 * (cc_ns - compute_ns) / nullif(span_ns, 0) AS exposed_comm_pct
FROM u
