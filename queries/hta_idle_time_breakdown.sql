-- name: hta_idle_time_breakdown
-- description: HTA's get_idle_time_breakdown reproduced: each stream's idle time split into host wait, kernel wait and other.
-- grain: one row per run × rank × stream × idle_category present on that stream (as HTA's rows)
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- cpu_only: HTA's breakdown needs GPU kernels; CPU-only traces (trace_mode 'cpu') have no rows
-- HTA 0.5.0, default arguments (consecutive_kernel_delay = 30), same event set and
-- timestamps as hta_temporal_breakdown (queries/macros/hta_events.sql), restricted as
-- HTA restricts it to the categories kernel, gpu_memcpy, gpu_memset (cuda_sync is not).
-- Per stream, kernels in start order (ties: file order); for each kernel after the first:
--   idle_interval = its start − the previous kernel's end (negative when they overlap:
--     HTA takes the previous row's end, not the running maximum);
--   host_wait   when the CPU call that launched it started after the previous kernel ended;
--   kernel_wait else, when idle_interval < 30 µs (HTA's 30 is in its trace time unit, µs,
--     although its docstring says ns);
--   other       else.  The first kernel of a stream is 'other' with no interval.
-- idle_time_us = Σ idle_interval of the category; idle_time_ratio = that ÷ the stream's
-- Σ over its categories (NaN in HTA, NULL here, when that is 0).  Both rounded to 2
-- decimals as HTA does.  HTA sums negative intervals too: kernel_wait (and a ratio)
-- can come out negative; idle_breakdown is scaletrace's own answer (README "Idle").
-- Units: idle_time_us microseconds; idle_time_ratio a fraction (0–1) of the stream's idle time.
WITH k AS (
    SELECT * FROM hta_events($run_id)
    WHERE cat IN ('kernel', 'Kernel', 'gpu_memset', 'Memset', 'gpu_memcpy', 'Memcpy', 'mtia_ccp_events')
),
ordered AS (
    SELECT run_id, rank, stream, h_ts_ns, launch_h_ts_ns,
           lag(h_end_ns) OVER (PARTITION BY trace_id, stream ORDER BY h_ts_ns, event_id) AS prev_end_ns
    FROM k
),
classified AS (
    SELECT run_id, rank, stream, h_ts_ns - prev_end_ns AS idle_ns,
           CASE WHEN launch_h_ts_ns > prev_end_ns THEN 'host_wait'
                WHEN h_ts_ns - prev_end_ns < 30000 THEN 'kernel_wait'
                ELSE 'other' END AS idle_category
    FROM ordered
),
per_category AS (
    SELECT run_id, rank, stream, idle_category, coalesce(sum(idle_ns), 0) AS idle_ns
    FROM classified GROUP BY run_id, rank, stream, idle_category
)
SELECT run_id, rank, stream, idle_category,
       round(idle_ns / 1000.0, 2) AS idle_time_us,
       round(idle_ns / nullif(sum(idle_ns) OVER (PARTITION BY run_id, rank, stream), 0), 2) AS idle_time_ratio
FROM per_category
ORDER BY run_id, rank, stream, idle_category
