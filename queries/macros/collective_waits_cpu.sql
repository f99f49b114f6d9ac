-- name: collective_waits_cpu
-- description: Per CPU-only trace: the time its threads sat blocked waiting for a collective, in the window of its step figures.
-- grain: one row per CPU-only trace holding a `sync` event (a collective wait)
-- param: run VARCHAR a run_id, or NULL for every run
-- depends: step_windows
-- On a CPU-only trace the classification (pipeline/read/classify.py) makes a
-- thread blocked on a collective `sync`: `_c10d_functional::wait_tensor`,
-- `c10d::wait`, `Work::wait`, TorchRec's `All2All_Pooled_Wait` and what runs
-- inside them.  The breakdown counts that time in `other` (busy − |U(compute
-- ∪ comm ∪ memory)|); this is the part of it that is such a wait:
--   wait_ns = |U(compute ∪ comm ∪ memory ∪ sync)| − |U(compute ∪ comm ∪ memory)|
-- over the same window as steps_breakdown (each steady-state step's slot,
-- events clipped to it; the whole trace where it has no ProfilerStep), so
-- 0 ≤ wait_ns ≤ other_ns.  A wait overlapped by compute on another thread is
-- compute there, as in the rest of the breakdown.
-- Units: *_ns nanoseconds.
WITH cpu AS (
    SELECT DISTINCT d.trace_id FROM device_events d JOIN traces t USING (trace_id)
    WHERE t.trace_mode = 'cpu' AND d.kind = 'sync' AND d.dur_ns > 0 AND (run IS NULL OR d.run_id = run)
),
slots AS (
    SELECT trace_id, step, slot_start_ns AS s0, slot_end_ns AS e0
    FROM step_windows(run) WHERE trace_id IN (SELECT trace_id FROM cpu) AND slot_ns > 0 AND steady_state
),
windows AS (
    SELECT * FROM slots
    UNION ALL
    -- a trace without profiled steps: its whole span (steps_breakdown's whole-trace row)
    SELECT trace_id, NULL AS step, min(ts_ns) AS s0, max(ts_ns + dur_ns) AS e0
    FROM device_events
    WHERE trace_id IN (SELECT trace_id FROM cpu) AND trace_id NOT IN (SELECT trace_id FROM slots)
    GROUP BY trace_id
),
ev AS (
    SELECT d.trace_id, d.step AS event_step, d.ts_ns AS s, d.ts_ns + d.dur_ns AS e,
           CASE WHEN d.kind IN ('compute', 'comm', 'memory') THEN ['ccm', 'ccms'] ELSE ['ccms'] END AS sets
    FROM device_events d
    WHERE d.trace_id IN (SELECT trace_id FROM cpu) AND d.dur_ns > 0 AND d.kind IN ('compute', 'comm', 'memory', 'sync')
),
cut AS (
    -- each event clipped to every window it runs in (a step's slot takes the profiled steps' events)
    SELECT w.trace_id, w.step, greatest(ev.s, w.s0) AS s, least(ev.e, w.e0) AS e, ev.sets
    FROM ev JOIN windows w ON w.trace_id = ev.trace_id AND ev.s < w.e0 AND ev.e > w.s0
         AND (w.step IS NULL OR ev.event_step IS NOT NULL)
),
flat AS (
    SELECT trace_id, step, s, e, unnest(sets) AS set_name FROM cut
),
swept AS (
    -- |U| of a set in a window: in start order, each event adds what it runs past every earlier end
    SELECT *, max(e) OVER (PARTITION BY trace_id, step, set_name ORDER BY s, e
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
    FROM flat
),
unions AS (
    SELECT trace_id, set_name, sum(greatest(0, e - greatest(s, coalesce(reach, s)))) AS union_ns
    FROM swept GROUP BY trace_id, step, set_name
)
SELECT trace_id,
       (coalesce(sum(union_ns) FILTER (WHERE set_name = 'ccms'), 0)
        - coalesce(sum(union_ns) FILTER (WHERE set_name = 'ccm'), 0))::BIGINT AS wait_ns
FROM unions GROUP BY trace_id
