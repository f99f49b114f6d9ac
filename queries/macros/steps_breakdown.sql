-- name: steps_breakdown
-- description: Per trace: the breakdown of its profiled steps taken together (the whole trace where it has no steps).
-- grain: one row per trace (traces whose device events span a positive time)
-- param: run VARCHAR a run_id, or NULL for every run
-- depends: step_slot_breakdown, window_breakdown
-- The window of a run's step figures (run_summary's shares, the idle chart,
-- the traced-window check, the device step period): on each rank, its
-- steady-state device slots (docs/metrics.md "The step model";
-- step_slot_breakdown.steady_state: every slot but the first, or the only
-- one), from the end of the first profiled step's device work to the last
-- one's end, so the gaps between steps count as idle and device work outside
-- the profiled steps (before the first, after the last, between profiling
-- windows) and the first step's warm-up do not.  It is the union of those
-- slots, which tile it without overlap: span_ns, busy, idle, compute, comm, memory,
-- overlap, exposed_comm, exposed_memory, other = the sums over the slots, so
-- each is measured once on the rank's device timeline (a kernel of one step
-- running during another's slot is busy, counted once) and the five parts sum
-- to span (idle_breakdown.between_steps_ns: the part of idle between steps).
-- num_steps = the steady-state slots (span_ns ÷ num_steps: the rank's mean
-- device step period).  A trace without
-- ProfilerSteps: its whole-trace row (num_steps 0).
-- Units: *_ns nanoseconds.
WITH stepped AS (
    SELECT trace_id, any_value(run_id) AS run_id, any_value(rank) AS rank, count(*) AS num_steps,
           sum(span_ns) AS span_ns, sum(busy_ns) AS busy_ns, sum(idle_ns) AS idle_ns,
           sum(compute_ns) AS compute_ns, sum(comm_ns) AS comm_ns,
           sum(memory_ns) AS memory_ns, sum(overlap_ns) AS overlap_ns,
           sum(exposed_comm_ns) AS exposed_comm_ns, sum(exposed_memory_ns) AS exposed_memory_ns,
           sum(other_ns) AS other_ns
    FROM step_slot_breakdown(run) WHERE steady_state GROUP BY trace_id
)
SELECT trace_id, run_id, rank, num_steps, span_ns::BIGINT AS span_ns, busy_ns::BIGINT AS busy_ns,
       idle_ns::BIGINT AS idle_ns, compute_ns::BIGINT AS compute_ns,
       comm_ns::BIGINT AS comm_ns, memory_ns::BIGINT AS memory_ns, overlap_ns::BIGINT AS overlap_ns,
       exposed_comm_ns::BIGINT AS exposed_comm_ns, exposed_memory_ns::BIGINT AS exposed_memory_ns,
       other_ns::BIGINT AS other_ns
FROM stepped WHERE span_ns > 0
UNION ALL
SELECT trace_id, run_id, rank, 0 AS num_steps, span_ns, busy_ns, idle_ns, compute_ns, comm_ns, memory_ns,
       overlap_ns, exposed_comm_ns, exposed_memory_ns, other_ns
FROM window_breakdown(false, run)
WHERE span_ns > 0 AND trace_id NOT IN (SELECT trace_id FROM stepped WHERE span_ns > 0)
