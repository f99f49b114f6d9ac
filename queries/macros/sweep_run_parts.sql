-- name: sweep_run_parts
-- description: Per run of a sweep: GPU-time per token and its split into compute, exposed comm (and its waiting), exposed memory, other and idle.
-- grain: one row per run that has a workload label and a throughput
-- param: sweep VARCHAR a workload, or NULL for every sweep
-- depends: run_metrics, window_breakdown, collective_waits
-- g = step_time_ns × world_size ÷ tokens_per_step (run_summary's step time):
-- GPU-nanoseconds one token costs.  Each part X_g = g × X_pct ÷ Σ of the five
-- run_summary shares (compute_pct, exposed_comm_pct, exposed_memory_pct,
-- other_pct, idle_pct: each part ÷ the rank's whole traced span, mean over
-- ranks), so the five parts sum to g.  wait_pct = per rank, the exposed waiting
-- of its collectives (collective_waits.exposed_wait_ns summed, capped at the
-- rank's union-based exposed_comm_ns because concurrent collectives each
-- count) ÷ the rank's span, averaged over ranks with a span (0 without
-- matched collectives); wait_g = g × wait_pct ÷ the same sum, ≤ exposed_comm_g.
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
    SELECT run_id, rank, span_ns, exposed_comm_ns FROM window_breakdown(false, NULL)
    WHERE span_ns > 0 AND run_id IN (SELECT run_id FROM m)
),
waits AS (
    SELECT run_id, rank, sum(exposed_wait_ns) AS exposed_wait_ns FROM collective_waits(NULL)
    WHERE run_id IN (SELECT run_id FROM m) GROUP BY run_id, rank
),
wait_share AS (
    SELECT s.run_id,
           avg(100.0 * least(coalesce(w.exposed_wait_ns, 0), s.exposed_comm_ns) / s.span_ns) AS wait_pct
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
