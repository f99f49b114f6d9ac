-- name: collective_skew
-- description: Each collective matched across ranks: transfer time, worst wait, arrival skew and the straggler.
-- grain: one row per run × process group × seq (the k-th collective of the group on every rank)
-- param: run_id  optional; only this run (NULL: every run)
-- Matching: by process group + the trace's sequence number, else by order
-- within the group on each rank.  transfer_ns = min duration over ranks;
-- max_wait_ns = max duration − transfer; skew_ns = latest start − earliest
-- start, on clocks aligned by baseTimeNanoseconds when every trace has it;
-- straggler_rank = the latest to arrive (NULL when skew_ns = 0).  types_agree is false when the ranks
-- disagree on the collective type (collectives_seen lists them): the pairing
-- is then suspect and reported, not hidden.  num_ranks < the run's ranks means
-- some ranks have fewer collectives in the group.
-- Units: *_ns nanoseconds.
SELECT run_id, pg_key AS pg_name,
       CASE WHEN bool_and(types_agree) THEN any_value(collective) END AS collective,
       seq, any_value(num_ranks) AS num_ranks, any_value(transfer_ns) AS transfer_ns,
       any_value(max_wait_ns) AS max_wait_ns, any_value(skew_ns) AS skew_ns,
       any_value(straggler_rank) AS straggler_rank, bool_and(types_agree) AS types_agree,
       any_value(collectives_seen) AS collectives_seen
FROM matched_collectives($run_id)
GROUP BY run_id, pg_key, seq
ORDER BY run_id, pg_key, seq
