-- name: exposed_comm_by_group
-- description: Exposed communication per rank split by process group and collective (which parallel dimension is exposed).
-- grain: one row per run × rank × process group × collective
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- exposed_ns = Σ |event \ U(compute)| over the group's events on the rank;
-- comm_ns = Σ event durations.  These are sums of per-event figures, so when
-- communication overlaps communication (two groups at once) the per-group
-- sums can exceed the rank's union-based comm_ns / exposed_comm_ns in
-- rank_breakdown.  exposed_pct_of_comm = 100·exposed/comm.
-- Units: *_ns nanoseconds, *_pct_of_comm percent of comm_ns.
SELECT run_id, rank, pg_name, pg_desc, collective,
       count(*) AS count,
       sum(dur_ns)::BIGINT AS comm_ns,
       sum(exposed_ns)::BIGINT AS exposed_ns,
       100.0 * sum(exposed_ns) / nullif(sum(dur_ns), 0) AS exposed_pct_of_comm
FROM comm_events($run_id)
GROUP BY ALL
ORDER BY run_id, rank, exposed_ns DESC
