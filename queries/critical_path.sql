-- name: critical_path
-- description: The critical path of each profiled step: its segments across ranks, CPU threads and GPU streams, in time order.
-- grain: one row per run × step × segment of the path
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- The longest path through the step's dependency graph (critical_path_graph:
-- thread order, launches, stream order, collectives across ranks), from the
-- end of the slowest rank's step (critical_path_steps) back to its start.
-- Consecutive segments tile that window: Σ dur_ns = the slowest rank's step
-- time.  seq orders the segments from the step's start (offset_ns after it);
-- rank and lane say where the path runs (lane: 'stream N' or 'thread T');
-- event_id is the device event or runtime call a segment is part of (NULL for
-- the gaps between them); start_ns is on that rank's trace clock.  kind:
--  * compute_kernel: a kernel on the path (compute, or unclassified);
--  * memory: a memcpy / memset;
--  * comm_transfer: a collective's transfer (its last transfer_ns, the
--    shortest duration over its members, as rank_wait);
--  * comm_wait: a collective's time beyond the transfer on the rank that
--    arrived last (the path runs through the last arrival, not the waiters);
--  * launch_delay: a device event launched (or its stream free) but not yet
--    started: start − max(the launching call's start, the previous event's end);
--  * cpu_op: a runtime call, or host time between two calls before a launch
--    by a known op (named after it), or a blocking call after the device event
--    it waited for ended;
--  * host_gap: host time no op accounts for (name '(host)'): before the first
--    launch of the step, after the last, or before a rank's step began.
-- GPU traces only (CPU-only traces have no launches to follow).
-- Units: *_ns nanoseconds.
SELECT run_id, step, seq, rank, lane, kind, name, event_id, start_ns, dur_ns, offset_ns
FROM critical_path_rows($run_id)
ORDER BY run_id, step, seq
