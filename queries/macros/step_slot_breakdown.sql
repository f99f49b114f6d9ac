-- name: step_slot_breakdown
-- description: Every breakdown column of each profiled step's device slot (the step model), with its windows.
-- grain: one row per trace × ProfilerStep that launched device work spanning a positive time (step_windows)
-- param: run VARCHAR a run_id, or NULL for every run
-- depends: step_windows
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
-- Also: the step's cpu_*, device_* and slot_* columns and first_slot (step_windows).
-- Units: *_ns nanoseconds; percent (0–100): a bare *_pct of the span, *_pct_of_X of X.
WITH w AS (
    SELECT * FROM step_windows(run)
),
ev AS (
    SELECT d.trace_id, d.ts_ns AS s, d.ts_ns + d.dur_ns AS e,
           CASE d.kind WHEN 'compute' THEN ['all', 'compute', 'cc', 'ccm'] WHEN 'comm' THEN ['all', 'comm', 'cc', 'ccm']
                       WHEN 'memory' THEN ['all', 'memory', 'ccm'] ELSE ['all'] END AS sets
    FROM device_events d
    WHERE d.step IS NOT NULL AND d.dur_ns > 0 AND (run IS NULL OR d.run_id = run)
      AND d.trace_id IN (SELECT trace_id FROM w)
),
flat AS (
    SELECT trace_id, s, e, unnest(sets) AS set_name FROM ev
),
marked AS (
    -- a new merged interval starts where an event starts after every earlier one of its set ended
    SELECT trace_id, set_name, s, e,
           CASE WHEN s > max(e) OVER (PARTITION BY trace_id, set_name ORDER BY s, e
                                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                THEN 0 ELSE 1 END AS joins
    FROM flat
),
numbered AS (
    SELECT *, sum(1 - joins) OVER (PARTITION BY trace_id, set_name ORDER BY s, e
                                   ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS island
    FROM marked
),
islands AS (
    SELECT trace_id, set_name, min(s) AS s, max(e) AS e FROM numbered GROUP BY trace_id, set_name, island
),
clipped AS (
    SELECT w.trace_id, w.step, i.set_name,
           sum(least(i.e, w.slot_end_ns) - greatest(i.s, w.slot_start_ns)) AS union_ns
    FROM w JOIN islands i ON i.trace_id = w.trace_id AND i.s < w.slot_end_ns AND i.e > w.slot_start_ns
    GROUP BY w.trace_id, w.step, i.set_name
),
u AS (
    SELECT w.*,
           coalesce(max(union_ns) FILTER (WHERE set_name = 'all'), 0)::BIGINT AS busy_ns,
           coalesce(max(union_ns) FILTER (WHERE set_name = 'compute'), 0)::BIGINT AS compute_ns,
           coalesce(max(union_ns) FILTER (WHERE set_name = 'comm'), 0)::BIGINT AS comm_ns,
           coalesce(max(union_ns) FILTER (WHERE set_name = 'memory'), 0)::BIGINT AS memory_ns,
           coalesce(max(union_ns) FILTER (WHERE set_name = 'cc'), 0)::BIGINT AS cc_ns,
           coalesce(max(union_ns) FILTER (WHERE set_name = 'ccm'), 0)::BIGINT AS ccm_ns
    FROM w LEFT JOIN clipped c USING (trace_id, step)
    GROUP BY ALL
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
       slot_start_ns, slot_end_ns, slot_ns, first_slot, device_lag_ns
FROM u
