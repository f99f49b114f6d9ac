-- name: critical_path_summary
-- description: Per profiled step, the critical path's length, its time by kind and by rank, the op that cost most, and how much of its communication blocks.
-- grain: one row per run × step (GPU traces with ProfilerStep annotations)
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- cpu_only: CPU-only traces have no launches or device events to follow, so no critical path
-- From critical_path's segments.  path_ns = Σ segment durations; step_ns =
-- the slowest rank's step window (critical_path_steps, computed apart: the two
-- are equal; a rank's consecutive windows never overlap, so where the device
-- runs behind the host it is the device's step period).  <kind>_ns = the path's time in each kind (critical_path lists
-- the kinds).  num_ranks = ranks the path runs through; by_rank = the path's
-- time per rank (rank, ns), most first; top_rank / top_rank_ns = the first of
-- them.  top_op, top_op_kind, top_op_rank, top_op_ns: the (rank, kind, name)
-- with the most path time.  exposed_comm_ns = the step's exposed
-- communication in the step model (docs/metrics.md "The step model"):
-- rank_step_breakdown's exposed_comm_ns, |U(comm) \ U(compute)| over the
-- rank's device slot of the step (whichever step launched the events, each
-- instant once), the mean over the run's ranks in the step (a rank whose step
-- launched no device work has an empty slot: 0), so it is never longer than
-- the longest of the ranks' slots; path_comm_ns = the communication on the
-- path (comm_transfer_ns + comm_wait_ns);
-- blocking_comm_ns = the part of it outside its rank's compute (communication
-- that is exposed and on the path: it cost step time), so blocking_comm_ns ≤
-- path_comm_ns; blocking_comm_pct_of_path_comm = 100 · blocking ÷ path_comm,
-- at most 100 (NULL when no communication is on the path).
-- blocking and exposed are not in one frame (the path runs across ranks,
-- exposed is a mean over them), so neither is given as a share of the other.
-- has_sync_events: the run's traces hold CUDA sync
-- events.  cross_stream_basis: where the path's cross-stream waits come from —
-- 'sync events' (every GPU trace of the run records its stream waits:
-- critical_path_waits), 'inferred' (none does: a wait is inferred from the
-- times, another stream's event that ended within 20 µs before), 'mixed'.
-- steady_state: the step is one of those the steady-state step period
-- (run_summary.device_step_period_ns) is the median over: some rank's step
-- launched device work (it has a device slot), and it is no rank's first
-- such step, unless no later one exists (explain names one of these steps).
-- Units: *_ns nanoseconds, *_pct_of_path_comm percent.
WITH seg AS (
    SELECT * FROM critical_path_rows($run_id)
),
kinds AS (
    SELECT run_id, step,
           sum(dur_ns)::BIGINT AS path_ns,
           coalesce(sum(dur_ns) FILTER (WHERE kind = 'compute_kernel'), 0)::BIGINT AS compute_kernel_ns,
           coalesce(sum(dur_ns) FILTER (WHERE kind = 'memory'), 0)::BIGINT AS memory_ns,
           coalesce(sum(dur_ns) FILTER (WHERE kind = 'comm_transfer'), 0)::BIGINT AS comm_transfer_ns,
           coalesce(sum(dur_ns) FILTER (WHERE kind = 'comm_wait'), 0)::BIGINT AS comm_wait_ns,
           coalesce(sum(dur_ns) FILTER (WHERE kind = 'launch_delay'), 0)::BIGINT AS launch_delay_ns,
           coalesce(sum(dur_ns) FILTER (WHERE kind = 'cpu_op'), 0)::BIGINT AS cpu_op_ns,
           coalesce(sum(dur_ns) FILTER (WHERE kind = 'host_gap'), 0)::BIGINT AS host_gap_ns,
           count(DISTINCT rank) AS num_ranks
    FROM seg GROUP BY run_id, step
),
per_rank AS (
    SELECT run_id, step, rank, sum(dur_ns)::BIGINT AS ns FROM seg GROUP BY ALL
),
ranks AS (
    SELECT run_id, step,
           list(struct_pack(rank := rank, ns := ns) ORDER BY ns DESC, rank) AS by_rank,
           arg_max(rank, struct_pack(n := ns, r := -rank)) AS top_rank, max(ns) AS top_rank_ns
    FROM per_rank GROUP BY run_id, step
),
per_op AS (
    SELECT run_id, step, rank, kind, name, sum(dur_ns)::BIGINT AS ns FROM seg GROUP BY ALL
),
ops AS (
    SELECT run_id, step,
           arg_max(struct_pack(name := name, kind := kind, rank := rank, ns := ns),
                   struct_pack(n := ns, r := -rank, k := kind, m := name)) AS top
    FROM per_op GROUP BY run_id, step
),
blocking AS (  -- the path's communication outside its rank's compute
    SELECT s.run_id, s.step,
           sum(s.dur_ns - coalesce((
               SELECT sum(least(s.start_ns + s.dur_ns, i.end_ns) - greatest(s.start_ns, i.start_ns))
               FROM compute_islands i
               WHERE i.trace_id = s.trace_id AND i.start_ns < s.start_ns + s.dur_ns AND i.end_ns > s.start_ns), 0))
               ::BIGINT AS blocking_comm_ns
    FROM seg s WHERE s.kind IN ('comm_transfer', 'comm_wait') GROUP BY s.run_id, s.step
),
win AS (
    SELECT run_id, step, any_value(rank) FILTER (WHERE is_slowest) AS slowest_rank,
           any_value(step_ns) FILTER (WHERE is_slowest) AS step_ns, count(DISTINCT rank) AS ranks_in_step
    FROM critical_path_steps($run_id) GROUP BY run_id, step
),
slots AS (  -- the step model's per-step parts, each rank's step measured over its device slot
    SELECT run_id, step, sum(exposed_comm_ns) AS exposed_sum_ns, bool_or(first_slot) AS first_slot
    FROM step_slot_breakdown($run_id) GROUP BY run_id, step
),
exposed AS (  -- the steps the steady-state step period is the median over (run_summary.device_step_period_ns)
    SELECT *, NOT first_slot OR bool_and(first_slot) OVER (PARTITION BY run_id) AS steady_state FROM slots
),
sync AS (
    SELECT run_id, bool_or(kind = 'sync') AS has_sync_events FROM device_events
    WHERE $run_id IS NULL OR run_id = $run_id GROUP BY run_id
),
waits AS (
    SELECT t.run_id, count(*) AS gpu_traces,
           count(*) FILTER (WHERE t.trace_id IN (SELECT trace_id FROM critical_path_waits($run_id))) AS synced
    FROM traces t WHERE t.trace_mode = 'gpu' AND ($run_id IS NULL OR t.run_id = $run_id) GROUP BY t.run_id
),
joined AS (
    SELECT k.run_id, k.step, w.slowest_rank, k.path_ns, w.step_ns,
           k.compute_kernel_ns, k.memory_ns, k.comm_transfer_ns, k.comm_wait_ns, k.launch_delay_ns, k.cpu_op_ns,
           k.host_gap_ns, k.num_ranks, r.by_rank, r.top_rank, r.top_rank_ns,
           o.top.name AS top_op, o.top.kind AS top_op_kind, o.top.rank AS top_op_rank, o.top.ns AS top_op_ns,
           round(coalesce(e.exposed_sum_ns, 0) / w.ranks_in_step)::BIGINT AS exposed_comm_ns,
           k.comm_transfer_ns + k.comm_wait_ns AS path_comm_ns, coalesce(b.blocking_comm_ns, 0) AS blocking_comm_ns,
           coalesce(y.has_sync_events, false) AS has_sync_events,
           CASE WHEN coalesce(ws.synced, 0) = 0 THEN 'inferred' WHEN ws.synced = ws.gpu_traces THEN 'sync events'
                ELSE 'mixed' END AS cross_stream_basis,
           coalesce(e.steady_state, false) AS steady_state
    FROM kinds k
    JOIN win w USING (run_id, step)
    JOIN ranks r USING (run_id, step)
    JOIN ops o USING (run_id, step)
    LEFT JOIN blocking b USING (run_id, step)
    LEFT JOIN exposed e USING (run_id, step)
    LEFT JOIN sync y USING (run_id)
    LEFT JOIN waits ws USING (run_id)
)
SELECT * EXCLUDE (has_sync_events, cross_stream_basis, steady_state),
       100.0 * blocking_comm_ns / nullif(path_comm_ns, 0) AS blocking_comm_pct_of_path_comm,
       has_sync_events,
       cross_stream_basis,
       steady_state
FROM joined
ORDER BY run_id, step
