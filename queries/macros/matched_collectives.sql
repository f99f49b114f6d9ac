-- name: matched_collectives
-- description: Every rank-instance of a collective with its matched collective's figures and its own wait.
-- grain: one row per run × rank × communication device event
-- param: run VARCHAR a run_id, or NULL for every run
-- depends: comm_events, collective_matches
-- comm_events' columns, collective_matches' figures, and wait_ns = this
-- instance's duration − transfer_ns.
-- Units: *_ns nanoseconds, *_bytes bytes, *_gbps GB/s.
SELECT e.*, m.num_ranks, m.transfer_ns, e.dur_ns - m.transfer_ns AS wait_ns, m.max_wait_ns,
       m.skew_ns, m.straggler_rank, m.types_agree, m.collectives_seen
FROM comm_events(run) e JOIN collective_matches(run) m USING (run_id, pg_key, seq)
