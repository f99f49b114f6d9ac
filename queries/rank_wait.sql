-- name: rank_wait
-- description: Per rank, communication split into transfer and waiting for a slow peer, exposed part too.
-- grain: one row per run × rank (ranks with communication kernels)
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- For each matched collective (see collective_skew): transfer = the fastest
-- rank's duration, wait = this rank's duration − transfer.  Summed per rank:
-- comm_ns = Σ durations = transfer_ns + wait_ns.  The wait is taken to be the
-- first part of each kernel, so exposed_ns (Σ |event \ U(compute)|) splits into
-- exposed_wait_ns and exposed_transfer_ns.  straggler_count = collectives on
-- which this rank arrived last.  wait_pct_of_comm = 100·wait/comm.  num_steps =
-- the rank's profiled steps (ProfilerStep annotations; NULL without any): the
-- report divides by it to draw ms per step, the basis of every other chart.
-- Units: *_ns nanoseconds, *_pct_of_comm percent of comm_ns.
WITH st AS (
    SELECT run_id, rank, count(DISTINCT step) AS num_steps FROM steps
    WHERE $run_id IS NULL OR run_id = $run_id GROUP BY run_id, rank
)
SELECT w.run_id, w.rank,
       count(*) AS num_collectives,
       sum(dur_ns)::BIGINT AS comm_ns,
       sum(transfer_ns)::BIGINT AS transfer_ns,
       sum(wait_ns)::BIGINT AS wait_ns,
       sum(exposed_ns)::BIGINT AS exposed_ns,
       sum(exposed_transfer_ns)::BIGINT AS exposed_transfer_ns,
       sum(exposed_wait_ns)::BIGINT AS exposed_wait_ns,
       count(*) FILTER (WHERE straggler_rank = rank AND num_ranks > 1) AS straggler_count,
       100.0 * sum(wait_ns) / nullif(sum(dur_ns), 0) AS wait_pct_of_comm,
       any_value(st.num_steps) AS num_steps
FROM collective_waits($run_id) w LEFT JOIN st USING (run_id, rank)
GROUP BY w.run_id, w.rank
ORDER BY w.run_id, w.rank
