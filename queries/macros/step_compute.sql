-- name: step_compute
-- description: Per trace and profiled step: where its compute ends and how much of it there is.
-- grain: one row per trace × profiled step that launched a compute kernel
-- param: run VARCHAR a run_id, or NULL for every run
-- A device event belongs to the step whose CPU interval launched it (the step
-- model's device window, step_windows: the step's own kernels, wherever they
-- run).  compute_end_ns = the end of the step's last compute kernel; compute_ns
-- = |U(compute)| over the step's own kernels (interval_unions).  The
-- compute that can still hide a collective starting at t is
-- |U(compute) ∩ [t, compute_end_ns]| (compute_islands): overlap_headroom and
-- run_collective_fit both measure it so.
-- Units: *_ns nanoseconds.
SELECT s.trace_id, s.step, s.compute_end_ns, u.union_ns AS compute_ns
FROM (SELECT trace_id, step, max(ts_ns + dur_ns) AS compute_end_ns
      FROM device_events WHERE kind = 'compute' AND step IS NOT NULL AND (run IS NULL OR run_id = run)
      GROUP BY trace_id, step) s
LEFT JOIN interval_unions u ON u.trace_id = s.trace_id AND u.step = s.step AND u.set_name = 'compute'
