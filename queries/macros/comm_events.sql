-- name: comm_events
-- description: Every communication device event (a collective instance on one rank) with its metadata, sizes, exposure and bandwidth.
-- grain: one row per run × rank × communication device event
-- param: run VARCHAR a run_id, or NULL for every run
-- depends: dtype_sizes
--  * exposed_ns = |event \ U(compute)| on the same rank (TraceLens's exposed
--    communication, per event; computed at ingest against compute_islands);
--  * seq: the trace's sequence number when it has one, else the event's order
--    (0, 1, ...) among the rank's comm events of the same process group
--    (`pg_key`: pg_name, or '?' when the trace names none), computed at ingest;
--  * in_bytes / out_bytes = elements × dtype size (dtype_sizes);
--  * algbw_gbps = S / duration, S = out_bytes for all_gather, in_bytes for
--    every other collective; busbw_gbps = algbw × factor with n = group size:
--    all_reduce 2(n−1)/n; all_gather, reduce_scatter, all_to_all (n−1)/n;
--    broadcast, reduce, send, recv, send_recv 1 (nccl-tests PERFORMANCE.md).
--    GB = 1e9 bytes.  bw_null_reason says why bandwidth is NULL.
--  * aligned_start_ns: start on a clock shared by the ranks of the run
--    (ts + baseTimeNanoseconds when every trace of the run has it).
-- Units: *_ns nanoseconds, *_bytes bytes, *_gbps GB/s.
WITH base AS (
    SELECT run_id, bool_and(base_time_ns IS NOT NULL) AS all_have_base FROM traces
    WHERE run IS NULL OR run_id = run GROUP BY run_id
),
c AS (
    -- collectives holds one row per comm device event, with its start and duration
    SELECT co.trace_id, co.run_id, co.rank, co.event_id,
           co.ts_ns AS start_ns, co.dur_ns, co.ts_ns + co.dur_ns AS end_ns,
           co.ts_ns + CASE WHEN b.all_have_base THEN t.base_time_ns ELSE 0 END AS aligned_start_ns,
           co.collective, co.pg_name, co.pg_desc, coalesce(co.pg_name, '?') AS pg_key,
           co.group_size, co.dtype, co.in_nelems, co.out_nelems, co.seq AS trace_seq, co.meta_source,
           co.exposed_ns, co.ordinal, s.bytes AS dtype_bytes
    FROM collectives co
    JOIN traces t USING (trace_id)
    JOIN base b ON b.run_id = co.run_id
    LEFT JOIN dtype_sizes s ON s.dtype = lower(replace(co.dtype, 'c10::', ''))
    WHERE run IS NULL OR co.run_id = run
),
sized AS (
    SELECT c.*,
           coalesce(c.trace_seq, c.ordinal) AS seq,
           CASE WHEN c.trace_seq IS NULL THEN 'order' ELSE 'trace' END AS seq_source,
           c.in_nelems * c.dtype_bytes AS in_bytes,
           c.out_nelems * c.dtype_bytes AS out_bytes,
           CASE c.collective
               WHEN 'all_reduce' THEN 2.0 * (c.group_size - 1) / c.group_size
               WHEN 'all_gather' THEN 1.0 * (c.group_size - 1) / c.group_size
               WHEN 'reduce_scatter' THEN 1.0 * (c.group_size - 1) / c.group_size
               WHEN 'all_to_all' THEN 1.0 * (c.group_size - 1) / c.group_size
               WHEN 'broadcast' THEN 1.0 WHEN 'reduce' THEN 1.0
               WHEN 'send' THEN 1.0 WHEN 'recv' THEN 1.0 WHEN 'send_recv' THEN 1.0
           END AS busbw_factor
    FROM c
),
bw AS (
    SELECT *,
           CASE WHEN collective = 'all_gather' THEN out_bytes ELSE in_bytes END AS algbw_bytes
    FROM sized
)
SELECT *,
       algbw_bytes / nullif(dur_ns, 0) AS algbw_gbps,  -- bytes per ns = GB/s
       algbw_bytes / nullif(dur_ns, 0) * busbw_factor AS busbw_gbps,
       CASE WHEN collective IS NULL THEN 'collective type unknown'
            WHEN in_nelems IS NULL AND out_nelems IS NULL THEN 'no message size in the trace'
            WHEN dtype_bytes IS NULL THEN 'unknown dtype ' || coalesce(dtype, 'NULL')
            WHEN algbw_bytes IS NULL THEN 'no ' || CASE WHEN collective = 'all_gather' THEN 'out' ELSE 'in' END || ' size in the trace'
            WHEN busbw_factor IS NULL AND group_size IS NULL THEN 'no group size in the trace'
            WHEN busbw_factor IS NULL THEN 'no bus-bandwidth factor for ' || collective
            WHEN dur_ns = 0 THEN 'zero duration'
       END AS bw_null_reason
FROM bw
