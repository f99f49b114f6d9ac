-- Table macros shared by the query files; created in the database by ingest,
-- so the plain duckdb CLI can call them too.
--
-- window_unions(per_step, run): for every trace (rank) and window, the length
-- of the union of the device intervals of each *set* of kinds.  A window is the
-- whole trace (per_step = false, step is NULL) or one ProfilerStep (per_step =
-- true; a device event belongs to the step of the CPU call that launched it).
-- Sets: all, compute, comm, memory, cc (compute ∪ comm), ccm (compute ∪ comm ∪
-- memory).  Every breakdown metric follows from these lengths by
-- inclusion-exclusion, e.g. |U(compute) ∩ U(comm)| = compute + comm − cc.
-- Units: ns.  run: a run_id, or NULL for every run.
CREATE OR REPLACE MACRO window_unions(per_step, run) AS TABLE
WITH membership(kind, set_name) AS (
    VALUES ('compute', 'compute'), ('compute', 'cc'), ('compute', 'ccm'), ('compute', 'all'),
           ('comm', 'comm'), ('comm', 'cc'), ('comm', 'ccm'), ('comm', 'all'),
           ('memory', 'memory'), ('memory', 'ccm'), ('memory', 'all'),
           ('sync', 'all'), ('other', 'all')
),
events AS (
    SELECT e.trace_id, e.run_id, e.rank,
           CASE WHEN per_step THEN e.step END AS step,
           m.set_name, e.ts_ns, e.ts_ns + e.dur_ns AS end_ns
    FROM device_events e JOIN membership m USING (kind)
    WHERE (run IS NULL OR e.run_id = run) AND (NOT per_step OR e.step IS NOT NULL)
),
marked AS (
    -- gaps and islands: an interval starts a new island when it begins after
    -- every interval before it (in start order) has ended.
    SELECT *, CASE WHEN ts_ns <= max(end_ns) OVER (
                  PARTITION BY trace_id, step, set_name ORDER BY ts_ns, end_ns
                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) THEN 0 ELSE 1 END AS new_island
    FROM events
),
islands AS (
    SELECT *, sum(new_island) OVER (
               PARTITION BY trace_id, step, set_name ORDER BY ts_ns, end_ns
               ROWS UNBOUNDED PRECEDING) AS island
    FROM marked
),
merged AS (
    SELECT trace_id, run_id, rank, step, set_name, min(ts_ns) AS start_ns, max(end_ns) AS end_ns
    FROM islands GROUP BY trace_id, run_id, rank, step, set_name, island
)
SELECT trace_id, run_id, rank, step, set_name,
       sum(end_ns - start_ns)::BIGINT AS union_ns,
       min(start_ns) AS first_ns, max(end_ns) AS last_ns
FROM merged GROUP BY trace_id, run_id, rank, step, set_name;

-- window_breakdown(per_step, run): one row per trace × window with every
-- breakdown column of DESIGN.md "Metric definitions" (ns and pct).
CREATE OR REPLACE MACRO window_breakdown(per_step, run) AS TABLE
WITH u AS (
    SELECT trace_id, run_id, rank, step,
           max(last_ns) FILTER (WHERE set_name = 'all') - min(first_ns) FILTER (WHERE set_name = 'all') AS span_ns,
           coalesce(sum(union_ns) FILTER (WHERE set_name = 'all'), 0)::BIGINT AS busy_ns,
           coalesce(sum(union_ns) FILTER (WHERE set_name = 'compute'), 0)::BIGINT AS compute_ns,
           coalesce(sum(union_ns) FILTER (WHERE set_name = 'comm'), 0)::BIGINT AS comm_ns,
           coalesce(sum(union_ns) FILTER (WHERE set_name = 'memory'), 0)::BIGINT AS memory_ns,
           coalesce(sum(union_ns) FILTER (WHERE set_name = 'cc'), 0)::BIGINT AS cc_ns,
           coalesce(sum(union_ns) FILTER (WHERE set_name = 'ccm'), 0)::BIGINT AS ccm_ns
    FROM window_unions(per_step, run)
    GROUP BY trace_id, run_id, rank, step
)
SELECT trace_id, run_id, rank, step, span_ns, busy_ns,
       span_ns - busy_ns AS idle_ns,
       compute_ns, comm_ns, memory_ns,
       compute_ns + comm_ns - cc_ns AS overlap_ns,
       cc_ns - compute_ns AS exposed_comm_ns,
       ccm_ns - cc_ns AS exposed_memory_ns,
       busy_ns - ccm_ns AS other_ns,
       100.0 * (compute_ns + comm_ns - cc_ns) / nullif(comm_ns, 0) AS overlap_pct,
       100.0 * (cc_ns - compute_ns) / nullif(span_ns, 0) AS exposed_comm_pct
