-- name: run_breakdown
-- description: Per run: where step time goes, as shares of the span, as ms of the step, and comm vs compute per step.
-- grain: one row per run (runs whose traces hold device activity)
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- compute_pct, exposed_comm_pct, exposed_memory_pct, other_pct, idle_pct:
-- run_summary's shares (each part ÷ the rank's window of its profiled steps,
-- gaps between steps included, or its whole trace without steps, averaged over
-- ranks; they sum to 100), the same figures, read from run_metrics.
-- compute_of_step_ns, exposed_comm_of_step_ns, exposed_memory_of_step_ns,
-- other_of_step_ns = the part inside one ProfilerStep window, averaged over
-- ranks and profiled steps (the basis of every ms-per-step figure: the same
-- compute and exposed comm as *_per_step_ns); idle_of_step_ns = run_summary's
-- step_time_ns − their sum (the rest of the step, when the device did nothing;
-- at least 0), so the five sum to the step time.  A run without ProfilerSteps:
-- each share × step_time_ns (NULL without a step time).  overlapped_comm_pct =
-- |U(compute) ∩ U(comm)| ÷ the same window, averaged over ranks (comm hidden
-- under compute; not part of the five shares).  *_per_step_ns = |U(compute)|,
-- |U(comm)|, |U(comm) \ U(compute)| inside one ProfilerStep window, averaged
-- over ranks and profiled steps (NULL when the traces have no ProfilerStep).
-- Units: *_ns nanoseconds, *_pct percent (0–100).
WITH m AS (
    SELECT run_id, world_size, step_time_ns,
           compute_pct, exposed_comm_pct, exposed_memory_pct, other_pct, idle_pct
    FROM run_metrics($run_id) WHERE compute_pct IS NOT NULL
),
whole AS (
    SELECT run_id, count(*) AS num_ranks, avg(100.0 * overlap_ns / span_ns) AS overlapped_comm_pct
    FROM steps_breakdown($run_id) GROUP BY run_id
),
per_step AS (
    SELECT run_id, count(DISTINCT step) AS num_steps,
           avg(compute_ns) AS compute_per_step_ns, avg(comm_ns) AS comm_per_step_ns,
           avg(exposed_comm_ns) AS exposed_comm_per_step_ns,
           avg(exposed_memory_ns) AS exposed_memory_per_step_ns, avg(other_ns) AS other_per_step_ns
    FROM window_breakdown(true, $run_id) WHERE span_ns > 0 GROUP BY run_id
)
SELECT m.run_id, m.world_size, w.num_ranks, m.step_time_ns,
       m.compute_pct, m.exposed_comm_pct, m.exposed_memory_pct, m.other_pct, m.idle_pct,
       coalesce(s.compute_per_step_ns, m.compute_pct / 100 * m.step_time_ns) AS compute_of_step_ns,
       coalesce(s.exposed_comm_per_step_ns, m.exposed_comm_pct / 100 * m.step_time_ns) AS exposed_comm_of_step_ns,
       coalesce(s.exposed_memory_per_step_ns, m.exposed_memory_pct / 100 * m.step_time_ns) AS exposed_memory_of_step_ns,
       coalesce(s.other_per_step_ns, m.other_pct / 100 * m.step_time_ns) AS other_of_step_ns,
       CASE WHEN s.compute_per_step_ns IS NULL THEN m.idle_pct / 100 * m.step_time_ns
            ELSE greatest(0, m.step_time_ns - s.compute_per_step_ns - s.exposed_comm_per_step_ns
                             - s.exposed_memory_per_step_ns - s.other_per_step_ns) END AS idle_of_step_ns,
       w.overlapped_comm_pct,
       s.num_steps, s.compute_per_step_ns, s.comm_per_step_ns, s.exposed_comm_per_step_ns
FROM m JOIN whole w USING (run_id) LEFT JOIN per_step s USING (run_id)
ORDER BY m.world_size, m.run_id
