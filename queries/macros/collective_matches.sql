-- name: collective_matches
-- description: Collectives matched across the ranks of a run: transfer, worst wait, arrival skew, straggler.
-- grain: one row per run × process group (pg_key) × seq
-- param: run VARCHAR a run_id, or NULL for every run
-- depends: comm_events
-- The k-th collective of a process group on each rank of a run is the same
-- collective (matched by pg_key + seq).  transfer_ns = min duration over
-- ranks; max_wait_ns = max duration − transfer; skew_ns = latest − earliest
-- aligned start; straggler_rank = the latest to arrive (NULL when all start at
-- the same time); types_agree = every rank saw the same collective type (a
-- mismatch is reported, not hidden; collective is then NULL and
-- collectives_seen lists them).
-- Units: *_ns nanoseconds.
SELECT run_id, pg_key, seq,
       count(*) AS num_ranks,
       min(dur_ns) AS transfer_ns,
       max(dur_ns) - min(dur_ns) AS max_wait_ns,
       max(aligned_start_ns) - min(aligned_start_ns) AS skew_ns,
       CASE WHEN max(aligned_start_ns) > min(aligned_start_ns)
            THEN arg_max(rank, aligned_start_ns) END AS straggler_rank,  -- none when all arrive at once
       min(coalesce(collective, '?')) = max(coalesce(collective, '?')) AS types_agree,
       CASE WHEN min(coalesce(collective, '?')) = max(coalesce(collective, '?')) THEN any_value(collective) END
           AS collective,
       string_agg(DISTINCT coalesce(collective, '?'), ',' ORDER BY coalesce(collective, '?')) AS collectives_seen
FROM comm_events(run) GROUP BY run_id, pg_key, seq