FROM u;

-- hta_events(run): the event set and timestamps HTA 0.5.0 uses in
-- get_temporal_breakdown / get_comm_comp_overlap, reproduced:
--  * every event with an int `stream` arg other than -1 (kernels, memcpy,
--    memset, and the odd CPU event that carries a stream arg);
--  * when the run holds two or more distinct ProfilerSteps, only GPU events
--    launched (by correlation) from CPU events that start before the last
--    ProfilerStep of the rank starts (HTA `_filter_irrelevant_gpu_kernels`);
--  * ns-resolution traces: start rounded up and end rounded down to whole µs
--    on the double values, as HTA's `round_down_time_stamps` does;
--  * HTA's own kernel-type regexes (hta/utils/utils.py), not ours.
CREATE OR REPLACE MACRO hta_events(run) AS TABLE
WITH tr AS (
    SELECT trace_id, run_id, rank, ts_fractional FROM traces WHERE run IS NULL OR run_id = run
),
raw AS (
    SELECT trace_id, name, ts_ns, dur_ns, correlation, stream FROM device_events
    WHERE stream IS NOT NULL AND trace_id IN (SELECT trace_id FROM tr)
    UNION ALL
    SELECT trace_id, name, ts_ns, dur_ns, correlation, stream FROM cpu_events
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
SELECT trace_id, run_id, rank, name, h_ts_ns, h_end_ns,
       CASE WHEN regexp_matches(name, '^nccl.*Kernel') THEN 'COMMUNICATION'
            WHEN regexp_matches(name, '^(Memcpy|Memset|dma)') THEN 'MEMORY'
            WHEN NOT regexp_matches(name, '^(nccl.*Kernel|.*Memcpy|Memset|.*Sync)') THEN 'COMPUTATION'
            ELSE 'OTHER' END AS hta_kind
FROM kept;

-- hta_merged(run): HTA's merge_kernel_intervals per trace and kernel set
-- ('all', 'COMPUTATION', 'COMMUNICATION', 'COMP_OR_COMM'): merged length, first start and the
-- end of the last merged interval (in start order), in ns.
CREATE OR REPLACE MACRO hta_merged(run) AS TABLE
WITH sets AS (
    SELECT trace_id, run_id, rank, 'all' AS set_name, h_ts_ns AS ts_ns, h_end_ns AS end_ns FROM hta_events(run)
    UNION ALL
    SELECT trace_id, run_id, rank, hta_kind, h_ts_ns, h_end_ns FROM hta_events(run)
    WHERE hta_kind IN ('COMPUTATION', 'COMMUNICATION')
    UNION ALL
    SELECT trace_id, run_id, rank, 'COMP_OR_COMM', h_ts_ns, h_end_ns FROM hta_events(run)
    WHERE hta_kind IN ('COMPUTATION', 'COMMUNICATION')
),
marked AS (
    -- HTA: group = (ts > end.shift().cummax()).cumsum()
    SELECT *, CASE WHEN ts_ns > max(end_ns) OVER (
                  PARTITION BY trace_id, set_name ORDER BY ts_ns, end_ns
                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) THEN 1 ELSE 0 END AS new_group
    FROM sets
),
grouped AS (
    SELECT *, sum(new_group) OVER (PARTITION BY trace_id, set_name ORDER BY ts_ns, end_ns
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
FROM merged GROUP BY trace_id, run_id, rank, set_name;
