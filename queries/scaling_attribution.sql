-- name: scaling_attribution
-- description: Where each added GPU's time went: the change of GPU-time per token between runs of a sweep, split into compute, exposed comm (of which waiting), exposed memory, other and idle; also in points of scaling efficiency.
-- grain: one row per sweep × (from run → to run): the best runs of consecutive GPU counts (vs = 'previous'), and the sweep's baseline → every other run of the sweep (vs = 'baseline')
-- param: workload VARCHAR optional; only this sweep (NULL: every sweep)
-- Runs and pairs, as `scaling` picks them: a sweep = the runs sharing
-- run.json `workload` with a throughput; best run at a GPU count = the highest
-- tokens/s (ties: the first run_id); baseline = the run with the fewest GPUs
-- (ties: the first run_id).
-- gpu_ns_per_token = step_time_ns × world_size ÷ tokens_per_step (run_summary's
-- step time): the GPU-time one token costs, constant under perfect strong and
-- weak scaling alike.
-- Parts of one run: run_summary's shares (each part ÷ the rank's whole traced
-- span, averaged over ranks: compute_pct, exposed_comm_pct, exposed_memory_pct,
-- other_pct, idle_pct) scaled to sum to gpu_ns_per_token:
--   part_gpu_ns_per_token = gpu_ns_per_token × part_pct ÷ Σ of the five pcts.
-- Waiting: per rank, the exposed waiting of its collectives (rank_wait's
-- exposed_wait_ns: Σ over its comm kernels of |[start, start + wait) \ U(compute)|,
-- capped at the rank's union-based exposed_comm_ns, since concurrent
-- collectives each count) ÷ the rank's span, averaged over ranks (0 for a rank
-- without matched collectives), scaled by the same factor: a part of
-- exposed comm, never more than it.
-- delta_X_gpu_ns_per_token = X(to) − X(from); delta_total = gpu_ns_per_token(to)
-- − gpu_ns_per_token(from), computed from the step times; the five parts
-- (compute, exposed_comm, exposed_memory, other, idle) sum to it;
-- delta_exposed_comm_wait is the waiting inside delta_exposed_comm (the rest
-- is transfer), not a sixth part.
-- Efficiency (vs the sweep's baseline, as `scaling`): E = 100 · g_base ÷ g,
-- which equals scaling_efficiency_vs_sweep_baseline_pct for strong and weak scaling alike.
-- efficiency_lost_pts = E(from) − E(to) = 100 · g_base · Δtotal ÷ (g_from · g_to),
-- and per part X_lost_pts = 100 · g_base · ΔX ÷ (g_from · g_to): exact, linear in
-- the deltas, so the five parts sum to efficiency_lost_pts.  For a row from the
-- baseline that is 100 − E(to).
-- Units: *_gpu_ns_per_token GPU-nanoseconds per token; *_pct percent;
-- *_pts percentage points of scaling efficiency (positive: lost).
-- (The per-run parts are macros/sweep_run_parts.sql, the pairs macros/sweep_pairs.sql.)
WITH p AS (SELECT * FROM sweep_pairs($workload)),
r AS (SELECT * FROM sweep_run_parts($workload)),
j AS (
    SELECT p.*,
           t.compute_g - f.compute_g AS d_compute, t.exposed_comm_g - f.exposed_comm_g AS d_exposed_comm,
           t.wait_g - f.wait_g AS d_wait, t.exposed_memory_g - f.exposed_memory_g AS d_exposed_memory,
           t.other_g - f.other_g AS d_other, t.idle_g - f.idle_g AS d_idle
    FROM p JOIN r f ON f.run_id = p.from_run JOIN r t ON t.run_id = p.to_run
)
SELECT workload AS sweep, vs, from_run, to_run, from_gpus, to_gpus,
       g_from AS from_gpu_ns_per_token, g_to AS to_gpu_ns_per_token,
       g_to - g_from AS delta_total_gpu_ns_per_token,
       d_compute AS delta_compute_gpu_ns_per_token,
       d_exposed_comm AS delta_exposed_comm_gpu_ns_per_token,
       d_wait AS delta_exposed_comm_wait_gpu_ns_per_token,
       d_exposed_memory AS delta_exposed_memory_gpu_ns_per_token,
       d_other AS delta_other_gpu_ns_per_token,
       d_idle AS delta_idle_gpu_ns_per_token,
       baseline_run, baseline_gpus,
       100.0 * g_base / g_from AS from_scaling_efficiency_pct,
       100.0 * g_base / g_to AS to_scaling_efficiency_pct,
       k_pts * (g_to - g_from) AS efficiency_lost_pts,
       k_pts * d_compute AS compute_lost_pts,
       k_pts * d_exposed_comm AS exposed_comm_lost_pts,
       k_pts * d_wait AS exposed_comm_wait_lost_pts,
       k_pts * d_exposed_memory AS exposed_memory_lost_pts,
       k_pts * d_other AS other_lost_pts,
       k_pts * d_idle AS idle_lost_pts
FROM j
ORDER BY sweep, vs DESC, to_gpus, from_gpus, to_run
