-- name: collective_summary
-- description: Per run, collective type and process group: count, time, exposed time, bytes, median busbw.
-- grain: one row per run × collective × process group × message-size bucket
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- size_bucket_bytes = the power of two at or below the instance's message
-- size S (as in algbw; NULL when unknown): one row per bucket makes a
-- message-size histogram.  total_ns / exposed_ns sum over ranks and instances;
-- median_busbw_gbps is over instances with a known bandwidth.
-- Units: *_ns nanoseconds, *_bytes bytes, *_gbps GB/s.
SELECT run_id, collective, pg_name, pg_desc,
       CASE WHEN algbw_bytes > 0 THEN (2::DOUBLE ^ floor(log2(algbw_bytes)))::BIGINT END AS size_bucket_bytes,
       count(*) AS count,
       count(DISTINCT rank) AS num_ranks,
       sum(dur_ns)::BIGINT AS total_ns,
       sum(exposed_ns)::BIGINT AS exposed_ns,
       sum(algbw_bytes)::BIGINT AS total_bytes,
       median(busbw_gbps) AS median_busbw_gbps
FROM comm_events($run_id)
GROUP BY ALL
ORDER BY run_id, total_ns DESC
