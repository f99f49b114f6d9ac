-- name: step_slot_breakdown
-- description: Every breakdown column of each profiled step's device slot (the step model), with its windows.
-- grain: one row per trace × ProfilerStep that launched device work spanning a positive time (step_windows)
-- param: run VARCHAR a run_id, or NULL for every run
-- depends: step_windows, window_breakdown
-- The window is the step's device slot (step_windows: from the end of the
-- earlier steps' device work to the end of this step's), span_ns = slot_ns,
-- and every part is measured over the device timeline inside it: U(X) the union
-- of the intervals of the profiled steps' device events of the set X, whichever
-- step launched them, clipped to the slot.  So a neighbour step's kernel running
-- in this step's slot (the device behind the host, several streams) is busy,
-- never idle; busy = |U(all) ∩ slot|, idle = span − busy ≤ span; compute, comm,
-- memory, overlap, exposed_comm, exposed_memory, other as in window_breakdown
-- (inclusion-exclusion over the sets all, compute, comm, memory, cc, ccm).  The
-- slots tile the profiled steps' device window, so each part summed over a
-- rank's steps is that part of the window (steps_breakdown).
-- Where a rank's steps' device windows never overlap (each step's device work
-- starts after the earlier steps' ends), a slot holds its own step's events
-- only, and its parts are the step's own unions computed at ingest
-- (window_breakdown) over the slot's span; only the other traces' device
-- timelines are merged here.
-- Also: the step's cpu_*, device_* and slot_* columns and first_slot (step_windows).
-- steady_state (step_windows): the slot is one the steady state is measured over (docs/metrics.md
-- "The step model"): not the rank's first slot, unless it is the rank's only one
-- (the first has no gap before it and holds the warm-up: tracelens-mi300x's
-- 49 ms first step against 18.8 ms steps).  run_summary's shares, the idle
-- chart's rows and the device step period are over these slots.
-- Units: *_ns nanoseconds; percent (0–100): a bare *_pct of the span, *_pct_of_X of X.
WITH w AS (
    SELECT * FROM step_windows(run)
),
overlapping AS (
    -- traces where some step's device work starts before the earlier steps' has ended
    SELECT trace_id FROM w GROUP BY trace_id HAVING NOT bool_and(device_start_ns >= slot_start_ns)
),
ev AS (
    SELECT d.trace_id, d.ts_ns AS s, d.ts_ns + d.dur_ns AS e,
           CASE d.kind WHEN 'compute' THEN ['all', 'compute', 'cc', 'ccm'] WHEN 'comm' THEN ['all', 'comm', 'cc', 'ccm']
                       WHEN 'memory' THEN ['all', 'memory', 'ccm'] ELSE ['all'] END AS sets
    FROM device_events d
    WHERE d.step IS NOT NULL AND d.dur_ns > 0 AND (run IS NULL OR d.run_id = run)
      AND d.trace_id IN (SELECT trace_id FROM overlapping)
),
cut AS (
    -- each event clipped to every slot it runs in
    SELECT w.trace_id, w.step, greatest(ev.s, w.slot_start_ns) AS s, least(ev.e, w.slot_end_ns) AS e, ev.sets
    FROM ev JOIN w ON w.trace_id = ev.trace_id AND ev.s < w.slot_end_ns AND ev.e > w.slot_start_ns
),
flat AS (
    SELECT trace_id, step, s, e, unnest(sets) AS set_name FROM cut
),
swept AS (
    -- |U| of a set in a slot: in start order, each event adds what it runs past every earlier end
    SELECT *, max(e) OVER (PARTITION BY trace_id, step, set_name ORDER BY s, e
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
    FROM flat
),
clipped AS (
    SELECT trace_id, step, set_name, sum(greatest(0, e - greatest(s, coalesce(reach, s)))) AS union_ns
    FROM swept GROUP BY trace_id, step, set_name
),
merged AS (
    SELECT w.*,
           coalesce(max(union_ns) FILTER (WHERE set_name = 'all'), 0)::BIGINT AS busy_ns,
           coalesce(max(union_ns) FILTER (WHERE set_name = 'compute'), 0)::BIGINT AS compute_ns,
           coalesce(max(union_ns) FILTER (WHERE set_name = 'comm'), 0)::BIGINT AS comm_ns,
           coalesce(max(union_ns) FILTER (WHERE set_name = 'memory'), 0)::BIGINT AS memory_ns,
           coalesce(max(union_ns) FILTER (WHERE set_name = 'cc'), 0)::BIGINT AS cc_ns,
           coalesce(max(union_ns) FILTER (WHERE set_name = 'ccm'), 0)::BIGINT AS ccm_ns
    FROM w LEFT JOIN clipped c USING (trace_id, step)
    WHERE w.trace_id IN (SELECT trace_id FROM overlapping)
    GROUP BY ALL
),
own AS (
    -- a slot of a trace whose steps' device windows do not overlap: its own step's unions
    SELECT w.*, b.busy_ns, b.compute_ns, b.comm_ns, b.memory_ns,
           b.compute_ns + b.comm_ns - b.overlap_ns AS cc_ns,
           b.compute_ns + b.comm_ns - b.overlap_ns + b.exposed_memory_ns AS ccm_ns
    FROM w JOIN window_breakdown(true, run) b USING (trace_id, step)
    WHERE w.trace_id NOT IN (SELECT trace_id FROM overlapping)
),
u AS (
    SELECT * FROM merged UNION ALL BY NAME SELECT * FROM own
)
SELECT trace_id, run_id, rank, step, slot_ns AS span_ns, busy_ns, slot_ns - busy_ns AS idle_ns,
       compute_ns, comm_ns, memory_ns,
       compute_ns + comm_ns - cc_ns AS overlap_ns,
       cc_ns - compute_ns AS exposed_comm_ns,
       ccm_ns - cc_ns AS exposed_memory_ns,
       busy_ns - ccm_ns AS other_ns,
       100.0 * (compute_ns + comm_ns - cc_ns) / nullif(comm_ns, 0) AS overlap_pct_of_comm,
       100.0 * (cc_ns - compute_ns) / nullif(slot_ns, 0) AS exposed_comm_pct,
       cpu_start_ns, cpu_end_ns, cpu_ns, device_start_ns, device_end_ns, device_span_ns,
       slot_start_ns, slot_end_ns, slot_ns, first_slot, device_lag_ns, steady_state
FROM u
