-- name: rank_step_breakdown
-- description: The rank_breakdown columns per ProfilerStep (device events by the step that launched them).
-- grain: one row per run × rank × step (ranks without ProfilerStep annotations have no rows)
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- Window = one step: a device event belongs to the ProfilerStep#N whose CPU
-- interval contains the runtime call that launched it (linked by correlation);
-- events with no launching call found use their own start time.  span is
-- measured over the step's device events, so consecutive steps may overlap.
-- step_cpu_ns is the ProfilerStep annotation's own duration on the CPU.
-- Columns and units as in rank_breakdown (a bare *_pct: of the step's span).
WITH b AS (
    SELECT * FROM window_breakdown(true, $run_id)
),
cpu AS (
    SELECT trace_id, step, max(dur_ns) AS step_cpu_ns FROM steps
    WHERE $run_id IS NULL OR run_id = $run_id GROUP BY trace_id, step
)
SELECT b.run_id, b.rank, b.step, b.span_ns, b.busy_ns, b.idle_ns, b.compute_ns, b.comm_ns,
       b.memory_ns, b.overlap_ns, b.exposed_comm_ns, b.exposed_memory_ns, b.other_ns,
       b.overlap_pct_of_comm, b.exposed_comm_pct, cpu.step_cpu_ns
FROM b LEFT JOIN cpu USING (trace_id, step)
ORDER BY b.run_id, b.rank, b.step
