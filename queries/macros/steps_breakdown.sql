-- name: steps_breakdown
-- description: Per trace: the breakdown of its profiled steps taken together (the whole trace where it has no steps).
-- grain: one row per trace (traces whose device events span a positive time)
-- param: run VARCHAR a run_id, or NULL for every run
-- depends: window_breakdown, window_unions
-- The window of a run's step figures (run_summary's shares, the idle chart,
-- the traced-window check): on each rank, from the first device event its
-- profiled steps launched to the last one's end, so the gaps between steps
-- count as idle and device work outside the profiled steps (before the first,
-- after the last, between profiling windows) does not.  busy, compute, comm,
-- exposed_comm, exposed_memory, other, overlap = the sums over the rank's
-- ProfilerStep windows (window_breakdown); span_ns = that window, or the busy
-- sum where the steps' device work overlaps (a step's kernels still running
-- when the next step's start), so idle_ns = span − busy ≥ 0 and the five parts
-- sum to span.  between_steps_ns = span − the sum of the ProfilerStep windows'
-- spans (at least 0): the idle between one step's last device event and the
-- next step's first.  A trace without ProfilerSteps: its whole-trace row
-- (num_steps 0, between_steps_ns 0).
-- Units: *_ns nanoseconds.
WITH per_step AS (
    SELECT * FROM window_breakdown(true, run) WHERE span_ns > 0
),
edges AS (
    SELECT u.trace_id, min(u.first_ns) AS first_ns, max(u.last_ns) AS last_ns
    FROM window_unions(true, run) u JOIN per_step p USING (trace_id, step)
    WHERE u.set_name = 'all' GROUP BY u.trace_id
),
stepped AS (
    SELECT p.trace_id, any_value(p.run_id) AS run_id, any_value(p.rank) AS rank, count(*) AS num_steps,
           any_value(e.last_ns - e.first_ns) AS window_ns, sum(p.span_ns) AS step_spans_ns,
           sum(p.busy_ns) AS busy_ns, sum(p.compute_ns) AS compute_ns, sum(p.comm_ns) AS comm_ns,
           sum(p.memory_ns) AS memory_ns, sum(p.overlap_ns) AS overlap_ns,
           sum(p.exposed_comm_ns) AS exposed_comm_ns, sum(p.exposed_memory_ns) AS exposed_memory_ns,
           sum(p.other_ns) AS other_ns
    FROM per_step p JOIN edges e USING (trace_id) GROUP BY p.trace_id
)
SELECT trace_id, run_id, rank, num_steps, greatest(window_ns, busy_ns)::BIGINT AS span_ns, busy_ns::BIGINT AS busy_ns,
       (greatest(window_ns, busy_ns) - busy_ns)::BIGINT AS idle_ns, compute_ns::BIGINT AS compute_ns,
       comm_ns::BIGINT AS comm_ns, memory_ns::BIGINT AS memory_ns, overlap_ns::BIGINT AS overlap_ns,
       exposed_comm_ns::BIGINT AS exposed_comm_ns, exposed_memory_ns::BIGINT AS exposed_memory_ns,
       other_ns::BIGINT AS other_ns, greatest(0, window_ns - step_spans_ns)::BIGINT AS between_steps_ns
FROM stepped
UNION ALL
SELECT trace_id, run_id, rank, 0 AS num_steps, span_ns, busy_ns, idle_ns, compute_ns, comm_ns, memory_ns,
       overlap_ns, exposed_comm_ns, exposed_memory_ns, other_ns, 0::BIGINT AS between_steps_ns
FROM window_breakdown(false, run)
WHERE span_ns > 0 AND trace_id NOT IN (SELECT trace_id FROM stepped)
