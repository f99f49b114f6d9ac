-- name: scaling_attribution_by_group
-- description: The exposed-communication part of scaling_attribution split by process group and collective: which parallel dimension cost the GPU-time and the efficiency.
-- grain: one row per sweep × (from run → to run) × process group × collective (pairs as in scaling_attribution)
-- param: workload VARCHAR optional; only this sweep (NULL: every sweep)
-- Per run, each group's raw share is run_exposed_comm_by_group's
-- group_exposed_comm_pct (Σ over its kernels of |event \ U(compute)| ÷ the
-- rank's span, mean over ranks).  Concurrent collectives each count there, so
-- the groups of a run can sum to more than its union-based exposed comm; to
-- split scaling_attribution's exposed comm exactly, each run's groups share
-- its exposed_comm part in proportion to their raw shares:
--   group_g = exposed_comm_g × group_exposed_comm_pct ÷ Σ over the run's groups
-- (the factor is 1 when no two collectives run at once).  A run with exposed
-- communication but no comm kernels in `collectives` gets one row
-- process_group = '(no collective metadata)'.  A group absent from one run of
-- the pair counts 0 there.
-- delta_exposed_comm_gpu_ns_per_token = group_g(to) − group_g(from); summed over
-- a pair's groups it equals scaling_attribution's delta_exposed_comm.
-- exposed_comm_lost_pts = k_pts × that delta (k_pts = 100 · g_base ÷ (g_from ·
-- g_to), see scaling_attribution); summed over groups it equals
-- scaling_attribution's exposed_comm_lost_pts.
-- Units: *_gpu_ns_per_token GPU-ns per token; group_exposed_comm_pct percent of
-- the span (mean over ranks); *_pts points of scaling efficiency (positive: lost).
WITH p AS (SELECT * FROM sweep_pairs($workload)),
r AS (SELECT * FROM sweep_run_parts($workload)),
raw AS (
    SELECT run_id, process_group, collective, group_exposed_comm_pct
    FROM run_group_exposed(NULL) WHERE run_id IN (SELECT run_id FROM r)
),
tot AS (SELECT run_id, sum(group_exposed_comm_pct) AS total_pct FROM raw GROUP BY run_id),
groups AS (
    SELECT r.run_id, raw.process_group, raw.collective, raw.group_exposed_comm_pct,
           r.exposed_comm_g * raw.group_exposed_comm_pct / tot.total_pct AS group_g
    FROM r JOIN raw USING (run_id) JOIN tot USING (run_id) WHERE tot.total_pct > 0
    UNION ALL
    SELECT r.run_id, '(no collective metadata)', '?', NULL, r.exposed_comm_g
    FROM r LEFT JOIN tot USING (run_id)
    WHERE coalesce(tot.total_pct, 0) = 0 AND r.exposed_comm_g > 0
),
keys AS (
    SELECT DISTINCT p.workload, p.vs, p.from_run, p.to_run, gr.process_group, gr.collective
    FROM p JOIN groups gr ON gr.run_id IN (p.from_run, p.to_run)
)
SELECT k.workload AS sweep, k.vs, k.from_run, k.to_run, p.from_gpus, p.to_gpus,
       k.process_group, k.collective,
       coalesce(f.group_exposed_comm_pct, 0) AS from_group_exposed_comm_pct,
       coalesce(t.group_exposed_comm_pct, 0) AS to_group_exposed_comm_pct,
       coalesce(f.group_g, 0) AS from_exposed_comm_gpu_ns_per_token,
       coalesce(t.group_g, 0) AS to_exposed_comm_gpu_ns_per_token,
       coalesce(t.group_g, 0) - coalesce(f.group_g, 0) AS delta_exposed_comm_gpu_ns_per_token,
       p.k_pts * (coalesce(t.group_g, 0) - coalesce(f.group_g, 0)) AS exposed_comm_lost_pts
FROM keys k JOIN p USING (workload, vs, from_run, to_run)
LEFT JOIN groups f ON f.run_id = k.from_run AND f.process_group = k.process_group AND f.collective = k.collective
LEFT JOIN groups t ON t.run_id = k.to_run AND t.process_group = k.process_group AND t.collective = k.collective
ORDER BY sweep, k.vs DESC, p.to_gpus, p.from_gpus, k.to_run, abs(delta_exposed_comm_gpu_ns_per_token) DESC
