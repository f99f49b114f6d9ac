-- name: run_exposed_comm_by_group
-- description: Per run, exposed communication by process group and collective, as a share of the ranks' summed span.
-- grain: one row per run × process group × collective
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- process_group = the group's description, else its name, else 'unnamed group'.
-- On each rank: the group's exposed time = Σ over its comm events of
-- |event \ U(compute)| (per event, so concurrent collectives each count);
-- group_exposed_comm_pct = that summed over the run's ranks ÷ their whole
-- traced spans summed (a rank without the group counts 0).  Summed over a run's
-- groups it is at least run_summary's exposed_comm_pct (equal when no two
-- collectives run at once), so it is named apart.  exposed_per_rank_ns /
-- comm_per_rank_ns = Σ over the run's events ÷ ranks; count = events.
-- warning: NULL, or (group_exposed_comm_pct above 100, possible only when the
-- group's collectives overlap one another) what that figure is.
-- Units: *_ns nanoseconds, *_pct percent (above 100 only with a warning).
-- (The relation is macros/run_group_exposed.sql, shared with scaling_attribution_by_group.)
SELECT *,
       CASE WHEN group_exposed_comm_pct > 100
            THEN format('above 100 %: {:.0f} % of the span, as the group''s collectives overlap one another, '
                        'each counted in full', group_exposed_comm_pct) END AS warning
FROM run_group_exposed($run_id)
ORDER BY run_id, group_exposed_comm_pct DESC
