-- name: scaling
-- description: Scaling across runs of a sweep: speedup, scaling efficiency, marginal tokens/s per added GPU.
-- grain: one row per run that has a workload label and a throughput
-- param: workload VARCHAR optional; only this sweep (NULL: every sweep)
-- A sweep = the runs sharing run.json `workload`.  Baseline = the run with the
-- fewest GPUs (ties: the first run_id).  speedup = tokens/s ÷ baseline
-- tokens/s.  scaling_efficiency_vs_sweep_baseline_pct = 100 · speedup ÷ (GPUs ÷
-- baseline GPUs) for strong scaling (fixed global batch), 100 · per-GPU tokens/s ÷
-- baseline per-GPU tokens/s for weak scaling (scaling NULL counts as strong): against
-- the sweep's baseline, whatever its layout (`scaletrace project` also gives
-- scaling_efficiency_vs_layout_baseline_pct, against the fewest-GPU run of the
-- same layout family).
-- marginal_tokens_per_s_per_gpu = (tokens/s − best tokens/s at the next
-- smaller GPU count) ÷ (GPUs − that count): what each added GPU bought.
-- Units: tokens per second; *_pct percent; speedup a ratio.
WITH m AS (
    SELECT * FROM run_metrics(NULL)
    WHERE workload IS NOT NULL AND tokens_per_s IS NOT NULL AND ($workload IS NULL OR workload = $workload)
),
baseline AS (
    SELECT workload, arg_min(run_id, (world_size, run_id)) AS baseline_run,
           arg_min(world_size, (world_size, run_id)) AS base_gpus,
           arg_min(tokens_per_s, (world_size, run_id)) AS base_tps,
           arg_min(tokens_per_s_per_gpu, (world_size, run_id)) AS base_tps_per_gpu
    FROM m GROUP BY workload
),
sizes AS (
    SELECT workload, world_size, max(tokens_per_s) AS best_tps,
           lag(world_size) OVER (PARTITION BY workload ORDER BY world_size) AS prev_gpus,
           lag(max(tokens_per_s)) OVER (PARTITION BY workload ORDER BY world_size) AS prev_tps
    FROM m GROUP BY workload, world_size
)
SELECT m.run_id, m.workload AS sweep, m.scaling, m.world_size, m.dp, m.tp, m.pp, m.cp,
       m.tokens_per_s, m.tokens_per_s_per_gpu, b.baseline_run,
       m.tokens_per_s / b.base_tps AS speedup,
       CASE WHEN m.scaling = 'weak' THEN 100.0 * m.tokens_per_s_per_gpu / b.base_tps_per_gpu
            ELSE 100.0 * (m.tokens_per_s / b.base_tps) / (m.world_size / b.base_gpus) END
           AS scaling_efficiency_vs_sweep_baseline_pct,
       (m.tokens_per_s - s.prev_tps) / (m.world_size - s.prev_gpus) AS marginal_tokens_per_s_per_gpu,
       m.mfu_pct, m.exposed_comm_pct
FROM m JOIN baseline b USING (workload) JOIN sizes s USING (workload, world_size)
ORDER BY sweep, m.world_size, m.run_id
