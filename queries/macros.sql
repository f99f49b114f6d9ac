-- Table macros shared by the query files; created in the database by ingest,
-- so the plain duckdb CLI can call them too.
--
-- window_unions(per_step, run): |U(set)| per trace, window and set, with the
-- first start and last end (ns), from the interval_unions table that ingest
-- fills (pipeline/intervals.py).  A window is the whole trace (per_step =
-- false, step is NULL) or one ProfilerStep (per_step = true).  Sets: all,
-- compute, comm, memory, cc (compute ∪ comm), ccm (compute ∪ comm ∪ memory).
-- Every breakdown metric follows by inclusion-exclusion, e.g.
-- |U(compute) ∩ U(comm)| = compute + comm − cc.  run: a run_id or NULL.
CREATE OR REPLACE MACRO window_unions(per_step, run) AS TABLE
SELECT trace_id, run_id, rank, step, set_name, union_ns, first_ns, last_ns
FROM interval_unions
WHERE (run IS NULL OR run_id = run) AND (step IS NOT NULL) = per_step;

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
FROM kept;

-- hta_merged(run): HTA's merge_kernel_intervals per trace and kernel set
-- ('all', 'COMPUTATION', 'COMMUNICATION', 'COMP_OR_COMM'): merged length, first start and the
-- end of the last merged interval (in start order), in ns.
CREATE OR REPLACE MACRO hta_merged(run) AS TABLE
WITH sets AS (
    SELECT trace_id, run_id, rank, event_id, 'all' AS set_name, h_ts_ns AS ts_ns, h_end_ns AS end_ns
    FROM hta_events(run)
    UNION ALL
    SELECT trace_id, run_id, rank, event_id, hta_kind, h_ts_ns, h_end_ns FROM hta_events(run)
    WHERE hta_kind IN ('COMPUTATION', 'COMMUNICATION')
    UNION ALL
    SELECT trace_id, run_id, rank, event_id, 'COMP_OR_COMM', h_ts_ns, h_end_ns FROM hta_events(run)
    WHERE hta_kind IN ('COMPUTATION', 'COMMUNICATION')
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
FROM merged GROUP BY trace_id, run_id, rank, set_name;

-- comm_events(run): one row per communication device event (collective
-- instance on one rank) with its metadata, sizes, exposure and bandwidth.
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
CREATE OR REPLACE MACRO comm_events(run) AS TABLE
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
FROM bw;

-- collective_matches(run): the k-th collective of a process group on each
-- rank of a run is the same collective (matched by pg_key + seq).  One row per
-- matched collective: transfer_ns = min duration over ranks; max_wait_ns =
-- max duration − transfer; skew_ns = latest − earliest aligned start;
-- straggler_rank = the latest to arrive (NULL when all start at the same
-- time); types_agree = every rank saw the same collective type (a mismatch is
-- reported, not hidden; collective is then NULL and collectives_seen lists them).
CREATE OR REPLACE MACRO collective_matches(run) AS TABLE
SELECT run_id, pg_key, seq,
       count(*) AS num_ranks,
       min(dur_ns) AS transfer_ns,
       max(dur_ns) - min(dur_ns) AS max_wait_ns,
       max(aligned_start_ns) - min(aligned_start_ns) AS skew_ns,
       CASE WHEN max(aligned_start_ns) > min(aligned_start_ns)
            THEN arg_max(rank, aligned_start_ns) END AS straggler_rank,  -- none when all arrive at once
       min(coalesce(collective, '?')) = max(coalesce(collective, '?')) AS types_agree,
       CASE WHEN min(coalesce(collective, '?')) = max(coalesce(collective, '?')) THEN any_value(collective) END
           AS collective,
       string_agg(DISTINCT coalesce(collective, '?'), ',' ORDER BY coalesce(collective, '?')) AS collectives_seen
FROM comm_events(run) GROUP BY run_id, pg_key, seq;

-- matched_collectives(run): every rank-instance with its collective's figures
-- (collective_matches) and its own wait_ns = duration − transfer_ns.
CREATE OR REPLACE MACRO matched_collectives(run) AS TABLE
SELECT e.*, m.num_ranks, m.transfer_ns, e.dur_ns - m.transfer_ns AS wait_ns, m.max_wait_ns,
       m.skew_ns, m.straggler_rank, m.types_agree, m.collectives_seen
FROM comm_events(run) e JOIN collective_matches(run) m USING (run_id, pg_key, seq);

-- collective_waits(run): matched_collectives with the exposed part split into
-- waiting and transfer: the wait is taken to be the *first* wait_ns of the
-- kernel (it starts, waits for its peers, then transfers):
-- exposed_wait_ns = |[start, start + wait) \ U(compute)|,
-- exposed_transfer_ns = exposed_ns − exposed_wait_ns.
CREATE OR REPLACE MACRO collective_waits(run) AS TABLE
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
FROM j LEFT JOIN hidden_wait h USING (trace_id, event_id);

-- run_metrics(run): one row per run with throughput, MFU and the step-time
-- shares (DESIGN.md "Run level"); see queries/run_summary.sql for the columns.
CREATE OR REPLACE MACRO run_metrics(run) AS TABLE
WITH r AS (SELECT * FROM runs WHERE run IS NULL OR run_id = run),
tr AS (
    SELECT run_id, count(DISTINCT rank) AS num_ranks, max(world_size) AS trace_world_size,
           any_value(device_name) AS trace_device_name, bool_and(trace_mode = 'cpu') AS cpu_only
    FROM traces WHERE run IS NULL OR run_id = run GROUP BY run_id
),
slowest AS (
    SELECT run_id, step, max(dur_ns) AS slowest_ns FROM steps
    WHERE run IS NULL OR run_id = run GROUP BY run_id, step
),
profiler_time AS (
    SELECT run_id, median(slowest_ns)::BIGINT AS step_time_ns, count(*) AS num_steps
    FROM slowest GROUP BY run_id
),
logged AS (
    -- the collector's wall-clock log: steps outside the profiled window, after the first
    SELECT run_id, step, max(dur_ns) AS slowest_ns FROM step_log
    WHERE (run IS NULL OR run_id = run) AND NOT profiled AND step > 0
    GROUP BY run_id, step
),
logged_time AS (
    SELECT run_id, median(slowest_ns)::BIGINT AS step_time_ns, count(*) AS num_steps
    FROM logged GROUP BY run_id
),
step_time AS (
    SELECT run_id,
           coalesce(l.step_time_ns, p.step_time_ns) AS step_time_ns,
           coalesce(l.num_steps, p.num_steps) AS num_steps,
           CASE WHEN l.step_time_ns IS NOT NULL THEN 'step_log'
                WHEN p.step_time_ns IS NOT NULL THEN 'profiler_step' END AS step_time_source
    FROM profiler_time p FULL JOIN logged_time l USING (run_id)
),
power AS (
    SELECT run_id, sum(mean_watts) AS watts, count(*) AS ranks_with_power
    FROM (SELECT run_id, rank, avg(watts) AS mean_watts FROM power_samples
          WHERE run IS NULL OR run_id = run GROUP BY run_id, rank)
    GROUP BY run_id
),
shares AS (
    -- DESIGN.md "exposed comm % of step": each part / the rank's span (its
    -- whole traced window), averaged over the ranks with a span; the five
    -- shares of a rank sum to 100, so their means do too
    SELECT run_id,
           avg(100.0 * compute_ns / span_ns) AS compute_pct,
           avg(100.0 * exposed_comm_ns / span_ns) AS exposed_comm_pct,
           avg(100.0 * exposed_memory_ns / span_ns) AS exposed_memory_pct,
           avg(100.0 * other_ns / span_ns) AS other_pct,
           avg(100.0 * idle_ns / span_ns) AS idle_pct
    FROM window_breakdown(false, run) WHERE span_ns > 0 GROUP BY run_id
),
base AS (
    SELECT r.*, tr.num_ranks, tr.cpu_only,
           -- ranks sharing one host: the manifest's per-node count, else world ÷ nodes
           coalesce(r.gpus_per_node, ceil(coalesce(r.world_size, tr.trace_world_size, tr.num_ranks)
                                          / r.num_nodes)::INTEGER) AS ranks_per_host,
           coalesce(r.world_size, tr.trace_world_size, tr.num_ranks) AS gpus,
           coalesce(r.device_name, tr.trace_device_name) AS device,
           st.step_time_ns, st.num_steps, st.step_time_source,
           pw.watts, pw.ranks_with_power,
           coalesce(r.flops_per_token,
                    6 * r.num_params + 12.0 * r.num_layers * r.hidden_size * r.seq_len,
                    6 * r.num_params) AS fpt,
           sh.compute_pct, sh.exposed_comm_pct, sh.exposed_memory_pct, sh.other_pct, sh.idle_pct
    FROM r LEFT JOIN tr USING (run_id) LEFT JOIN step_time st USING (run_id)
    LEFT JOIN shares sh USING (run_id) LEFT JOIN power pw USING (run_id)
),
device_row AS (
    -- the device_peaks row of the longest pattern the device name contains
    SELECT b.run_id, arg_max(p.pattern, length(p.pattern)) AS pattern
    FROM base b JOIN device_peaks p ON contains(lower(b.device), lower(p.pattern))
    GROUP BY b.run_id
),
peaks AS (
    -- the run's dtype (run.json `dtype`), else bf16 (fp16 on a device without bf16)
    SELECT b.run_id, cd.peak_dtype AS run_dtype, d.source AS table_source,
           coalesce(cd.peak_dtype, CASE WHEN d.bf16 IS NULL AND d.fp16 IS NOT NULL THEN 'fp16'
                                        ELSE 'bf16' END) AS table_dtype,
           CASE table_dtype WHEN 'bf16' THEN d.bf16 WHEN 'fp16' THEN d.fp16
                            WHEN 'tf32' THEN d.tf32 WHEN 'fp32' THEN d.fp32 END AS table_peak
    FROM base b LEFT JOIN compute_dtypes cd ON cd.name = lower(b.dtype)
    LEFT JOIN device_row USING (run_id) LEFT JOIN device_peaks d USING (pattern)
),
m AS (
    SELECT b.*, coalesce(b.peak_flops, peaks.table_peak) AS peak,
           CASE WHEN b.peak_flops IS NOT NULL THEN coalesce(b.peak_flops_source, 'manifest')
                WHEN peaks.table_peak IS NOT NULL THEN 'table' END AS peak_source,
           CASE WHEN b.peak_flops IS NOT NULL AND b.peak_flops_source = 'measured' THEN 'fp32'
                WHEN b.peak_flops IS NOT NULL THEN peaks.run_dtype
                WHEN peaks.table_peak IS NOT NULL THEN peaks.table_dtype END AS peak_dtype,
           CASE WHEN b.peak_flops IS NOT NULL AND b.peak_flops_source = 'measured'
                THEN 'measured by the collector: fp32 matrix products on the device'
                WHEN b.peak_flops IS NOT NULL THEN 'run.json device.peak_flops'
                WHEN peaks.table_peak IS NOT NULL
                THEN format('dense {} peak of the device table ({}){}', peaks.table_dtype, peaks.table_source,
                            CASE WHEN peaks.run_dtype IS NULL
                                 THEN format('; the run''s dtype is unknown, {} assumed (set dtype in run.json)',
                                             peaks.table_dtype) ELSE '' END) END AS peak_basis,
           peaks.table_source, peaks.table_dtype,
           b.tokens_per_step / (b.step_time_ns / 1e9) AS tps,
           -- whole-job power: the mean per sampled rank, scaled to every GPU
           b.watts * b.gpus / b.ranks_with_power AS job_watts
    FROM base b LEFT JOIN peaks USING (run_id)
)
SELECT run_id, workload, coalesce(scaling, 'strong') AS scaling, gpus AS world_size, num_nodes,
       dp, tp, pp, cp, num_ranks AS ranks_traced, num_steps, step_time_ns, step_time_source,
       tokens_per_step,
       tps AS tokens_per_s, tps / gpus AS tokens_per_s_per_gpu,
       fpt AS flops_per_token, device AS device_name, peak AS peak_flops_per_gpu,
       peak_source AS peak_flops_source, peak_dtype AS peak_flops_dtype, peak_basis AS peak_flops_basis,
       100.0 * tps * fpt / (gpus * peak) AS mfu_pct,
       job_watts * (step_time_ns / 1e9) / tokens_per_step AS energy_per_token_j,
       compute_pct, exposed_comm_pct, exposed_memory_pct, other_pct, idle_pct,
       concat_ws('; ',
           CASE WHEN step_time_ns IS NULL THEN 'no ProfilerStep annotations: no step time' END,
           CASE WHEN tokens_per_step IS NULL
                THEN 'no tokens_per_step (or global_batch_size and seq_len) in run.json' END,
           CASE WHEN fpt IS NULL THEN 'no model.flops_per_token or model.num_params in run.json' END,
           CASE WHEN peak IS NULL AND table_source IS NOT NULL
                THEN format('the device table has no {} peak for {} ({}): set device.peak_flops in run.json',
                            table_dtype, device, table_source)
                WHEN peak IS NULL THEN 'device peak FLOP/s unknown: set device.peak_flops in run.json' END,
           CASE WHEN job_watts IS NULL
                THEN 'no power samples: energy needs the collector''s NVML samples (CUDA)' END) AS null_reasons,
       -- NULL when there is nothing to warn about
       nullif(concat_ws('; ',
           CASE WHEN cpu_only AND ranks_per_host > cpu_cores
                THEN format('CPU run with {} ranks per host on {} core{}: ranks compete for cores, so '
                            'its step time partly measures contention, not scaling', ranks_per_host,
                            cpu_cores, CASE WHEN cpu_cores = 1 THEN '' ELSE 's' END) END), '') AS warnings
FROM m;
