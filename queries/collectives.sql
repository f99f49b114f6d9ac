-- name: collectives
-- description: Every collective instance per rank: type, process group, sizes, duration, exposed time, algbw/busbw.
-- grain: one row per run × rank × communication kernel
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- Metadata comes from the NCCL kernel args, else the launching CPU op
-- (record_param_comms, nccl:*, c10d::*), else the kernel name (meta_source).
-- exposed_ns = |event \ U(compute)| on the rank.  seq is the trace's sequence
-- number, else the order within the rank's process group (seq_source).
-- in_bytes / out_bytes = elements × dtype size.  algbw_gbps = S / dur with
-- S = out_bytes for all_gather, in_bytes otherwise; busbw_gbps = algbw ×
-- 2(n−1)/n (all_reduce), (n−1)/n (all_gather, reduce_scatter, all_to_all),
-- 1 (broadcast, reduce, send/recv), n = group_size (nccl-tests
-- PERFORMANCE.md).  GB = 1e9 bytes.  bw_null_reason: why bandwidth is NULL.
-- Units: *_ns nanoseconds, *_bytes bytes, *_gbps GB/s.
SELECT c.run_id, c.rank, c.pg_name, c.pg_desc, c.collective, c.seq, c.seq_source, c.group_size, c.dtype,
       c.in_bytes, c.out_bytes, c.start_ns, c.dur_ns, c.exposed_ns, c.algbw_gbps, c.busbw_gbps,
       c.bw_null_reason, c.meta_source, d.name AS kernel
FROM comm_events($run_id) c JOIN device_events d USING (trace_id, event_id)
ORDER BY c.run_id, c.rank, c.start_ns
