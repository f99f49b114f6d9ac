-- name: hta_merged
-- description: HTA's merge_kernel_intervals per trace and kernel set.
-- grain: one row per trace × kernel set ('all', 'COMPUTATION', 'COMMUNICATION', 'COMP_OR_COMM'; and
--   'all:clamped', 'COMPUTATION:clamped' for a trace with an inverted event, see below)
-- param: run VARCHAR a run_id, or NULL for every run
-- depends: hta_events
-- merged_ns = length of the merged intervals; first_ns = first start;
-- last_end_ns = the end of the last merged interval (in start order), as HTA
-- takes it.
-- Inverted events: on an ns-resolution trace an event shorter than a µs that
-- crosses no whole µs is [ceil(ts), floor(end)] = [k + 1, k] after HTA's
-- rounding, a length of -1 µs, which HTA merges as it is (its merged length can
-- go negative).  The ':clamped' sets take such an event as zero length at its
-- rounded start (end = start), as HTA's critical-path analysis takes a -1 µs
-- edge as 0; they exist only for traces that have an inverted event.
-- Units: *_ns nanoseconds.
WITH e AS (
    SELECT trace_id, run_id, rank, event_id, hta_kind, h_ts_ns, h_end_ns FROM hta_events(run)
),
inverted AS (
    SELECT DISTINCT trace_id FROM e WHERE h_end_ns < h_ts_ns
),
sets AS (
    SELECT trace_id, run_id, rank, event_id, 'all' AS set_name, h_ts_ns AS ts_ns, h_end_ns AS end_ns
    FROM e
    UNION ALL
    SELECT trace_id, run_id, rank, event_id, hta_kind, h_ts_ns, h_end_ns FROM e
    WHERE hta_kind IN ('COMPUTATION', 'COMMUNICATION')
    UNION ALL
    SELECT trace_id, run_id, rank, event_id, 'COMP_OR_COMM', h_ts_ns, h_end_ns FROM e
    WHERE hta_kind IN ('COMPUTATION', 'COMMUNICATION')
    UNION ALL
    SELECT trace_id, run_id, rank, event_id, 'all:clamped', h_ts_ns, greatest(h_end_ns, h_ts_ns) FROM e
    WHERE trace_id IN (SELECT trace_id FROM inverted)
    UNION ALL
    SELECT trace_id, run_id, rank, event_id, 'COMPUTATION:clamped', h_ts_ns, greatest(h_end_ns, h_ts_ns) FROM e
    WHERE hta_kind = 'COMPUTATION' AND trace_id IN (SELECT trace_id FROM inverted)
),
marked AS (
    -- HTA: group = (ts > end.shift().cummax()).cumsum()
    SELECT *, CASE WHEN ts_ns > max(end_ns) OVER (
                  PARTITION BY trace_id, set_name ORDER BY ts_ns, end_ns, event_id
                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) THEN 1 ELSE 0 END AS new_group
    FROM sets
),
grouped AS (
    SELECT *, sum(new_group) OVER (PARTITION BY trace_id, set_name ORDER BY ts_ns, end_ns, event_id
                                   ROWS UNBOUNDED PRECEDING) AS grp
    FROM marked
),
merged AS (
    SELECT trace_id, run_id, rank, set_name, min(ts_ns) AS ts_ns, max(end_ns) AS end_ns
    FROM grouped GROUP BY trace_id, run_id, rank, set_name, grp
)
SELECT trace_id, run_id, rank, set_name,
       sum(end_ns - ts_ns)::BIGINT AS merged_ns,
       min(ts_ns) AS first_ns,
       arg_max(end_ns, ts_ns) AS last_end_ns
FROM merged GROUP BY trace_id, run_id, rank, set_name
