-- name: hta_temporal_breakdown
-- description: HTA's get_temporal_breakdown reproduced: idle / compute / non-compute GPU time per rank.
-- grain: one row per run × rank (ranks with no GPU kernels in HTA's event set have no row)
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- cpu_only: HTA's breakdown needs GPU events; CPU-only traces (trace_mode 'cpu') have no rows
-- Same event set and rules as HTA 0.5.0 (see queries/macros/hta_events.sql):
--   kernel_time = end of the last merged kernel interval − start of the first
--   idle_time = kernel_time − |U(all kernels)|; compute_time = |U(HTA COMPUTATION kernels)|
--   non_compute_time = kernel_time − compute_time − idle_time
-- *_time_pct_of_kernel_time = 100 · that time ÷ kernel_time (HTA's *_time_pctg).
-- Units: *_us microseconds (HTA's), *_pct_of_kernel_time percent of kernel_time_us,
-- rounded to 2 decimals as HTA does.
WITH m AS (
    SELECT * FROM hta_merged($run_id)
),
per_rank AS (
    SELECT trace_id, run_id, rank,
           max(last_end_ns - first_ns) FILTER (WHERE set_name = 'all') AS kernel_ns,
           max(merged_ns) FILTER (WHERE set_name = 'all') AS busy_ns,
           coalesce(max(merged_ns) FILTER (WHERE set_name = 'COMPUTATION'), 0) AS compute_ns
    FROM m GROUP BY trace_id, run_id, rank
)
SELECT run_id, rank,
       (kernel_ns - busy_ns) / 1000.0 AS idle_time_us,
       compute_ns / 1000.0 AS compute_time_us,
       (busy_ns - compute_ns) / 1000.0 AS non_compute_time_us,
       kernel_ns / 1000.0 AS kernel_time_us,
       round(100.0 * (kernel_ns - busy_ns) / kernel_ns, 2) AS idle_time_pct_of_kernel_time,
       round(100.0 * compute_ns / kernel_ns, 2) AS compute_time_pct_of_kernel_time,
       round(100.0 * (busy_ns - compute_ns) / kernel_ns, 2) AS non_compute_time_pct_of_kernel_time
FROM per_rank
WHERE kernel_ns IS NOT NULL
ORDER BY run_id, rank
