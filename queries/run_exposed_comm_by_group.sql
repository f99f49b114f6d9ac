-- name: run_exposed_comm_by_group
-- description: Per run, exposed communication by process group and collective, as a share of the span averaged over ranks.
-- grain: one row per run × process group × collective
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- process_group = the group's description, else its name, else 'unnamed group'.
-- On each rank: the group's exposed time = Σ over its comm events of
-- |event \ U(compute)| (per event, so concurrent collectives each count);
-- group_exposed_comm_pct = that ÷ the rank's whole traced span, averaged over
-- the run's ranks (a rank without the group counts 0).  Summed over a run's
-- groups it is at least run_summary's exposed_comm_pct (equal when no two
-- collectives run at once), so it is named apart.  exposed_per_rank_ns /
-- comm_per_rank_ns = Σ over the run's events ÷ ranks; count = events.
-- Units: *_ns nanoseconds, *_pct percent (0–100).
-- (The relation is macros/run_group_exposed.sql, shared with scaling_attribution_by_group.)
SELECT * FROM run_group_exposed($run_id)
ORDER BY run_id, group_exposed_comm_pct DESC
