-- name: layouts
-- description: Parallel layouts side by side: runs of one workload at the same GPU count by (dp, tp, pp, cp).
-- grain: one row per run with a workload label, grouped by workload × world_size
-- param: world_size BIGINT 1.. optional; only this GPU count (NULL: every count)
-- layout = 'dp{dp}-tp{tp}-pp{pp}-cp{cp}' from run_summary's degrees (run.json,
-- --meta or the trace's process groups: parallel_basis; NULL degrees print
-- as ?); strategy = run.json labels.layout when given (e.g. ddp vs fsdp at
-- the same degrees).  layouts_at_size = runs sharing workload and world size;
-- rank_by_tokens_per_s = 1 for the fastest layout of its group.
-- Units: tokens per second, *_pct percent, *_ns nanoseconds.
WITH m AS (
    SELECT * FROM run_metrics(NULL)
    WHERE workload IS NOT NULL AND ($world_size IS NULL OR world_size = $world_size)
)
SELECT workload, world_size, run_id,
       'dp' || coalesce(dp::VARCHAR, '?') || '-tp' || coalesce(tp::VARCHAR, '?') ||
       '-pp' || coalesce(pp::VARCHAR, '?') || '-cp' || coalesce(cp::VARCHAR, '?') AS layout,
       r.manifest->'labels'->>'layout' AS strategy,
       dp, tp, pp, cp, step_time_ns, tokens_per_s, mfu_pct, exposed_comm_pct,
       count(*) OVER (PARTITION BY workload, world_size) AS layouts_at_size,
       rank() OVER (PARTITION BY workload, world_size ORDER BY tokens_per_s DESC NULLS LAST)
           AS rank_by_tokens_per_s
FROM m LEFT JOIN (SELECT run_id, manifest FROM runs) r USING (run_id)
ORDER BY workload, world_size, rank_by_tokens_per_s
