-- name: run_group_exposed
-- description: Per run, exposed communication by process group and collective (run_exposed_comm_by_group's relation).
-- grain: one row per run × process group × collective
-- param: run VARCHAR a run_id, or NULL for every run
-- depends: window_breakdown, comm_events
-- process_group = the group's description, else its name, else 'unnamed group'.
-- On each rank: the group's exposed time = Σ over its comm events of
-- |event \ U(compute)| (per event, so concurrent collectives each count);
-- group_exposed_comm_pct = that summed over the run's ranks ÷ their whole
-- traced spans summed (a rank without the group counts 0; one aggregate, as
-- run_summary's shares: docs/metrics.md).
-- exposed_per_rank_ns / comm_per_rank_ns = Σ over the run's events ÷ ranks; count = events.
-- Units: *_ns nanoseconds, *_pct percent (0–100).
WITH spans AS (
    SELECT run_id, rank, span_ns FROM window_breakdown(false, run) WHERE span_ns > 0
),
ranks AS (
    SELECT run_id, count(*) AS num_ranks, sum(span_ns) AS span_ns FROM spans GROUP BY run_id
),
per_rank AS (
    SELECT run_id, rank, coalesce(pg_desc, pg_name, 'unnamed group') AS process_group,
           coalesce(collective, '?') AS collective,
           count(*) AS count, sum(dur_ns) AS comm_ns, sum(exposed_ns) AS exposed_ns
    FROM comm_events(run) GROUP BY ALL
)
SELECT p.run_id, p.process_group, p.collective, r.num_ranks,
       sum(p.count)::BIGINT AS count,
       sum(p.comm_ns) / r.num_ranks AS comm_per_rank_ns,
       sum(p.exposed_ns) / r.num_ranks AS exposed_per_rank_ns,
       100.0 * sum(p.exposed_ns) / r.span_ns AS group_exposed_comm_pct
FROM per_rank p JOIN spans s USING (run_id, rank) JOIN ranks r USING (run_id)
GROUP BY p.run_id, p.process_group, p.collective, r.num_ranks, r.span_ns
