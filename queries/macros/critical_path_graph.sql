-- name: critical_path_graph
-- description: The dependency graph the critical path walks: every device event, host runtime call and host collective op with its predecessors.
-- grain: one row per run × rank × node (a device event, a host runtime call or collective op) of a GPU trace
-- param: run VARCHAR a run_id, or NULL for every run
-- depends: comm_events, collective_matches, critical_path_waits
-- Nodes: the device events of GPU traces (kernels, copies, sets; not the
-- cuda_sync markers) on their stream lane, the runtime calls (cuda_runtime,
-- cuda_driver, runtime, hip_runtime) on their thread lane ('thread <tid>'),
-- and the host collective ops (record_param_comms, c10d::, nccl:, gloo:,
-- mpi:, ucc: ...; kind 'collective_op') that launched a communication event
-- (a runtime call inside the op has its correlation) which ended inside the
-- op: candidates for a host that waited in a collective.  They are outside
-- their thread's order (their calls are in it).  idx numbers the nodes of the
-- selection (0, 1, ...).
-- Times are on the run's shared clock (start_ns + clock_ns = trace time +
-- baseTimeNanoseconds when every trace of the run has it, else trace time):
-- clock_ns is what was added.  Edges (each node's predecessors, as idx):
--  * prev_idx: the node before it on the same lane (thread or stream order;
--    collective ops are left out of a thread's order, and a collective op's is the node
--    that started before it);
--  * launch_idx (device events): the runtime call that launched it (same
--    correlation; the last such call of the trace), its launch delay being
--    start − the call's start;
--  * sync_idx (host nodes): the device event of the same rank that ended
--    last inside the call (NULL when none did); for a cudaEventSynchronize a
--    CUDA sync event recorded (critical_path_waits: 'Event Sync'), the event it
--    waited for: the last launched on the recording stream before the
--    cudaEventRecord; for a collective op, the communication event it
--    launched that ended inside it (the one that ended last, if several).  blocking says the call waited for it by what it
--    is: a synchronize (device / stream / event), cudaMemcpy, cudaMemcpyAsync,
--    cudaMemcpyWithStream and their hip spellings.  For any other host node
--    the walk decides from the times whether it waited (a launch that could
--    not be issued, a blocking collective: queries/analysis/critical_path.py);
--  * block_idx (runtime calls): the collective op of the same thread that
--    ended last at or before the call's start (the host resumed after it, if
--    it waited);
--  * event_idx (device events of a trace with CUDA sync events): the event
--    a cross-stream wait made it wait for (critical_path_waits: a
--    cudaStreamWaitEvent on its stream S waiting on a cudaEventRecord of
--    stream R).  The waiting event is the first launched on S after the
--    cudaStreamWaitEvent, the waited-for one the last launched on R before the
--    cudaEventRecord; correlation ids number the launches of a trace in
--    order (HTA's "previous launch" / "next launch", by launch order).  With
--    several waits before one event, the waited-for event that ended last;
--  * wait_idx: the node of another lane of the same trace and side (another
--    stream of a device event, another thread of a runtime call) that ended
--    last at or before the node's start: a candidate for what it waited for (a
--    cross-stream event wait, a thread woken by another), which the walk takes
--    only when it ended within a few µs of the start and after every other
--    predecessor was ready (inferred from the times).  NULL on the device
--    events of a trace with CUDA sync events: there event_idx says exactly
--    which waits there were, and an event without one waited for none;
--  * last_idx, transfer_ns (communication events): the rank-instance of the
--    same collective (process group and seq, as collective_matches) that
--    arrived last, and the collective's transfer time (the shortest duration
--    over its members): the collective ends on every member after the last
--    member arrived.
-- launched_op (runtime calls): the op that launched the device events the
-- call launched (device_events.launch_op).  target_idx (runtime calls): the
-- call's next launch, the first device event launched by the first launching
-- call at or after it on its thread: the walk asks whether the stream it went
-- to was busy through the host gap before the call (the host waited for it).
-- Units: *_ns nanoseconds.
WITH base AS (
    SELECT run_id, bool_and(base_time_ns IS NOT NULL) AS all_base FROM traces
    WHERE run IS NULL OR run_id = run GROUP BY run_id
),
tr AS (
    SELECT t.trace_id, t.run_id, t.rank, CASE WHEN b.all_base THEN t.base_time_ns ELSE 0 END AS clock_ns
    FROM traces t JOIN base b USING (run_id) WHERE t.trace_mode = 'gpu'
),
dev AS (
    SELECT d.trace_id, tr.run_id, tr.rank, d.event_id, 'gpu' AS side, d.lane, d.kind, d.name, d.launch_op,
           d.ts_ns + tr.clock_ns AS start_ns, d.ts_ns + d.dur_ns + tr.clock_ns AS end_ns, tr.clock_ns,
           d.correlation, d.step, d.stream
    FROM device_events d JOIN tr USING (trace_id) WHERE d.kind <> 'sync'
),
rt AS (
    SELECT c.trace_id, tr.run_id, tr.rank, c.event_id, 'cpu' AS side, 'thread ' || coalesce(c.tid, '?') AS lane,
           'runtime' AS kind, c.name, NULL::VARCHAR AS launch_op,
           c.ts_ns + tr.clock_ns AS start_ns, c.ts_ns + c.dur_ns + tr.clock_ns AS end_ns, tr.clock_ns,
           c.correlation, NULL::BIGINT AS step, NULL::BIGINT AS stream
    FROM cpu_events c JOIN tr USING (trace_id)
    WHERE lower(c.cat) IN ('cuda_runtime', 'cuda_driver', 'runtime', 'hip_runtime', 'mtia_runtime', 'xpu_runtime',
                           'xpu_driver', 'privateuse1_runtime', 'privateuse1_driver')  -- vocabulary.RUNTIME_CATS
),
coll_ops AS (  -- host collective ops (vocabulary.COLLECTIVE_OP_PREFIXES)
    SELECT c.trace_id, tr.run_id, tr.rank, c.event_id, c.name, 'thread ' || coalesce(c.tid, '?') AS lane,
           c.ts_ns + tr.clock_ns AS start_ns, c.ts_ns + c.dur_ns + tr.clock_ns AS end_ns, tr.clock_ns
    FROM cpu_events c JOIN tr USING (trace_id)
    WHERE lower(c.cat) NOT IN ('cuda_runtime', 'cuda_driver', 'runtime', 'hip_runtime', 'mtia_runtime', 'xpu_runtime',
                               'xpu_driver', 'privateuse1_runtime', 'privateuse1_driver')
      AND (starts_with(c.name, 'record_param_comms') OR starts_with(c.name, 'c10d::')
           OR starts_with(c.name, 'nccl:') OR starts_with(c.name, 'gloo:') OR starts_with(c.name, 'mpi:')
           OR starts_with(c.name, 'ucc:'))
),
ops AS (  -- ... with the communication event each launched (a call inside has its correlation) and outlived
    SELECT o.trace_id, o.run_id, o.rank, o.event_id, 'cpu' AS side, o.lane, 'collective_op' AS kind, o.name,
           NULL::VARCHAR AS launch_op, o.start_ns, o.end_ns, o.clock_ns, NULL::BIGINT AS correlation,
           NULL::BIGINT AS step, NULL::BIGINT AS stream, arg_max(d.event_id, d.end_ns) AS waited_event
    FROM coll_ops o
    JOIN rt r ON r.trace_id = o.trace_id AND r.lane = o.lane AND r.start_ns >= o.start_ns AND r.end_ns <= o.end_ns
    JOIN dev d ON d.trace_id = r.trace_id AND d.correlation = r.correlation AND d.kind = 'comm'
    WHERE d.end_ns <= o.end_ns
    GROUP BY ALL
),
nodes AS (
    SELECT *, (row_number() OVER (ORDER BY trace_id, lane, start_ns, end_ns, event_id, kind) - 1)::BIGINT AS idx
    FROM (SELECT *, NULL::BIGINT AS waited_event FROM dev UNION ALL SELECT *, NULL::BIGINT FROM rt
          UNION ALL SELECT * FROM ops)
),
ordered AS (  -- thread order without the collective ops; a collective op's predecessor: the node that started before it
    SELECT *, CASE WHEN kind = 'collective_op' THEN lag(idx) OVER (PARTITION BY trace_id, lane ORDER BY idx)
                   ELSE lag(idx) OVER (PARTITION BY trace_id, lane, kind = 'collective_op' ORDER BY idx) END AS prev_idx
    FROM nodes
),
launcher AS (  -- the last runtime call of each correlation id in a trace
    SELECT trace_id, correlation, arg_max(idx, event_id) AS launch_idx
    FROM nodes WHERE side = 'cpu' AND correlation IS NOT NULL GROUP BY trace_id, correlation
),
launched AS (  -- per launching call: the op of its device events, and the first of them
    SELECT l.launch_idx, min(d.launch_op) AS launched_op, min(d.idx) AS first_launched_idx
    FROM nodes d JOIN launcher l ON d.side = 'gpu' AND l.trace_id = d.trace_id AND l.correlation = d.correlation
    GROUP BY l.launch_idx
),
targets AS (  -- a runtime call's next launch: the first device event of the first launching call at or after it
    SELECT n.idx, c.first_launched_idx AS target_idx
    FROM (SELECT idx, trace_id, lane, start_ns FROM nodes WHERE side = 'cpu' AND kind <> 'collective_op') n
         ASOF JOIN (SELECT c.trace_id, c.lane, c.start_ns, l.first_launched_idx
                    FROM launched l JOIN nodes c ON c.idx = l.launch_idx) c
         ON c.trace_id = n.trace_id AND c.lane = n.lane AND c.start_ns >= n.start_ns
),
blocking AS (  -- the runtime calls that wait for the GPU by what they are
    SELECT idx FROM nodes WHERE side = 'cpu' AND kind <> 'collective_op' AND name IN (
        'cudaDeviceSynchronize', 'cudaStreamSynchronize', 'cudaEventSynchronize', 'cudaMemcpy', 'cudaMemcpyAsync',
        'cudaMemcpyWithStream', 'hipDeviceSynchronize', 'hipStreamSynchronize', 'hipEventSynchronize', 'hipMemcpy',
        'hipMemcpyAsync', 'hipMemcpyWithStream')
),
waited AS (  -- the device event that ended last at or before a runtime call's end, if it ended inside the call
    SELECT b.idx, d.idx AS sync_idx
    FROM (SELECT * FROM nodes WHERE side = 'cpu' AND kind <> 'collective_op') b
         ASOF JOIN (SELECT trace_id, idx, end_ns FROM nodes WHERE side = 'gpu') d
         ON d.trace_id = b.trace_id AND d.end_ns <= b.end_ns
    WHERE d.end_ns > b.start_ns
),
op_waited AS (  -- a collective op: the communication event it launched
    SELECT h.idx, d.idx AS sync_idx
    FROM nodes h JOIN nodes d ON d.side = 'gpu' AND d.trace_id = h.trace_id AND d.event_id = h.waited_event
    WHERE h.kind = 'collective_op'
),
resumed AS (  -- the collective op of the thread that ended last at or before a runtime call's start
    SELECT n.idx, h.idx AS block_idx
    FROM (SELECT * FROM nodes WHERE side = 'cpu' AND kind <> 'collective_op') n
         ASOF JOIN (SELECT trace_id, lane, idx, end_ns FROM nodes WHERE kind = 'collective_op') h
         ON h.trace_id = n.trace_id AND h.lane = n.lane AND h.end_ns <= n.start_ns
),
arrivals AS (
    SELECT c.run_id, c.trace_id, c.event_id, c.pg_key, c.seq, m.transfer_ns,
           arg_max(struct_pack(t := c.trace_id, e := c.event_id), c.aligned_start_ns)
               OVER (PARTITION BY c.run_id, c.pg_key, c.seq) AS last_arrival
    FROM comm_events(run) c JOIN collective_matches(run) m USING (run_id, pg_key, seq)
),
waits AS (
    SELECT * FROM critical_path_waits(run)
),
launches AS (  -- the device events launched by a call (a correlation id), in launch order
    SELECT trace_id, stream, correlation, idx, end_ns FROM nodes WHERE side = 'gpu' AND correlation IS NOT NULL
),
recorded AS (  -- each wait's waited-for event: the last launched on the recording stream before the cudaEventRecord
    SELECT w.trace_id, w.name, w.stream, w.correlation, g.idx AS src_idx, g.end_ns AS src_end_ns
    FROM waits w ASOF JOIN launches g
         ON w.trace_id = g.trace_id AND w.wait_stream = g.stream AND w.wait_event_corr > g.correlation
),
exact AS (  -- ... which the first event launched on the waiting stream after the cudaStreamWaitEvent waits for
    SELECT g.idx, arg_max(r.src_idx, r.src_end_ns) AS event_idx
    FROM (SELECT * FROM recorded WHERE name = 'Stream Wait Event') r ASOF JOIN launches g
         ON r.trace_id = g.trace_id AND r.stream = g.stream AND r.correlation < g.correlation
    GROUP BY g.idx
),
event_synced AS (  -- a cudaEventSynchronize (the call of the Event Sync's correlation) waited for that event
    SELECT l.launch_idx AS idx, arg_max(r.src_idx, r.src_end_ns) AS sync_idx
    FROM recorded r JOIN launcher l ON l.trace_id = r.trace_id AND l.correlation = r.correlation
    WHERE r.name = 'Event Sync' GROUP BY l.launch_idx
),
synced AS (SELECT DISTINCT trace_id FROM waits),
inferred AS (  -- the node of another lane on the same side that ended last at or before the node's start
    SELECT n.idx, CASE WHEN m.lane <> n.lane THEN m.idx END AS wait_idx
    FROM nodes n ASOF JOIN (SELECT trace_id, side, idx, lane, end_ns FROM nodes) m
         ON m.trace_id = n.trace_id AND m.side = n.side AND m.end_ns <= n.start_ns
    WHERE n.side = 'cpu' OR n.trace_id NOT IN (SELECT trace_id FROM synced)
),
last AS (
    SELECT a.trace_id, a.event_id, a.transfer_ns, n.idx AS last_idx
    FROM arrivals a JOIN nodes n ON n.side = 'gpu' AND n.trace_id = a.last_arrival.t AND n.event_id = a.last_arrival.e
)
SELECT o.idx, o.run_id, o.trace_id, o.rank, o.event_id, o.side, o.lane, o.kind, o.name, o.launch_op,
       o.start_ns, o.end_ns, o.clock_ns, o.step, o.prev_idx, l.launch_idx,
       coalesce(es.sync_idx, ho.sync_idx, w.sync_idx) AS sync_idx, bl.idx IS NOT NULL AS blocking,
       rs.block_idx, x.event_idx, f.wait_idx, la.last_idx, la.transfer_ns, ld.launched_op, tg.target_idx
FROM ordered o
LEFT JOIN launcher l ON o.side = 'gpu' AND l.trace_id = o.trace_id AND l.correlation = o.correlation
LEFT JOIN waited w ON w.idx = o.idx
LEFT JOIN op_waited ho ON ho.idx = o.idx
LEFT JOIN blocking bl ON bl.idx = o.idx
LEFT JOIN resumed rs ON rs.idx = o.idx
LEFT JOIN event_synced es ON es.idx = o.idx
LEFT JOIN exact x ON x.idx = o.idx
LEFT JOIN inferred f ON f.idx = o.idx
LEFT JOIN last la ON o.side = 'gpu' AND la.trace_id = o.trace_id AND la.event_id = o.event_id
LEFT JOIN launched ld ON ld.launch_idx = o.idx
LEFT JOIN targets tg ON tg.idx = o.idx
ORDER BY o.idx
