-- name: step_time_spread
-- description: Per run, the spread of step time over steps: median (p50), p95, fastest and slowest step.
-- grain: one row per run with a step time
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- The steps run_summary's step_time_ns is the median of: each step's time on
-- its slowest rank, from the collector's step log (steps outside the
-- profiled window, after the first, and not the step right after the window,
-- which in logs written before the collector's device clock holds the trace's
-- export: 0.6-0.9 s against a 0.1 s step) when the run has one, else from the
-- ProfilerStep annotations (those that launched device work, where any did).
-- p50_ns equals run_summary.step_time_ns, except where that is the device's
-- step period (run_summary.step_time_source 'device_period': the device runs
-- behind the host), when these are the host's steps it outlasts;
-- p95_ns = the 95th percentile (linear interpolation between steps);
-- p95_to_p50_ratio = p95 ÷ p50 (1: every step as long as the median);
-- step_time_source = 'step_log' or 'profiler_step' (as in run_summary);
-- num_steps = steps counted.
-- Units: *_ns nanoseconds, *_ratio a ratio.
WITH worked AS (
    SELECT DISTINCT run_id, step FROM step_windows($run_id)
),
profiled AS (
    -- a ProfilerStep without device work, in a run whose other steps have some: left out (run_summary)
    SELECT run_id, step, max(dur_ns) AS slowest_ns FROM steps
    WHERE ($run_id IS NULL OR run_id = $run_id)
      AND ((run_id, step) IN (SELECT (run_id, step) FROM worked) OR run_id NOT IN (SELECT run_id FROM worked))
    GROUP BY run_id, step
),
logged AS (
    SELECT run_id, step, max(dur_ns) AS slowest_ns
    FROM (SELECT *, lag(profiled) OVER (PARTITION BY run_id, rank ORDER BY step) AS after_window
          FROM step_log WHERE $run_id IS NULL OR run_id = $run_id)
    WHERE NOT profiled AND step > 0 AND NOT coalesce(after_window, false)
    GROUP BY run_id, step
),
chosen AS (
    SELECT run_id, step, slowest_ns, 'step_log' AS source FROM logged
    UNION ALL
    SELECT run_id, step, slowest_ns, 'profiler_step' AS source FROM profiled
    WHERE run_id NOT IN (SELECT run_id FROM logged)
)
SELECT run_id, any_value(source) AS step_time_source, count(*) AS num_steps,
       median(slowest_ns)::BIGINT AS p50_ns,
       quantile_cont(slowest_ns, 0.95)::BIGINT AS p95_ns,
       min(slowest_ns) AS min_ns, max(slowest_ns) AS max_ns,
       quantile_cont(slowest_ns, 0.95) / nullif(median(slowest_ns), 0) AS p95_to_p50_ratio
FROM chosen
GROUP BY run_id
ORDER BY run_id
