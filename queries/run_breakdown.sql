-- name: run_breakdown
-- description: Per run: where step time goes, as shares of the span, as ms of the step, and comm vs compute per step.
-- grain: one row per run (runs whose traces hold device activity)
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- compute_pct, exposed_comm_pct, exposed_memory_pct, other_pct, idle_pct:
-- run_summary's shares (each part summed over the ranks' steady-state device
-- slots ÷ their summed span, or over the whole traces without steps; they sum
-- to 100).  The ms of a step are on one basis (docs/metrics.md "The step
-- model"): step_basis 'device_period' where the traces have ProfilerSteps with
-- device work, step_basis_ns = run_summary.device_step_period_ns (Σ span ÷ Σ
-- steady-state slots, here unrounded); compute_of_step_ns, exposed_comm_of_step_ns,
-- exposed_memory_of_step_ns, other_of_step_ns, idle_of_step_ns = each part
-- summed over the same slots ÷ their count, so each is its share ×
-- step_basis_ns and the five sum to it (the same compute and exposed comm as
-- *_per_step_ns; idle_of_step_ns = idle_pct × step_basis_ns, the idle chart's
-- and explain's figure).  A run without ProfilerSteps: each share ×
-- step_time_ns (NULL without a step time; step_basis 'step_time').
-- step_time_ns: run_summary's (the host's step, or the device period where the
-- device runs behind the host: run_summary.step_time_source).
-- overlapped_comm_pct = |U(compute) ∩ U(comm)| ÷ the same window, summed the
-- same way (comm hidden under compute; not part of the five shares).
-- *_per_step_ns = |U(compute)|, |U(comm)|, |U(comm) \ U(compute)| inside one
-- steady-state device slot, mean over ranks × slots (NULL when the traces have
-- no ProfilerStep).  device_step_period_ns: run_summary's.
-- Units: *_ns nanoseconds, *_pct percent (0–100).
WITH m AS (
    SELECT run_id, world_size, step_time_ns, device_step_period_ns,
           compute_pct, exposed_comm_pct, exposed_memory_pct, other_pct, idle_pct
    FROM run_metrics($run_id) WHERE compute_pct IS NOT NULL
),
whole AS (
    SELECT run_id, count(*) AS num_ranks, 100.0 * sum(overlap_ns) / sum(span_ns) AS overlapped_comm_pct
    FROM steps_breakdown($run_id) GROUP BY run_id
),
per_step AS (
    -- the steady-state slots (step_slot_breakdown.steady_state), the window of the shares
    SELECT run_id, count(DISTINCT step) AS num_steps,
           avg(compute_ns) AS compute_per_step_ns, avg(comm_ns) AS comm_per_step_ns,
           avg(exposed_comm_ns) AS exposed_comm_per_step_ns,
           avg(exposed_memory_ns) AS exposed_memory_per_step_ns, avg(other_ns) AS other_per_step_ns,
           avg(idle_ns) AS idle_per_step_ns, avg(span_ns) AS slot_ns
    FROM step_slot_breakdown($run_id) WHERE steady_state
    GROUP BY run_id
),
based AS (
    SELECT m.*, s.* EXCLUDE (run_id),
           CASE WHEN s.compute_per_step_ns IS NOT NULL THEN 'device_period' ELSE 'step_time' END AS step_basis
    FROM m LEFT JOIN per_step s USING (run_id)
)
SELECT b.run_id, b.world_size, w.num_ranks, b.step_time_ns, b.device_step_period_ns,
       b.compute_pct, b.exposed_comm_pct, b.exposed_memory_pct, b.other_pct, b.idle_pct,
       b.step_basis, CASE b.step_basis WHEN 'device_period' THEN b.slot_ns ELSE b.step_time_ns END AS step_basis_ns,
       coalesce(b.compute_per_step_ns, b.compute_pct / 100 * b.step_time_ns) AS compute_of_step_ns,
       coalesce(b.exposed_comm_per_step_ns, b.exposed_comm_pct / 100 * b.step_time_ns) AS exposed_comm_of_step_ns,
       coalesce(b.exposed_memory_per_step_ns, b.exposed_memory_pct / 100 * b.step_time_ns) AS exposed_memory_of_step_ns,
       coalesce(b.other_per_step_ns, b.other_pct / 100 * b.step_time_ns) AS other_of_step_ns,
       coalesce(b.idle_per_step_ns, b.idle_pct / 100 * b.step_time_ns) AS idle_of_step_ns,
       w.overlapped_comm_pct,
       b.num_steps, b.compute_per_step_ns, b.comm_per_step_ns, b.exposed_comm_per_step_ns
FROM based b JOIN whole w USING (run_id)
ORDER BY b.world_size, b.run_id
