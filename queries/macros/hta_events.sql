-- name: hta_events
-- description: The event set and timestamps HTA 0.5.0 uses in get_temporal_breakdown / get_comm_comp_overlap, reproduced.
-- grain: one row per event HTA sees (trace × event)
-- param: run VARCHAR a run_id, or NULL for every run
--  * every event with an int `stream` arg other than -1 (kernels, memcpy,
--    memset, and the odd CPU event that carries a stream arg);
--  * when the run holds two or more distinct ProfilerSteps, only GPU events
--    launched (by correlation) from CPU events that start before the last
--    ProfilerStep of the rank starts (HTA `_filter_irrelevant_gpu_kernels`);
--  * ns-resolution traces: start rounded up and end rounded down to whole µs
--    on the double values, as HTA's `round_down_time_stamps` does;
--  * HTA's own kernel-type regexes (hta/utils/utils.py), not ours: hta_kind is
--    COMMUNICATION, MEMORY, COMPUTATION or OTHER.
-- Units: h_ts_ns, h_end_ns nanoseconds (whole µs on ns-resolution traces).
WITH tr AS (
    SELECT trace_id, run_id, rank, ts_fractional FROM traces WHERE run IS NULL OR run_id = run
),
raw AS (
    SELECT trace_id, event_id, name, ts_ns, dur_ns, correlation, stream FROM device_events
    WHERE stream IS NOT NULL AND trace_id IN (SELECT trace_id FROM tr)
    UNION ALL
    SELECT trace_id, event_id, name, ts_ns, dur_ns, correlation, stream FROM cpu_events
    WHERE trace_id IN (SELECT trace_id FROM tr)
),
timed AS (
    -- HTA's GPU kernel: stream >= 0 and correlation >= 0; it sees an event
    -- when its stream is not -1.  ns traces: the double value of a µs
    -- timestamp, correctly rounded like Python's json, then ceil / floor.
    SELECT raw.*, tr.run_id, tr.rank,
           coalesce(stream >= 0 AND correlation >= 0, false) AS is_gpu,
           coalesce(stream <> -1, false) AS visible,
           CASE WHEN tr.ts_fractional THEN
               1000 * ceil(CAST(printf('%d.%03d', ts_ns // 1000, ts_ns % 1000) AS DOUBLE))::BIGINT
           ELSE ts_ns END AS h_ts_ns,
           CASE WHEN tr.ts_fractional THEN
               1000 * floor(CAST(printf('%d.%03d', ts_ns // 1000, ts_ns % 1000) AS DOUBLE)
                          + CAST(printf('%d.%03d', dur_ns // 1000, dur_ns % 1000) AS DOUBLE))::BIGINT
           ELSE ts_ns + dur_ns END AS h_end_ns
    FROM raw JOIN tr USING (trace_id)
),
step_names AS (
    SELECT run_id, count(DISTINCT name) AS n FROM timed
    WHERE name LIKE '%ProfilerStep%' GROUP BY run_id
),
last_step AS (
    SELECT trace_id, max(h_ts_ns) AS last_start_ns FROM timed
    WHERE NOT is_gpu AND name LIKE '%ProfilerStep%' GROUP BY trace_id
),
launched AS (
    SELECT DISTINCT t.trace_id, t.correlation FROM timed t JOIN last_step l USING (trace_id)
    WHERE NOT t.is_gpu AND t.correlation IS NOT NULL AND t.h_ts_ns < l.last_start_ns
),
kept AS (
    SELECT t.* FROM timed t
    LEFT JOIN step_names s USING (run_id)
    LEFT JOIN last_step l USING (trace_id)
    LEFT JOIN launched c ON c.trace_id = t.trace_id AND c.correlation = t.correlation AND t.is_gpu
    WHERE t.visible AND (coalesce(s.n, 0) < 2
                         OR (t.is_gpu AND c.trace_id IS NOT NULL)
                         OR (NOT t.is_gpu AND t.h_ts_ns < l.last_start_ns))
)
SELECT trace_id, run_id, rank, event_id, name, h_ts_ns, h_end_ns,
       CASE WHEN regexp_matches(name, '^nccl.*Kernel') THEN 'COMMUNICATION'
            WHEN regexp_matches(name, '^(Memcpy|Memset|dma)') THEN 'MEMORY'
            WHEN NOT regexp_matches(name, '^(nccl.*Kernel|.*Memcpy|Memset|.*Sync)') THEN 'COMPUTATION'
            ELSE 'OTHER' END AS hta_kind
FROM kept
