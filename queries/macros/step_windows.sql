-- name: step_windows
-- description: The step model: each profiled step's CPU window, device window and device slot (its share of the device timeline).
-- grain: one row per trace × ProfilerStep that launched device work spanning a positive time
-- param: run VARCHAR a run_id, or NULL for every run
-- depends: window_unions
-- docs/metrics.md "The step model".  For one rank and its ProfilerStep#N:
--   CPU window    [cpu_start_ns, cpu_end_ns): the ProfilerStep#N annotation (cpu_ns long);
--   device window [device_start_ns, device_end_ns): first start to last end of
--                 the device events step N launched (linked by correlation), so
--                 when the device runs behind the host it lies later than the
--                 CPU window, and the device windows of neighbour steps may overlap;
--   device slot   [slot_start_ns, slot_end_ns): from the end of the device work
--                 of every earlier profiled step (their latest device_end_ns) to
--                 the end of this step's and theirs; the first step's slot starts
--                 at the earliest device_start_ns.  The slots tile the profiled
--                 steps' device window (steps_breakdown) without overlap: every
--                 instant of it belongs to one step, so a per-step figure
--                 measured in its slot (step_slot_breakdown: idle, compute, ...)
--                 never counts a neighbour step's kernels as idle and never
--                 exceeds slot_ns.  slot_ns is the step's period on the device:
--                 in steady state the distance between consecutive steps'
--                 device-window ends; a step whose work ends inside an earlier
--                 step's slot has slot_ns 0.
-- first_slot: the rank's first such step (its slot has no gap before it: the
-- steady-state step period, run_metrics.device_step_period_ns, leaves it out
-- where later steps exist).  device_lag_ns = device_end_ns − cpu_end_ns (> 0:
-- the device finished the step's work after the host left the step).
-- steady_state: a slot the run-level figures are over (docs/metrics.md "The
-- step model"): not the rank's first, unless it is the rank's only one.
-- Units: *_ns nanoseconds.
WITH own AS (
    SELECT trace_id, any_value(run_id) AS run_id, any_value(rank) AS rank, step,
           min(first_ns) AS device_start_ns, max(last_ns) AS device_end_ns
    FROM window_unions(true, run) WHERE set_name = 'all'
    GROUP BY trace_id, step HAVING max(last_ns) > min(first_ns)
),
cpu AS (
    SELECT trace_id, step, min(ts_ns) AS cpu_start_ns, max(ts_ns + dur_ns) AS cpu_end_ns
    FROM steps WHERE run IS NULL OR run_id = run GROUP BY trace_id, step
),
tiled AS (
    SELECT o.*, c.cpu_start_ns, c.cpu_end_ns,
           coalesce(max(o.device_end_ns) OVER (PARTITION BY o.trace_id ORDER BY o.step
                                               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                    min(o.device_start_ns) OVER (PARTITION BY o.trace_id)) AS slot_start_ns,
           max(o.device_end_ns) OVER (PARTITION BY o.trace_id ORDER BY o.step
                                      ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS slot_end_ns,
           row_number() OVER (PARTITION BY o.trace_id ORDER BY o.step) = 1 AS first_slot
    FROM own o LEFT JOIN cpu c USING (trace_id, step)
)
SELECT trace_id, run_id, rank, step, cpu_start_ns, cpu_end_ns, (cpu_end_ns - cpu_start_ns) AS cpu_ns,
       device_start_ns, device_end_ns, (device_end_ns - device_start_ns) AS device_span_ns,
       slot_start_ns, greatest(slot_start_ns, slot_end_ns) AS slot_end_ns,
       greatest(0, slot_end_ns - slot_start_ns) AS slot_ns, first_slot,
       (device_end_ns - cpu_end_ns) AS device_lag_ns,
       NOT first_slot OR count(*) OVER (PARTITION BY trace_id) = 1 AS steady_state
FROM tiled
