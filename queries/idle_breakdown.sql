-- name: idle_breakdown
-- description: Why each rank's device sat idle in each step: waiting for the host to launch, waiting on a dependency, other.
-- grain: one row per run × rank × steady-state step (every profiled step with device work but the rank's first, unless it is the only one); a rank without ProfilerStep annotations: one row, step NULL (the whole trace)
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- scaletrace's own idle breakdown (HTA's per-stream one: hta_idle_time_breakdown).
-- Window = one step's device slot (docs/metrics.md "The step model", macro
-- step_windows): from the end of the device work of the rank's earlier profiled
-- steps to the end of this step's; a trace without steps: the whole trace, as
-- rank_breakdown.  The slots tile the profiled steps' device window, the window
-- of run_summary's shares, so Σ idle_ns ÷ Σ span_ns over a rank's rows is its
-- idle_pct there.  idle_ns = step_slot_breakdown's (= rank_step_breakdown's):
-- the slot's time with no device event of any profiled step running on any
-- stream or lane, whichever step launched it (a neighbour step's kernel is busy
-- time, not idle), so idle_ns ≤ span_ns.  between_steps_ns = the part of it
-- before the step's own first device event (the gap after the earlier steps'
-- device work; 0 for the first step).  Each idle gap (between two merged busy
-- intervals of the rank's device timeline; a slot ends where an event ends, so
-- no gap crosses two slots) is classified by
-- the device event(s) that end it, using the CPU call that launched them (the CPU
-- event with the same correlation):
--   host_wait_ns        launched after the gap began: the device had nothing queued,
--                       the host was late (CPU-bound, e.g. many small kernels);
--   dependency_wait_ns  launched before the gap began: the work was queued but waited
--                       on a dependency (a stream/event wait, a peer, a synchronize);
--   other_idle_ns       no launching call in the trace (no correlation, or the call is
--                       outside the profiled window).
-- CPU-only traces: the lanes are the CPU threads and an op starts when its thread
-- reaches it, so every gap counts as host_wait: time the threads spent outside any
-- recorded op (Python, data loading, framework overhead).
-- The three parts sum to idle_ns exactly (tests/test_idle.py checks the sum against
-- step_slot_breakdown's clipped unions, a separate computation).
-- *_pct: percent of the step's span (README "Queries").
-- Units: *_ns nanoseconds; *_pct percent (0–100) of span_ns.
WITH tr AS (
    SELECT trace_id, trace_mode,
           EXISTS (SELECT 1 FROM device_events d WHERE d.trace_id = t.trace_id AND d.step IS NOT NULL) AS has_steps
    FROM traces t WHERE $run_id IS NULL OR run_id = $run_id
),
windows AS (
    -- a stepped trace: each step's device slot; a trace without steps: its whole trace
    SELECT trace_id, run_id, rank, step, span_ns, idle_ns, slot_start_ns AS start_ns, slot_end_ns AS end_ns,
           device_start_ns
    FROM step_slot_breakdown($run_id) WHERE steady_state
    UNION ALL
    SELECT b.trace_id, b.run_id, b.rank, b.step, b.span_ns, b.idle_ns, NULL, NULL, NULL
    FROM window_breakdown(false, $run_id) b JOIN tr USING (trace_id) WHERE NOT tr.has_steps
),
launch AS (
    SELECT trace_id, correlation, arg_max(ts_ns, event_id) AS launch_ns
    FROM cpu_events WHERE correlation IS NOT NULL AND trace_id IN (SELECT trace_id FROM tr)
    GROUP BY trace_id, correlation
),
ev AS (
    -- one device timeline per trace: the profiled steps' device events, whichever step launched them
    SELECT d.trace_id, d.event_id, d.ts_ns, d.ts_ns + d.dur_ns AS end_ns,
           CASE WHEN tr.trace_mode = 'cpu' THEN d.ts_ns ELSE l.launch_ns END AS launch_ns
    FROM device_events d JOIN tr USING (trace_id)
    LEFT JOIN launch l ON l.trace_id = d.trace_id AND l.correlation = d.correlation
    WHERE d.step IS NOT NULL OR NOT tr.has_steps
),
marked AS (
    -- merge the intervals: a new busy interval starts where an event starts after every earlier
    -- one ended; the gap before it is idle
    SELECT *, max(end_ns) OVER (PARTITION BY trace_id ORDER BY ts_ns, end_ns, event_id
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
    FROM ev
),
gaps AS (
    -- the events that start exactly where a gap ends: the earliest launch among them
    SELECT m.trace_id, m.ts_ns AS gap_end_ns, max(m.prev_end_ns) AS gap_start_ns,
           min(e.launch_ns) AS launch_ns, count(e.launch_ns) AS launched
    FROM marked m JOIN ev e ON e.trace_id = m.trace_id AND e.ts_ns = m.ts_ns
    WHERE m.ts_ns > m.prev_end_ns
    GROUP BY m.trace_id, m.ts_ns
),
placed AS (
    -- each gap lies inside one window: a slot ends where an event ends, so no gap crosses it
    SELECT w.trace_id, w.step, g.gap_end_ns - g.gap_start_ns AS gap_ns, g.launch_ns, g.launched, g.gap_start_ns,
           g.gap_end_ns <= w.device_start_ns AS before_own
    FROM gaps g JOIN windows w ON w.trace_id = g.trace_id
     AND (w.step IS NULL OR (g.gap_start_ns >= w.start_ns AND g.gap_end_ns <= w.end_ns))
),
per_step AS (
    SELECT trace_id, step,
           sum(gap_ns) FILTER (WHERE launched > 0 AND launch_ns > gap_start_ns) AS host_ns,
           sum(gap_ns) FILTER (WHERE launched > 0 AND launch_ns <= gap_start_ns) AS dep_ns,
           sum(gap_ns) FILTER (WHERE launched = 0) AS other_ns,
           sum(gap_ns) FILTER (WHERE before_own) AS before_ns
    FROM placed GROUP BY trace_id, step
)
SELECT b.run_id, b.rank, b.step, b.span_ns::BIGINT AS span_ns, b.idle_ns::BIGINT AS idle_ns,
       coalesce(p.host_ns, 0)::BIGINT AS host_wait_ns,
       coalesce(p.dep_ns, 0)::BIGINT AS dependency_wait_ns,
       coalesce(p.other_ns, 0)::BIGINT AS other_idle_ns,
       100.0 * coalesce(p.host_ns, 0) / nullif(b.span_ns, 0) AS host_wait_pct,
       100.0 * coalesce(p.dep_ns, 0) / nullif(b.span_ns, 0) AS dependency_wait_pct,
       100.0 * coalesce(p.other_ns, 0) / nullif(b.span_ns, 0) AS other_idle_pct,
       coalesce(p.before_ns, 0)::BIGINT AS between_steps_ns
FROM windows b
LEFT JOIN per_step p ON p.trace_id = b.trace_id AND p.step IS NOT DISTINCT FROM b.step
ORDER BY b.run_id, b.rank, b.step
