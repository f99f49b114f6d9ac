-- name: hta_comm_comp_overlap
-- description: HTA's get_comm_comp_overlap reproduced: % of communication time overlapped by compute.
-- grain: one row per run × rank (ranks with no GPU kernels in HTA's event set have no row)
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- cpu_only: HTA's breakdown needs GPU events; CPU-only traces (trace_mode 'cpu') have no rows
-- comp_comm_overlap_pct_of_comm = 100 · |U(COMPUTATION) ∩ U(COMMUNICATION)| / |U(COMMUNICATION)|,
-- over HTA's event set and kernel types (queries/macros/hta_events.sql), rounded to
-- 2 decimals as HTA does; NULL where the rank has no communication kernels
-- (HTA divides by zero and gives NaN).  HTA calls it comp_comm_overlap_pctg.
-- Units: percent of the communication time.
WITH m AS (
    SELECT * FROM hta_merged($run_id)
),
per_rank AS (
    SELECT run_id, rank,
           coalesce(max(merged_ns) FILTER (WHERE set_name = 'COMPUTATION'), 0) AS comp_ns,
           coalesce(max(merged_ns) FILTER (WHERE set_name = 'COMMUNICATION'), 0) AS comm_ns,
           coalesce(max(merged_ns) FILTER (WHERE set_name = 'COMP_OR_COMM'), 0) AS union_ns
    FROM m GROUP BY run_id, rank
)
SELECT run_id, rank,
       round(100.0 * (comp_ns + comm_ns - union_ns) / nullif(comm_ns, 0), 2) AS comp_comm_overlap_pct_of_comm
FROM per_rank
ORDER BY run_id, rank
