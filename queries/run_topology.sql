-- name: run_topology
-- description: Per run: how its ranks sit on hosts and its layout label (the projection's inputs).
-- grain: one row per run
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- gpus_per_node and num_nodes from run.json; strategy = run.json labels.layout
-- (e.g. ddp vs fsdp at the same degrees), as in the layouts query.
-- Units: counts.
SELECT run_id, workload, num_nodes, gpus_per_node, manifest->'labels'->>'layout' AS strategy
FROM runs
WHERE $run_id IS NULL OR run_id = $run_id
ORDER BY run_id
