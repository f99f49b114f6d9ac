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
--  * launch_h_ts_ns (GPU kernels): the rounded start of the CPU event HTA links
--    the kernel to (its index_correlation: the last CPU event in the file with
--    the same correlation), NULL when that event is not in HTA's filtered set
--    (get_idle_time_breakdown's `ts_runtime`); a kernel whose correlation (>= 0)
--    no CPU event has gets index_correlation 0 from HTA, i.e. the trace's first
--    event (extract.py keeps it in cpu_events for this).
-- Units: h_ts_ns, h_end_ns, launch_h_ts_ns nanoseconds (whole µs on ns-resolution traces).
WITH tr AS (
    SELECT trace_id, run_id, rank, ts_fractional FROM traces WHERE run IS NULL OR run_id = run
),
raw AS (
    SELECT trace_id, event_id, cat, name, ts_ns, dur_ns, correlation, stream FROM device_events
    WHERE stream IS NOT NULL AND trace_id IN (SELECT trace_id FROM tr)
    UNION ALL
    SELECT trace_id, event_id, cat, name, ts_ns, dur_ns, correlation, stream FROM cpu_events
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
launch AS (
    -- HTA's transform_correlation_to_index: a kernel links to the CPU event with its
    -- correlation; of several, the one last in the file wins (later assignment)
    SELECT t.trace_id, t.correlation,
           arg_max(t.h_ts_ns, t.event_id) AS launch_h_ts_ns,
           arg_max(coalesce(s.n, 0) < 2 OR t.h_ts_ns < l.last_start_ns, t.event_id) AS launch_kept
    FROM timed t LEFT JOIN step_names s USING (run_id) LEFT JOIN last_step l USING (trace_id)
    WHERE NOT t.is_gpu AND t.correlation IS NOT NULL AND t.correlation <> -1
    GROUP BY t.trace_id, t.correlation
),
first_event AS (
    SELECT t.trace_id, t.h_ts_ns AS first_h_ts_ns
    FROM timed t LEFT JOIN step_names s USING (run_id) LEFT JOIN last_step l USING (trace_id)
    WHERE t.event_id = 0 AND (coalesce(s.n, 0) < 2 OR (NOT t.is_gpu AND t.h_ts_ns < l.last_start_ns))
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
SELECT k.trace_id, k.run_id, k.rank, k.event_id, k.cat, k.name, k.stream, k.h_ts_ns, k.h_end_ns,
       CASE WHEN NOT k.is_gpu THEN NULL
            WHEN g.trace_id IS NOT NULL THEN CASE WHEN g.launch_kept THEN g.launch_h_ts_ns END
            ELSE f.first_h_ts_ns END AS launch_h_ts_ns,
       CASE WHEN regexp_matches(k.name, '^nccl.*Kernel') THEN 'COMMUNICATION'
            WHEN regexp_matches(k.name, '^(Memcpy|Memset|dma)') THEN 'MEMORY'
            WHEN NOT regexp_matches(k.name, '^(nccl.*Kernel|.*Memcpy|Memset|.*Sync)') THEN 'COMPUTATION'
            ELSE 'OTHER' END AS hta_kind
FROM kept k
LEFT JOIN launch g ON g.trace_id = k.trace_id AND g.correlation = k.correlation
LEFT JOIN first_event f ON f.trace_id = k.trace_id
