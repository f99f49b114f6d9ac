-- name: sweep_pairs
-- description: The run pairs a scaling explanation compares: best runs of consecutive GPU counts, and the baseline against every other run.
-- grain: one row per sweep × (from run → to run)
-- param: sweep VARCHAR a workload, or NULL for every sweep
-- depends: sweep_run_parts
-- vs = 'previous': the best run (highest tokens/s) at each GPU count → the best
-- run at the next larger GPU count of the sweep; vs = 'baseline': the sweep's
-- baseline (fewest GPUs, ties: first run_id) → every other run of the sweep.
-- k_pts = 100 · g_base ÷ (g_from · g_to): points of scaling efficiency (vs the
-- baseline) per GPU-ns/token of change, since E = 100 · g_base ÷ g gives
-- E(from) − E(to) = k_pts · (g_to − g_from).
-- Units: g_* GPU-ns per token; k_pts points per GPU-ns per token.
WITH r AS (SELECT * FROM sweep_run_parts(sweep)),
best AS (
    SELECT workload, run_id, lag(run_id) OVER (PARTITION BY workload ORDER BY world_size) AS from_run
    FROM r WHERE is_best
),
base AS (SELECT workload, run_id AS baseline_run, world_size AS baseline_gpus, g AS g_base FROM r WHERE is_baseline),
p AS (
    SELECT workload, 'previous' AS vs, from_run, run_id AS to_run FROM best WHERE from_run IS NOT NULL
    UNION ALL
    SELECT r.workload, 'baseline', b.baseline_run, r.run_id
    FROM r JOIN base b ON b.workload = r.workload AND r.run_id <> b.baseline_run
)
SELECT p.workload, p.vs, p.from_run, p.to_run, b.baseline_run, b.baseline_gpus,
       f.world_size AS from_gpus, t.world_size AS to_gpus,
       f.g AS g_from, t.g AS g_to, b.g_base, 100.0 * b.g_base / (f.g * t.g) AS k_pts
FROM p JOIN base b USING (workload)
JOIN r f ON f.run_id = p.from_run JOIN r t ON t.run_id = p.to_run
