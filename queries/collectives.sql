-- name: collectives
-- description: Every collective instance per rank: type, process group, sizes, duration, exposed time, algbw/busbw.
-- grain: one row per run × rank × communication kernel
-- param: run_id  optional; only this run (NULL: every run)
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
SELECT run_id, rank, pg_name, pg_desc, collective, seq, seq_source, group_size, dtype,
       in_bytes, out_bytes, start_ns, dur_ns, exposed_ns, algbw_gbps, busbw_gbps,
       bw_null_reason, meta_source, kernel
FROM comm_events($run_id)
ORDER BY run_id, rank, start_ns
