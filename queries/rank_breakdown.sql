-- name: rank_breakdown
-- description: Per rank, whole trace: span, busy, idle, compute, comm, overlap, exposed comm and memory.
-- grain: one row per run × rank (every ingested trace; NULL span when it holds no device events)
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- Definitions, U(X) the union of the intervals of the events in X:
--   span = end of last device event − start of first; busy = |U(all)|; idle = span − busy
--   compute, comm, memory = |U(kind)|; overlap = |U(compute) ∩ U(comm)|
--   exposed_comm = |U(comm) \ U(compute)|; exposed_memory = |U(memory) \ (U(compute) ∪ U(comm))|
--   other = busy time not compute, comm or memory (sync, other kernels)
--   compute + exposed_comm + exposed_memory + other + idle = span
--   overlap_pct_of_comm = 100·overlap/comm (HTA); exposed_comm_pct = 100·exposed_comm/span
-- Units: *_ns nanoseconds; percent (0–100): a bare *_pct of the span, *_pct_of_X of X.
WITH traces_in AS (
    SELECT trace_id, run_id, rank FROM traces WHERE $run_id IS NULL OR run_id = $run_id
),
b AS (
    SELECT * FROM window_breakdown(false, $run_id)
)
SELECT t.run_id, t.rank, b.span_ns, b.busy_ns, b.idle_ns, b.compute_ns, b.comm_ns, b.memory_ns,
       b.overlap_ns, b.exposed_comm_ns, b.exposed_memory_ns, b.other_ns,
       b.overlap_pct_of_comm, b.exposed_comm_pct
FROM traces_in t LEFT JOIN b USING (trace_id)
ORDER BY t.run_id, t.rank
