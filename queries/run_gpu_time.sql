-- name: run_gpu_time
-- description: Per run of a sweep: GPU-time per token and its split into compute, exposed comm (and its waiting), exposed memory, other and idle.
-- grain: one row per run that has a workload label and a throughput
-- param: workload VARCHAR optional; only this sweep (NULL: every sweep)
-- total_gpu_ns_per_token = step_time_ns × world_size ÷ tokens_per_step
-- (run_summary's step time); each part = that × the part's run_summary share ÷
-- the sum of the five shares, so compute + exposed_comm + exposed_memory +
-- other + idle = total; exposed_comm_wait (waiting for a slower peer, from
-- rank_wait's exposed_wait_ns, capped at the rank's exposed comm) is a part
-- of exposed_comm.  is_best: the highest tokens/s of the sweep at its GPU count;
-- is_baseline: the sweep's run with the fewest GPUs (both as `scaling`).
-- The definitions are macros/sweep_run_parts.sql, shared with scaling_attribution.
-- Units: *_gpu_ns_per_token GPU-nanoseconds per token; tokens_per_s tokens per second.
SELECT run_id, workload AS sweep, world_size, tokens_per_s,
       g AS total_gpu_ns_per_token, compute_g AS compute_gpu_ns_per_token,
       exposed_comm_g AS exposed_comm_gpu_ns_per_token, wait_g AS exposed_comm_wait_gpu_ns_per_token,
       exposed_memory_g AS exposed_memory_gpu_ns_per_token, other_g AS other_gpu_ns_per_token,
       idle_g AS idle_gpu_ns_per_token, is_best, is_baseline
FROM sweep_run_parts($workload)
ORDER BY sweep, world_size, run_id
