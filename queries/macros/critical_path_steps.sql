-- name: critical_path_steps
-- description: Each rank's window of each profiled step on the run's shared clock (consecutive steps' windows never overlap), and which rank is the slowest.
-- grain: one row per run × step × rank (GPU traces with ProfilerStep annotations)
-- param: run VARCHAR a run_id, or NULL for every run
-- depends: step_windows
-- The step model (docs/metrics.md, macro step_windows): a step's CPU window is
-- its ProfilerStep annotation [host_start_ns, host_end_ns); its device window
-- ends at device_end_ns, the end of the last device event the step launched
-- (the GPU work still running after the host moved on belongs to the step),
-- and its device slot at the latest such end of it and the earlier steps.
-- The critical path's window of the step:
--   end_ns   = the later of host_end_ns and the device slot's end, and never
--              before an earlier step's end_ns on the rank;
--   start_ns = the later of host_start_ns and the previous step's end_ns on
--              the rank (its device work, or its host, still running).
-- So the windows of a rank's steps tile its timeline without overlap: where
-- the device runs behind the host, each step's window is the device's step
-- period (from the end of the previous step's device work to the end of its
-- own), not the CPU start to the device end (which grows every step as the
-- device falls further behind).  step_ns = end − start (0: the step's work
-- all ended inside an earlier step's window).  step_ns ≤ the longer of the CPU
-- window and the device slot (step_windows), and Σ step_ns over the rank's
-- steps ≤ the span from the first one's start to the last one's end.  The
-- slowest rank of a step has the largest step_ns (the lowest rank on a tie):
-- its window is the critical path's.  Times on the run's shared clock (as
-- critical_path_graph: trace time + clock_ns); lane is the annotation's
-- thread ('thread <tid>').
-- Units: *_ns nanoseconds.
WITH base AS (
    SELECT run_id, bool_and(base_time_ns IS NOT NULL) AS all_base FROM traces
    WHERE run IS NULL OR run_id = run GROUP BY run_id
),
tr AS (
    SELECT t.trace_id, t.run_id, t.rank, CASE WHEN b.all_base THEN t.base_time_ns ELSE 0 END AS clock_ns
    FROM traces t JOIN base b USING (run_id) WHERE t.trace_mode = 'gpu'
),
annotation AS (  -- the thread each step annotation ran on
    SELECT trace_id, ts_ns, dur_ns, min(tid) AS tid FROM cpu_events
    WHERE name LIKE '%ProfilerStep%'
      AND lower(cat) NOT IN ('gpu_user_annotation', 'cuda_runtime', 'cuda_driver', 'runtime', 'hip_runtime',
                             'mtia_runtime', 'xpu_runtime', 'xpu_driver', 'privateuse1_runtime', 'privateuse1_driver')
      AND trace_id IN (SELECT trace_id FROM tr)
    GROUP BY ALL
),
own AS (
    SELECT tr.run_id, s.step, tr.rank, s.trace_id, tr.clock_ns, 'thread ' || coalesce(a.tid, '?') AS lane,
           s.ts_ns + tr.clock_ns AS host_start_ns, s.ts_ns + s.dur_ns + tr.clock_ns AS host_end_ns,
           g.device_end_ns + tr.clock_ns AS device_end_ns,
           greatest(s.ts_ns + s.dur_ns, coalesce(g.slot_end_ns, s.ts_ns + s.dur_ns)) + tr.clock_ns AS own_end_ns
    FROM steps s JOIN tr USING (trace_id)
    LEFT JOIN annotation a ON a.trace_id = s.trace_id AND a.ts_ns = s.ts_ns AND a.dur_ns = s.dur_ns
    LEFT JOIN step_windows(run) g ON g.trace_id = s.trace_id AND g.step = s.step
),
tiled AS (  -- each window ends no earlier than an earlier one, and starts no earlier than the previous one's end
    SELECT *, max(own_end_ns) OVER (PARTITION BY trace_id ORDER BY host_start_ns, step
                                    ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS end_ns,
           max(own_end_ns) OVER (PARTITION BY trace_id ORDER BY host_start_ns, step
                                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS previous_end_ns
    FROM own
),
w AS (
    SELECT run_id, step, rank, trace_id, clock_ns, lane,
           greatest(host_start_ns, coalesce(previous_end_ns, host_start_ns)) AS start_ns, end_ns,
           host_start_ns, host_end_ns, device_end_ns
    FROM tiled
)
SELECT *, greatest(0, end_ns - start_ns) AS step_ns,
       rank = arg_max(rank, struct_pack(d := greatest(0, end_ns - start_ns), r := -rank))
                  OVER (PARTITION BY run_id, step) AS is_slowest
FROM w
