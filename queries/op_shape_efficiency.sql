-- name: op_shape_efficiency
-- description: op_efficiency per op name and recorded shapes, the ones with the most GPU time per run.
-- grain: one row per run × op name × input shapes × dtype (the top_n by gpu_ns of each run)
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- param: top_n BIGINT 1.. optional; rows per run (NULL: 10)
-- cpu_only: the GPU time of an op comes from the kernels it launched; CPU-only traces have no rows
-- Columns as op_efficiency (same definitions, queries/macros/op_flops.sql); input_dims is
-- the recorded `Input Dims` (JSON) of the op; num_ops its calls over ranks and the trace.
-- warning: as op_efficiency's, for this shape's rows.
-- Units: flops FLOP; gpu_ns nanoseconds; achieved_tflops, peak_tflops 1e12 FLOP/s;
-- achieved_pct_of_peak percent of peak_tflops (above 100 only with a warning).
WITH o AS (
    SELECT * FROM op_flops($run_id) WHERE flops IS NOT NULL AND gpu_ns > 0
),
per_shape AS (
    SELECT run_id, family, pass, name, input_dims, peak_dtype AS dtype, count(*) AS num_ops,
           sum(flops) AS flops, sum(gpu_ns) AS gpu_ns, max(peak_flops) AS peak_flops
    FROM o GROUP BY run_id, family, pass, name, input_dims, peak_dtype
),
ranked AS (
    SELECT *, row_number() OVER (PARTITION BY run_id ORDER BY gpu_ns DESC, name, input_dims) AS rank_in_run
    FROM per_shape
)
SELECT run_id, family, pass, name, input_dims, dtype, num_ops, flops, gpu_ns::BIGINT AS gpu_ns,
       flops / gpu_ns / 1e3 AS achieved_tflops, peak_flops / 1e12 AS peak_tflops,
       100.0 * (flops / (gpu_ns / 1e9)) / peak_flops AS achieved_pct_of_peak,
       CASE WHEN 100.0 * (flops / (gpu_ns / 1e9)) / peak_flops > 100
            THEN format('{:.0f} % of the {} peak is above what the device can do: its kernels may run a faster path than the dtype''s peak (TF32 or another tensor-core path the trace does not record), the recorded shapes may over-count its FLOPs, or the device or its peak is wrong', 100.0 * (flops / (gpu_ns / 1e9)) / peak_flops, dtype) END
           AS warning
FROM ranked WHERE rank_in_run <= coalesce($top_n, 10)
ORDER BY run_id, gpu_ns DESC, name, input_dims
