-- name: compute_efficiency
-- description: Run-level compute efficiency: the FLOPs-weighted % of peak of the run's GEMM, attention and convolution ops.
-- grain: one row per run (runs with FLOP-counted ops)
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- cpu_only: the GPU time of an op comes from the kernels it launched; CPU-only traces have no rows
-- From op_efficiency's rows (family × pass × dtype) with a peak: compute_efficiency_pct_of_peak
-- = Σ flops · achieved_pct_of_peak ÷ Σ flops (each FLOP weighs the same, whatever its
-- dtype's peak); achieved_tflops = Σ flops ÷ Σ gpu_ns over the same rows; flops_pct_gemm,
-- _attention, _conv: each family's share of those FLOPs.  Covers only the
-- counted ops' kernels, not the step (that is run_summary's MFU).
-- warning: NULL, or the family × pass × dtype rows above 100 % of their peak (op_efficiency's
-- warning), which no kernel can reach, and so the run's figure is not to be trusted.
-- Units: flops FLOP; gpu_ns nanoseconds; achieved_tflops 1e12 FLOP/s;
-- compute_efficiency_pct_of_peak percent (above 100 only with a warning); flops_pct_of_counted_*
-- percent of flops.
WITH o AS (
    SELECT * FROM op_flops($run_id) WHERE flops IS NOT NULL AND gpu_ns > 0 AND peak_flops IS NOT NULL
),
g AS (
    SELECT run_id, family, pass, peak_dtype, sum(flops) AS flops, sum(gpu_ns) AS gpu_ns, max(peak_flops) AS peak
    FROM o GROUP BY run_id, family, pass, peak_dtype
)
SELECT run_id, sum(flops) AS flops, sum(gpu_ns)::BIGINT AS gpu_ns,
       sum(flops) / sum(gpu_ns) / 1e3 AS achieved_tflops,
       sum(flops * (100.0 * flops / (gpu_ns / 1e9) / peak)) / sum(flops) AS compute_efficiency_pct_of_peak,
       100.0 * coalesce(sum(flops) FILTER (WHERE family = 'gemm'), 0) / sum(flops) AS flops_pct_of_counted_gemm,
       100.0 * coalesce(sum(flops) FILTER (WHERE family = 'attention'), 0) / sum(flops) AS flops_pct_of_counted_attention,
       100.0 * coalesce(sum(flops) FILTER (WHERE family = 'conv'), 0) / sum(flops) AS flops_pct_of_counted_conv,
       CASE WHEN bool_or(100.0 * flops / (gpu_ns / 1e9) / peak > 100)
            THEN string_agg(format('{} {} ({}) at {:.0f} % of its peak', family, pass, peak_dtype,
                                   100.0 * flops / (gpu_ns / 1e9) / peak), ', ' ORDER BY family, pass, peak_dtype)
                     FILTER (WHERE 100.0 * flops / (gpu_ns / 1e9) / peak > 100)
                 || ': above what the device can do: their kernels may run a faster path than the dtype''s peak (TF32 or another tensor-core path the trace does not record), the recorded shapes may over-count their FLOPs, or the device or its peak is wrong' END AS warning
FROM g GROUP BY run_id ORDER BY run_id
