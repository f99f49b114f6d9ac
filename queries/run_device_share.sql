-- name: run_device_share
-- description: Per run: how much of the step the device's activity covers (busy time and span per step ÷ step time).
-- grain: one row per run whose traces hold device activity
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- step_time_ns is run_summary's (median over steps of the slowest rank's
-- step; NULL without one).  device_busy_ns = |U(all device events)| and
-- device_span_ns = last end − first start of them, inside one ProfilerStep
-- window (the device events the step launched, as rank_step_breakdown),
-- averaged over ranks and profiled steps; a run whose traces have no
-- ProfilerStep: the rank's whole traced window, averaged over ranks.
-- device_busy_pct_of_step_time = 100 · device_busy_ns ÷ step_time_ns;
-- device_span_pct_of_step_time = 100 · device_span_ns ÷ step_time_ns (NULL
-- without a step time).  The step's shares (run_summary's compute_pct, ...)
-- are shares of the span: where the span is a small part of the step (a
-- Triton trace's 1.76 µs of kernels in a 13.3 s step), they describe that
-- sliver, not the step; reports/device_share.py holds the threshold and the
-- words.  On CPU-only traces (cpu_only) the device is the traced threads.
-- warning: NULL, or (where either percentage is above 100) what it means:
-- the device's work per step outlasts the step time (it runs behind the
-- host, or the step time is a host-side one), so the figure is no share of
-- the step; a percentage above 100 is never shown without it.
-- Units: *_ns nanoseconds; *_pct_of_step_time percent of step_time_ns (above
-- 100 only with a warning).
WITH m AS (
    SELECT run_id, step_time_ns FROM run_metrics($run_id)
),
mode AS (
    SELECT run_id, bool_and(trace_mode = 'cpu') AS cpu_only
    FROM traces WHERE $run_id IS NULL OR run_id = $run_id GROUP BY run_id
),
per_step AS (
    SELECT run_id, avg(span_ns) AS span_ns, avg(busy_ns) AS busy_ns
    FROM window_breakdown(true, $run_id) WHERE span_ns > 0 GROUP BY run_id
),
whole AS (
    SELECT run_id, avg(span_ns) AS span_ns, avg(busy_ns) AS busy_ns
    FROM window_breakdown(false, $run_id) WHERE span_ns > 0 GROUP BY run_id
),
device AS (
    SELECT w.run_id, coalesce(s.span_ns, w.span_ns) AS device_span_ns,
           coalesce(s.busy_ns, w.busy_ns) AS device_busy_ns
    FROM whole w LEFT JOIN per_step s USING (run_id)
)
SELECT *,
       CASE WHEN greatest(device_busy_pct_of_step_time, device_span_pct_of_step_time) > 100
            THEN format('above 100 %: the device''s {} per step is {:.0f} % of the {:.3g} ms step time: its work '
                        'outlasts the step time (the device runs behind the host, or the step time is a '
                        'host-side one), so this is no share of the step',
                        CASE WHEN device_busy_pct_of_step_time > 100 THEN 'busy time' ELSE 'span' END,
                        CASE WHEN device_busy_pct_of_step_time > 100 THEN device_busy_pct_of_step_time
                             ELSE device_span_pct_of_step_time END,
                        step_time_ns / 1e6) END AS warning
FROM (
    SELECT d.run_id, mode.cpu_only, m.step_time_ns, d.device_span_ns, d.device_busy_ns,
           100.0 * d.device_busy_ns / nullif(m.step_time_ns, 0) AS device_busy_pct_of_step_time,
           100.0 * d.device_span_ns / nullif(m.step_time_ns, 0) AS device_span_pct_of_step_time
    FROM device d LEFT JOIN m USING (run_id) LEFT JOIN mode USING (run_id)
)
ORDER BY run_id
