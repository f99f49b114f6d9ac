-- name: collective_waits
-- description: matched_collectives with the exposed part of each instance split into waiting and transfer.
-- grain: one row per run × rank × communication device event
-- param: run VARCHAR a run_id, or NULL for every run
-- depends: matched_collectives
-- The wait is taken to be the *first* wait_ns of the kernel (it starts, waits
-- for its peers, then transfers):
-- exposed_wait_ns = |[start, start + wait) \ U(compute)|,
-- exposed_transfer_ns = exposed_ns − exposed_wait_ns.
-- Units: *_ns nanoseconds.
WITH j AS (SELECT * FROM matched_collectives(run)),
compute AS (
    SELECT trace_id, start_ns, end_ns FROM compute_islands WHERE run IS NULL OR run_id = run
),
hidden_wait AS (
    SELECT j.trace_id, j.event_id,
           sum(least(j.start_ns + j.wait_ns, i.end_ns) - greatest(j.start_ns, i.start_ns)) AS hidden_ns
    FROM j JOIN compute i ON i.trace_id = j.trace_id
         AND i.start_ns < j.start_ns + j.wait_ns AND i.end_ns > j.start_ns
    GROUP BY j.trace_id, j.event_id
)
SELECT j.*, (j.wait_ns - coalesce(h.hidden_ns, 0))::BIGINT AS exposed_wait_ns,
       (j.exposed_ns - j.wait_ns + coalesce(h.hidden_ns, 0))::BIGINT AS exposed_transfer_ns
FROM j LEFT JOIN hidden_wait h USING (trace_id, event_id)
