-- name: collective_skew
-- description: Each collective matched across ranks: transfer time, worst wait, arrival skew and the straggler.
-- grain: one row per run × process group × seq (the k-th collective of the group on every rank)
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- Matching: by process group + the trace's sequence number, else by order
-- within the group on each rank.  transfer_ns = min duration over ranks;
-- max_wait_ns = max duration − transfer; skew_ns = latest start − earliest
-- start, on clocks aligned by baseTimeNanoseconds when every trace has it;
-- straggler_rank = the latest to arrive (NULL when skew_ns = 0).  types_agree is false when the ranks
-- disagree on the collective type (collectives_seen lists them): the pairing
-- is then suspect and reported, not hidden.  num_ranks < the run's ranks means
-- some ranks have fewer collectives in the group.
-- Units: *_ns nanoseconds.
SELECT run_id, pg_key AS pg_name, collective, seq, num_ranks, transfer_ns, max_wait_ns, skew_ns,
       straggler_rank, types_agree, collectives_seen
FROM collective_matches($run_id)
ORDER BY run_id, pg_key, seq
