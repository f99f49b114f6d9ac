-- name: run_collectives
-- description: Per run and collective type: kernel time per step and median bus bandwidth (for scaling charts).
-- grain: one row per run × collective type
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- Only comm events launched inside a ProfilerStep count.  time_per_step_ns =
-- Σ of their durations ÷ (ranks × profiled steps): one rank's kernel time of
-- this collective type per step, averaged over ranks and steps (waiting for
-- peers included; concurrent kernels each count).  mean_duration_ns = per
-- instance.  median_busbw_gbps = median over instances with a known
-- bandwidth (nccl-tests convention, see comm_events); NULL when the traces
-- record no message sizes.
-- Units: *_ns nanoseconds, *_gbps GB/s (1e9 bytes/s).
WITH e AS (
    SELECT c.run_id, c.rank, coalesce(c.collective, '?') AS collective, c.dur_ns, c.busbw_gbps, d.step
    FROM comm_events($run_id) c JOIN device_events d USING (trace_id, event_id)
    WHERE d.step IS NOT NULL
),
windows AS (
    SELECT run_id, count(DISTINCT rank) AS num_ranks, count(DISTINCT step) AS num_steps
    FROM steps WHERE $run_id IS NULL OR run_id = $run_id GROUP BY run_id
)
SELECT e.run_id, e.collective, w.num_ranks, w.num_steps,
       count(*) AS count,
       sum(e.dur_ns) / (w.num_ranks * w.num_steps) AS time_per_step_ns,
       avg(e.dur_ns) AS mean_duration_ns,
       median(e.busbw_gbps) AS median_busbw_gbps
FROM e JOIN windows w USING (run_id)
GROUP BY e.run_id, e.collective, w.num_ranks, w.num_steps
ORDER BY e.run_id, time_per_step_ns DESC
