-- name: sweep_run_parts
-- description: Per run of a sweep: GPU-time per token and its split into compute, exposed comm (and its waiting), exposed memory, other and idle.
-- grain: one row per run that has a workload label and a throughput
-- param: sweep VARCHAR a workload, or NULL for every sweep
-- depends: run_metrics, steps_breakdown, step_windows, collective_waits
-- g = step_time_ns × world_size ÷ tokens_per_step (run_summary's step time):
-- GPU-nanoseconds one token costs.  Each part X_g = g × X_pct ÷ Σ of the five
-- run_summary shares (compute_pct, exposed_comm_pct, exposed_memory_pct,
-- other_pct, idle_pct: each part over the ranks' steady-state device slots,
-- steps_breakdown, Σ ÷ Σ span), so the five parts sum to g.  wait_pct =
-- the exposed waiting of the ranks' collectives in that window (those its
-- steady-state steps launched, step_windows.steady_state; every one without steps:
-- collective_waits.exposed_wait_ns summed, capped per rank at its union-based
-- exposed_comm_ns because concurrent collectives each count), Σ over ranks ÷ Σ
-- span (0 without matched collectives); wait_g = g × wait_pct ÷ the same sum, ≤ exposed_comm_g.
-- is_best: the highest tokens/s at its GPU count (ties: first run_id);
-- is_baseline: the fewest GPUs (ties: first run_id); both as `scaling`.
-- Units: *_g GPU-ns per token; *_pct percent of the span; tokens_per_s tokens per second.
WITH m AS (
    SELECT run_id, workload, world_size, step_time_ns, tokens_per_step, tokens_per_s,
           compute_pct, exposed_comm_pct, exposed_memory_pct, other_pct, idle_pct
    FROM run_metrics(NULL)
    WHERE workload IS NOT NULL AND tokens_per_s IS NOT NULL AND (sweep IS NULL OR workload = sweep)
),
spans AS (
    SELECT trace_id, run_id, rank, num_steps, span_ns, exposed_comm_ns FROM steps_breakdown(NULL)
    WHERE run_id IN (SELECT run_id FROM m)
),
waits AS (
    SELECT w.run_id, w.rank, sum(w.exposed_wait_ns) AS exposed_wait_ns
    FROM collective_waits(NULL) w JOIN spans s ON s.trace_id = w.trace_id
    JOIN device_events d ON d.trace_id = w.trace_id AND d.event_id = w.event_id
    WHERE s.num_steps = 0
       OR (d.trace_id, d.step) IN (SELECT (trace_id, step) FROM step_windows(NULL) WHERE steady_state)
    GROUP BY w.run_id, w.rank
),
wait_share AS (
    SELECT s.run_id,
           100.0 * sum(least(coalesce(w.exposed_wait_ns, 0), s.exposed_comm_ns)) / sum(s.span_ns) AS wait_pct
    FROM spans s LEFT JOIN waits w USING (run_id, rank) GROUP BY s.run_id
),
g AS (
    SELECT m.*, coalesce(ws.wait_pct, 0) AS wait_pct,
           m.step_time_ns::DOUBLE * m.world_size / m.tokens_per_step AS g,
           g / (m.compute_pct + m.exposed_comm_pct + m.exposed_memory_pct + m.other_pct + m.idle_pct) AS per_pct
    FROM m LEFT JOIN wait_share ws USING (run_id)
)
SELECT run_id, workload, world_size, tokens_per_s, g,
       per_pct * compute_pct AS compute_g, per_pct * exposed_comm_pct AS exposed_comm_g,
       per_pct * wait_pct AS wait_g, per_pct * exposed_memory_pct AS exposed_memory_g,
       per_pct * other_pct AS other_g, per_pct * idle_pct AS idle_g, wait_pct,
       run_id = arg_min(run_id, (-tokens_per_s, run_id)) OVER (PARTITION BY workload, world_size) AS is_best,
       run_id = arg_min(run_id, (world_size, run_id)) OVER (PARTITION BY workload) AS is_baseline
FROM g
