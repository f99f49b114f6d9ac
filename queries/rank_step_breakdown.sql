-- name: rank_step_breakdown
-- description: The rank_breakdown columns per ProfilerStep, over the step's device slot, with its CPU and device windows.
-- grain: one row per run × rank × step that launched device work (ranks without ProfilerStep annotations have no rows)
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- The step model (docs/metrics.md "The step model", macro step_windows): a
-- device event belongs to the ProfilerStep#N whose CPU interval contains the
-- runtime call that launched it (linked by correlation; events with no
-- launching call found use their own start time).
--   step_cpu_ns        the ProfilerStep annotation's duration (the CPU window);
--   device_window_ns   first start to last end of the device events the step
--                      launched (the device window; device_lag_ns = its end −
--                      the CPU window's end, > 0 when the device runs behind);
--   span_ns            the step's device slot: from the end of the earlier
--                      steps' device work to the end of this step's.  The slots
--                      of a rank tile its profiled steps' device window.
-- busy, idle, compute, comm, memory, overlap, exposed_comm, exposed_memory,
-- other are measured over the slot on the rank's device timeline (every
-- profiled step's events, whichever step launched them: a neighbour step's
-- kernel is busy, never idle), so idle_ns ≤ span_ns and the five parts sum to
-- span_ns; definitions as in rank_breakdown (a bare *_pct: of span_ns).
-- Units: *_ns nanoseconds; percent (0–100): a bare *_pct of the span, *_pct_of_X of X.
SELECT run_id, rank, step, span_ns, busy_ns, idle_ns, compute_ns, comm_ns,
       memory_ns, overlap_ns, exposed_comm_ns, exposed_memory_ns, other_ns,
       overlap_pct_of_comm, exposed_comm_pct, cpu_ns AS step_cpu_ns,
       device_span_ns AS device_window_ns, device_lag_ns
FROM step_slot_breakdown($run_id)
ORDER BY run_id, rank, step
