-- name: overlap_headroom
-- description: Per run and process group: communication time per step against the compute still to run when it starts (overlap headroom).
-- grain: one row per run × process group (collective instances launched inside a ProfilerStep)
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- process_group = the group's description, else its name, else 'unnamed group'
-- (as in run_exposed_comm_by_group).  Per rank and profiled step (a device
-- event belongs to the step whose CPU interval launched it, as in
-- rank_step_breakdown): comm = Σ durations of the group's collective kernels
-- (waiting for a slower peer included); hideable compute = |U(compute) ∩
-- [start of the group's first collective in the step, end of the step's
-- last compute kernel]|, the compute left to run under which the group's
-- communication can hide; exposed = Σ |event \ U(compute)| (comm_events).
-- *_per_step_ns = the mean of these over the rank-steps that have the group
-- (mean over ranks and profiled steps).  headroom_ratio = hideable compute ÷
-- comm: above 1 the group's communication fits under the compute after it
-- starts, below 1 it is longer than that compute and the excess is exposed
-- (NULL when the group has no communication time).  Two groups that start
-- under the same compute each count it: the headroom of one group alone.
-- compute_per_step_ns = the step's |U(compute)| on the same rank-steps;
-- collectives_seen = the group's collective types; num_ranks = ranks with it.
-- workload, world_size: run.json's (NULL when not given).
-- Units: *_ns nanoseconds; headroom_ratio a ratio; group_size ranks.
WITH c AS (
    SELECT e.run_id, e.rank, e.trace_id, e.event_id, e.start_ns, e.dur_ns, e.exposed_ns, e.group_size,
           coalesce(e.pg_desc, e.pg_name, 'unnamed group') AS process_group,
           coalesce(e.collective, '?') AS collective, d.step
    FROM comm_events($run_id) e JOIN device_events d USING (trace_id, event_id)
    WHERE d.step IS NOT NULL
),
per_step AS (
    SELECT run_id, rank, trace_id, step, process_group, min(start_ns) AS first_start_ns,
           sum(dur_ns) AS comm_ns, sum(exposed_ns) AS exposed_ns, max(group_size) AS group_size,
           list(DISTINCT collective ORDER BY collective) AS collectives
    FROM c GROUP BY ALL
),
hideable AS (
    SELECT p.trace_id, p.step, p.process_group,
           coalesce(sum(greatest(0, least(i.end_ns, s.compute_end_ns) - greatest(i.start_ns, p.first_start_ns))), 0)
               AS hideable_ns
    FROM per_step p LEFT JOIN step_compute($run_id) s USING (trace_id, step)
    LEFT JOIN compute_islands i ON i.trace_id = p.trace_id AND i.end_ns > p.first_start_ns
         AND i.start_ns < s.compute_end_ns
    GROUP BY p.trace_id, p.step, p.process_group
),
joined AS (
    SELECT p.*, h.hideable_ns, coalesce(s.compute_ns, 0) AS compute_ns
    FROM per_step p JOIN hideable h USING (trace_id, step, process_group)
    LEFT JOIN step_compute($run_id) s USING (trace_id, step)
)
SELECT j.run_id, r.workload, r.world_size, j.process_group,
       array_to_string(list_sort(list_distinct(flatten(list(j.collectives)))), ', ') AS collectives_seen,
       max(j.group_size) AS group_size, count(DISTINCT j.rank) AS num_ranks,
       avg(j.comm_ns) AS comm_per_step_ns, avg(j.hideable_ns) AS hideable_compute_per_step_ns,
       avg(j.exposed_ns) AS exposed_per_step_ns, avg(j.compute_ns) AS compute_per_step_ns,
       avg(j.hideable_ns) / nullif(avg(j.comm_ns), 0) AS headroom_ratio
FROM joined j LEFT JOIN runs r USING (run_id)
GROUP BY j.run_id, r.workload, r.world_size, j.process_group
ORDER BY r.workload NULLS LAST, r.world_size, j.run_id, j.process_group
