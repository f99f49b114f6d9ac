-- name: op_efficiency
-- description: Achieved TFLOP/s of GEMM, attention and convolution ops, and % of the device's peak for their dtype.
-- grain: one row per run × op family × pass × dtype
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- cpu_only: the GPU time of an op comes from the kernels it launched; CPU-only traces have no rows
-- Ops, FLOPs and GPU time as in queries/macros/op_flops.sql (recorded shapes: traces taken
-- with record_shapes; without them no op has FLOPs and the run has no rows).  Summed over
-- ranks and the whole trace: flops = Σ op FLOPs; gpu_ns = Σ duration of the kernels those
-- ops launched; achieved_tflops = flops ÷ gpu_ns ÷ 1000; achieved_pct_of_peak = 100 ·
-- achieved FLOP/s ÷ the device's peak for the dtype (device_peaks).  pass: forward,
-- backward, or any (GEMMs: aten::mm serves both).  Ops without FLOPs (missing shapes, a
-- transposed convolution) are counted in num_ops_without_flops and left out of the sums.
-- dtype: op_flops' peak_dtype (tf32 for fp32 ops whose kernels show TF32 tensor cores).
-- warning: NULL, or why achieved_pct_of_peak above 100 cannot be (never a silent number).
-- Units: flops FLOP; gpu_ns nanoseconds; achieved_tflops, peak_tflops 1e12 FLOP/s;
-- achieved_pct_of_peak percent of peak_tflops (above 100 only with a warning).
WITH o AS (
    SELECT * FROM op_flops($run_id)
),
per_family AS (
    SELECT run_id, family, pass, peak_dtype AS dtype,
           count(*) FILTER (WHERE flops IS NOT NULL) AS num_ops,
           count(*) FILTER (WHERE flops IS NULL) AS num_ops_without_flops,
           sum(flops) FILTER (WHERE flops IS NOT NULL AND gpu_ns > 0) AS flops,
           sum(gpu_ns) FILTER (WHERE flops IS NOT NULL AND gpu_ns > 0) AS gpu_ns,
           max(peak_flops) AS peak_flops
    FROM o GROUP BY run_id, family, pass, peak_dtype
)
SELECT run_id, family, pass, dtype, num_ops, num_ops_without_flops, flops, gpu_ns::BIGINT AS gpu_ns,
       flops / gpu_ns / 1e3 AS achieved_tflops,
       peak_flops / 1e12 AS peak_tflops,
       100.0 * (flops / (gpu_ns / 1e9)) / peak_flops AS achieved_pct_of_peak,
       CASE WHEN 100.0 * (flops / (gpu_ns / 1e9)) / peak_flops > 100
            THEN format('{:.0f} % of the {} peak is above what the device can do: its kernels may run a faster path than the dtype''s peak (TF32 or another tensor-core path the trace does not record), the recorded shapes may over-count its FLOPs, or the device or its peak is wrong', 100.0 * (flops / (gpu_ns / 1e9)) / peak_flops, dtype) END
           AS warning
FROM per_family
ORDER BY run_id, family, pass, dtype
