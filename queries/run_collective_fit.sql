-- name: run_collective_fit
-- description: Per run, process group and collective: what the projection fits: instances per step, message size, transfer, waiting, overlap room.
-- grain: one row per run × process group × collective type (instances launched inside a ProfilerStep)
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- Over the collective instances launched inside a ProfilerStep (the step of
-- the launching call, as in rank_step_breakdown):
-- instances_per_step_ratio = instances ÷ (ranks × steps that have one);
-- message_bytes = median S (as in algbw: out-bytes for all_gather, in-bytes
-- otherwise; NULL when the trace has no sizes); transfer_ns = median over
-- matched instances of the fastest rank's duration (collective_skew's
-- transfer: waiting excluded); wait_ns = median over rank-instances of
-- duration − transfer; room_ratio = median over rank-instances of the
-- compute that runs on the rank after the instance starts, up to the end of
-- its step's last compute kernel (|U(compute) ∩ [start, end of the step's
-- compute]|), ÷ the step's compute |U(compute)| on that rank: how much of
-- the step's compute a collective launched at that point can hide under
-- (queries/analysis/projection.py's overlap capacity).
-- Units: *_ns nanoseconds, *_bytes bytes, *_ratio a fraction (0–1).
WITH c AS (
    SELECT w.*, d.step FROM collective_waits($run_id) w JOIN device_events d USING (trace_id, event_id)
    WHERE d.step IS NOT NULL
),
after AS (
    SELECT c.trace_id, c.event_id,
           coalesce(sum(greatest(0, least(i.end_ns, s.compute_end_ns) - greatest(i.start_ns, c.start_ns))), 0)
               AS after_ns
    FROM c JOIN step_compute($run_id) s USING (trace_id, step)
    LEFT JOIN compute_islands i ON i.trace_id = c.trace_id AND i.end_ns > c.start_ns
         AND i.start_ns < s.compute_end_ns
    GROUP BY c.trace_id, c.event_id
),
per AS (
    SELECT c.*, a.after_ns / nullif(s.compute_ns, 0) AS room
    FROM c LEFT JOIN after a USING (trace_id, event_id) LEFT JOIN step_compute($run_id) s USING (trace_id, step)
),
transfer AS (
    SELECT run_id, pg_key, collective, median(transfer_ns)::BIGINT AS transfer_ns
    FROM (SELECT run_id, pg_key, collective, seq, min(transfer_ns) AS transfer_ns FROM per
          WHERE collective IS NOT NULL GROUP BY ALL)
    GROUP BY ALL
),
agg AS (
    SELECT run_id, pg_key, collective, any_value(pg_name) AS pg_name, any_value(pg_desc) AS pg_desc,
           max(group_size) AS group_size,
           count(*) / count(DISTINCT (rank, step)) AS instances_per_step_ratio,
           median(algbw_bytes)::BIGINT AS message_bytes,
           median(wait_ns)::BIGINT AS wait_ns,
           median(room) AS room_ratio
    FROM per WHERE collective IS NOT NULL GROUP BY run_id, pg_key, collective
)
SELECT a.run_id, a.pg_name, a.pg_desc, a.collective, a.group_size, a.instances_per_step_ratio, a.message_bytes,
       t.transfer_ns, a.wait_ns, a.room_ratio
FROM agg a JOIN transfer t USING (run_id, pg_key, collective)
ORDER BY a.run_id, a.pg_name, a.collective
