-- name: idle_breakdown
-- description: Why each rank's device sat idle in each step: waiting for the host to launch, waiting on a dependency, other.
-- grain: one row per run × rank × step; a rank without ProfilerStep annotations: one row, step NULL (the whole trace)
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- scaletrace's own idle breakdown (HTA's per-stream one: hta_idle_time_breakdown).
-- Window = one step: the device events the step launched, as rank_step_breakdown,
-- and the gap before them, from the end of the device work of the rank's earlier
-- profiled steps to this step's first device event (between_steps_ns; 0 for the
-- first step and where the steps' device work overlaps); a trace without steps:
-- the whole trace, as rank_breakdown.  So the rows of a rank tile its profiled
-- steps' device window, the window of run_summary's shares: Σ idle_ns ÷ Σ span_ns
-- over a rank's rows is its idle_pct there (wherever one step's device work ends
-- before the next one's begins).
-- idle_ns = rank_step_breakdown's idle_ns (span − |U(all device events)|, no
-- activity on any stream or lane; rank_breakdown's for a trace without steps) +
-- between_steps_ns, span_ns = its span_ns + between_steps_ns.  Each idle gap
-- (between two merged busy intervals, and the gap between steps) is classified by
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
-- the unions computed at ingest, an independent computation, plus the gap).
-- *_pct: percent of the step's span (README "Queries").
-- Units: *_ns nanoseconds; *_pct percent (0–100) of span_ns.
WITH tr AS (
    SELECT trace_id, trace_mode,
           EXISTS (SELECT 1 FROM device_events d WHERE d.trace_id = t.trace_id AND d.step IS NOT NULL) AS has_steps
    FROM traces t WHERE $run_id IS NULL OR run_id = $run_id
),
windows AS (
    SELECT b.* FROM window_breakdown(true, $run_id) b
    UNION ALL
    SELECT b.* FROM window_breakdown(false, $run_id) b JOIN tr USING (trace_id) WHERE NOT tr.has_steps
),
launch AS (
    SELECT trace_id, correlation, arg_max(ts_ns, event_id) AS launch_ns
    FROM cpu_events WHERE correlation IS NOT NULL AND trace_id IN (SELECT trace_id FROM tr)
    GROUP BY trace_id, correlation
),
ev AS (
    SELECT d.trace_id, CASE WHEN tr.has_steps THEN d.step END AS step, d.event_id, d.ts_ns, d.ts_ns + d.dur_ns AS end_ns,
           CASE WHEN tr.trace_mode = 'cpu' THEN d.ts_ns ELSE l.launch_ns END AS launch_ns
    FROM device_events d JOIN tr USING (trace_id)
    LEFT JOIN launch l ON l.trace_id = d.trace_id AND l.correlation = d.correlation
    WHERE d.step IS NOT NULL OR NOT tr.has_steps
),
marked AS (
    -- merge the step's intervals: a new busy interval starts where an event starts after
    -- every earlier one ended; the gap before it is idle
    SELECT *, max(end_ns) OVER (PARTITION BY trace_id, step ORDER BY ts_ns, end_ns, event_id
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
    FROM ev
),
gap_starts AS (
    -- the events that start exactly where a gap ends: the earliest launch among them
    SELECT m.trace_id, m.step, m.ts_ns AS gap_end_ns, max(m.prev_end_ns) AS gap_start_ns,
           min(e.launch_ns) AS launch_ns, count(e.launch_ns) AS launched
    FROM marked m
    JOIN ev e ON e.trace_id = m.trace_id AND e.step IS NOT DISTINCT FROM m.step AND e.ts_ns = m.ts_ns
    WHERE m.ts_ns > m.prev_end_ns
    GROUP BY m.trace_id, m.step, m.ts_ns
),
bounds AS (
    SELECT trace_id, step, min(first_ns) AS first_ns, max(last_ns) AS last_ns
    FROM window_unions(true, $run_id) WHERE set_name = 'all' GROUP BY trace_id, step
),
lead AS (
    -- the gap between the device work of the earlier steps and this step's first event
    SELECT trace_id, step, first_ns,
           greatest(0, first_ns - max(last_ns) OVER (PARTITION BY trace_id ORDER BY step
                                                       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)) AS gap_ns
    FROM bounds
),
lead_gaps AS (
    -- classified as the gaps inside a step: by the launch of the events that end it
    SELECT l.trace_id, l.step, l.first_ns AS gap_end_ns, l.first_ns - l.gap_ns AS gap_start_ns,
           min(e.launch_ns) AS launch_ns, count(e.launch_ns) AS launched
    FROM lead l JOIN ev e ON e.trace_id = l.trace_id AND e.step = l.step AND e.ts_ns = l.first_ns
    WHERE l.gap_ns > 0
    GROUP BY l.trace_id, l.step, l.first_ns, l.gap_ns
),
all_gaps AS (
    SELECT trace_id, step, gap_end_ns, gap_start_ns, launch_ns, launched FROM gap_starts
    UNION ALL
    SELECT trace_id, step, gap_end_ns, gap_start_ns, launch_ns, launched FROM lead_gaps
),
per_step AS (
    SELECT trace_id, step,
           sum(gap_end_ns - gap_start_ns) FILTER (WHERE launched > 0 AND launch_ns > gap_start_ns) AS host_ns,
           sum(gap_end_ns - gap_start_ns) FILTER (WHERE launched > 0 AND launch_ns <= gap_start_ns) AS dep_ns,
           sum(gap_end_ns - gap_start_ns) FILTER (WHERE launched = 0) AS other_ns
    FROM all_gaps GROUP BY trace_id, step
),
framed AS (
    SELECT b.*, coalesce(g.gap_ns, 0)::BIGINT AS between_steps_ns
    FROM windows b LEFT JOIN lead g ON g.trace_id = b.trace_id AND g.step = b.step
)
SELECT b.run_id, b.rank, b.step, (b.span_ns + b.between_steps_ns)::BIGINT AS span_ns,
       (b.idle_ns + b.between_steps_ns)::BIGINT AS idle_ns,
       coalesce(p.host_ns, 0)::BIGINT AS host_wait_ns,
       coalesce(p.dep_ns, 0)::BIGINT AS dependency_wait_ns,
       coalesce(p.other_ns, 0)::BIGINT AS other_idle_ns,
       100.0 * coalesce(p.host_ns, 0) / nullif(b.span_ns + b.between_steps_ns, 0) AS host_wait_pct,
       100.0 * coalesce(p.dep_ns, 0) / nullif(b.span_ns + b.between_steps_ns, 0) AS dependency_wait_pct,
       100.0 * coalesce(p.other_ns, 0) / nullif(b.span_ns + b.between_steps_ns, 0) AS other_idle_pct,
       b.between_steps_ns
FROM framed b
LEFT JOIN per_step p ON p.trace_id = b.trace_id AND p.step IS NOT DISTINCT FROM b.step
ORDER BY b.run_id, b.rank, b.step
