-- name: run_breakdown
-- description: Per run: where step time goes, as shares of the span, as ms of the step, and comm vs compute per step.
-- grain: one row per run (runs whose traces hold device activity)
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- compute_pct, exposed_comm_pct, exposed_memory_pct, other_pct, idle_pct:
-- run_summary's shares (each part ÷ the rank's window of its profiled steps,
-- gaps between steps included, or its whole trace without steps, averaged over
-- ranks; they sum to 100), the same figures, read from run_metrics.
-- compute_of_step_ns, exposed_comm_of_step_ns, exposed_memory_of_step_ns,
-- other_of_step_ns = the part inside one step's device slot (docs/metrics.md
-- "The step model"), averaged over ranks and profiled steps (the basis of every
-- ms-per-step figure: the same compute and exposed comm as *_per_step_ns);
-- idle_of_step_ns = step_basis_ns − their sum, so the five sum to step_basis_ns,
-- the step's length they are drawn on: run_summary's step_time_ns
-- (step_basis 'step_time'; the idle is then the slot's idle and the rest of the
-- step, when the device did nothing), or, where the device runs behind the host
-- (run_summary.device_step_period_ns over 1.1 × the same steps' CPU time, the
-- median over the steps with device work of their slowest rank's ProfilerStep,
-- as run_summary warns; or the
-- parts alone longer than the step time), the mean device slot (step_basis
-- 'device_period': a bar is never longer than the step it is labelled with).  A
-- run without ProfilerSteps: each share × step_time_ns (NULL without a step time;
-- step_basis 'step_time').  overlapped_comm_pct = |U(compute) ∩ U(comm)| ÷ the
-- same window, averaged over ranks (comm hidden under compute; not part of the
-- five shares).  *_per_step_ns = |U(compute)|, |U(comm)|, |U(comm) \ U(compute)|
-- inside one device slot, averaged over ranks and profiled steps (NULL when the
-- traces have no ProfilerStep).  device_step_period_ns: run_summary's.
-- Units: *_ns nanoseconds, *_pct percent (0–100).
WITH m AS (
    SELECT run_id, world_size, step_time_ns, device_step_period_ns,
           compute_pct, exposed_comm_pct, exposed_memory_pct, other_pct, idle_pct
    FROM run_metrics($run_id) WHERE compute_pct IS NOT NULL
),
whole AS (
    SELECT run_id, count(*) AS num_ranks, avg(100.0 * overlap_ns / span_ns) AS overlapped_comm_pct
    FROM steps_breakdown($run_id) GROUP BY run_id
),
per_step AS (
    SELECT run_id, count(DISTINCT step) AS num_steps, avg(span_ns) AS slot_ns,
           any_value(c.cpu_step_ns) AS cpu_step_ns,
           avg(compute_ns) AS compute_per_step_ns, avg(comm_ns) AS comm_per_step_ns,
           avg(exposed_comm_ns) AS exposed_comm_per_step_ns,
           avg(exposed_memory_ns) AS exposed_memory_per_step_ns, avg(other_ns) AS other_per_step_ns
    FROM step_slot_breakdown($run_id)
    LEFT JOIN (SELECT run_id, median(cpu_ns) AS cpu_step_ns
               FROM (SELECT run_id, step, max(cpu_ns) AS cpu_ns FROM step_slot_breakdown($run_id) GROUP BY ALL)
               GROUP BY run_id) c USING (run_id)
    GROUP BY run_id
),
based AS (
    SELECT m.*, s.* EXCLUDE (run_id),
           CASE WHEN s.slot_ns IS NOT NULL
                 AND (m.step_time_ns IS NULL OR m.device_step_period_ns > 1.1 * s.cpu_step_ns
                      OR s.compute_per_step_ns + s.exposed_comm_per_step_ns + s.exposed_memory_per_step_ns
                         + s.other_per_step_ns > m.step_time_ns)
                THEN 'device_period' ELSE 'step_time' END AS step_basis
    FROM m LEFT JOIN per_step s USING (run_id)
)
SELECT b.run_id, b.world_size, w.num_ranks, b.step_time_ns, b.device_step_period_ns,
       b.compute_pct, b.exposed_comm_pct, b.exposed_memory_pct, b.other_pct, b.idle_pct,
       b.step_basis, CASE b.step_basis WHEN 'device_period' THEN b.slot_ns ELSE b.step_time_ns END AS step_basis_ns,
       coalesce(b.compute_per_step_ns, b.compute_pct / 100 * b.step_time_ns) AS compute_of_step_ns,
       coalesce(b.exposed_comm_per_step_ns, b.exposed_comm_pct / 100 * b.step_time_ns) AS exposed_comm_of_step_ns,
       coalesce(b.exposed_memory_per_step_ns, b.exposed_memory_pct / 100 * b.step_time_ns) AS exposed_memory_of_step_ns,
       coalesce(b.other_per_step_ns, b.other_pct / 100 * b.step_time_ns) AS other_of_step_ns,
       CASE WHEN b.compute_per_step_ns IS NULL THEN b.idle_pct / 100 * b.step_time_ns
            ELSE greatest(0, CASE b.step_basis WHEN 'device_period' THEN b.slot_ns ELSE b.step_time_ns END
                             - b.compute_per_step_ns - b.exposed_comm_per_step_ns
                             - b.exposed_memory_per_step_ns - b.other_per_step_ns) END AS idle_of_step_ns,
       w.overlapped_comm_pct,
       b.num_steps, b.compute_per_step_ns, b.comm_per_step_ns, b.exposed_comm_per_step_ns
FROM based b JOIN whole w USING (run_id)
ORDER BY b.world_size, b.run_id
