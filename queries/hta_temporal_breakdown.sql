-- name: hta_temporal_breakdown
-- description: HTA's get_temporal_breakdown reproduced: idle / compute / non-compute GPU time per rank.
-- grain: one row per run × rank (ranks with no GPU kernels in HTA's event set have no row)
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- cpu_only: HTA's breakdown needs GPU events; CPU-only traces (trace_mode 'cpu') have no rows
-- Same event set and rules as HTA 0.5.0 (see queries/macros/hta_events.sql):
--   kernel_time = end of the last merged kernel interval − start of the first
--   idle_time = kernel_time − |U(all kernels)|; compute_time = |U(HTA COMPUTATION kernels)|
--   non_compute_time = kernel_time − compute_time − idle_time
-- *_time_pct_of_kernel_time = 100 · that time ÷ kernel_time (HTA's *_time_pctg); NULL when
-- kernel_time is 0 (HTA: NaN).
-- clamped: on an ns-resolution trace whose sub-µs events invert under HTA's rounding
-- (hta_merged), HTA's arithmetic can give impossible figures: a kernel time of -1 µs and
-- compute at 200 % when every kernel is such an event (HTA's own checks, idle ≤ kernel time,
-- compute ≤ kernel time, non-compute ≥ 0, then raise), or a negative compute time its checks
-- let through.  Where HTA's figures are possible (0 ≤ compute ≤ busy ≤ kernel time) they are
-- HTA's own and clamped is false; otherwise they are the figures with each inverted event
-- taken as zero length (hta_merged's ':clamped' sets) and clamped is true.  No figure is
-- negative.
-- Units: *_us microseconds (HTA's), *_pct_of_kernel_time percent of kernel_time_us,
-- rounded to 2 decimals as HTA does.
WITH m AS (
    SELECT * FROM hta_merged($run_id)
),
per_rank AS (
    SELECT trace_id, run_id, rank,
           max(last_end_ns - first_ns) FILTER (WHERE set_name = 'all') AS kernel_ns,
           max(merged_ns) FILTER (WHERE set_name = 'all') AS busy_ns,
           coalesce(max(merged_ns) FILTER (WHERE set_name = 'COMPUTATION'), 0) AS compute_ns,
           max(last_end_ns - first_ns) FILTER (WHERE set_name = 'all:clamped') AS clamped_kernel_ns,
           max(merged_ns) FILTER (WHERE set_name = 'all:clamped') AS clamped_busy_ns,
           coalesce(max(merged_ns) FILTER (WHERE set_name = 'COMPUTATION:clamped'), 0) AS clamped_compute_ns
    FROM m GROUP BY trace_id, run_id, rank
),
checked AS (
    -- possible figures, 0 <= compute <= busy <= kernel time: HTA's asserts (idle <= kernel time,
    -- compute <= kernel time, non-compute >= 0) and none negative; they fail only where an
    -- inverted event exists
    SELECT *, clamped_kernel_ns IS NOT NULL
              AND NOT (0 <= compute_ns AND compute_ns <= busy_ns AND busy_ns <= kernel_ns) AS clamped
    FROM per_rank
),
chosen AS (
    SELECT run_id, rank, clamped,
           CASE WHEN clamped THEN clamped_kernel_ns ELSE kernel_ns END AS kernel_ns,
           CASE WHEN clamped THEN clamped_busy_ns ELSE busy_ns END AS busy_ns,
           CASE WHEN clamped THEN clamped_compute_ns ELSE compute_ns END AS compute_ns
    FROM checked WHERE kernel_ns IS NOT NULL
)
SELECT run_id, rank,
       (kernel_ns - busy_ns) / 1000.0 AS idle_time_us,
       compute_ns / 1000.0 AS compute_time_us,
       (busy_ns - compute_ns) / 1000.0 AS non_compute_time_us,
       kernel_ns / 1000.0 AS kernel_time_us,
       round(100.0 * (kernel_ns - busy_ns) / nullif(kernel_ns, 0), 2) AS idle_time_pct_of_kernel_time,
       round(100.0 * compute_ns / nullif(kernel_ns, 0), 2) AS compute_time_pct_of_kernel_time,
       round(100.0 * (busy_ns - compute_ns) / nullif(kernel_ns, 0), 2) AS non_compute_time_pct_of_kernel_time,
       clamped
FROM chosen
ORDER BY run_id, rank
