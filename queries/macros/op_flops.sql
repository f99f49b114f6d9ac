-- name: op_flops
-- description: Every FLOP-counted op instance: its FLOPs from the recorded shapes and the GPU time of the kernels it launched.
-- grain: one row per counted op (trace × CPU op; the innermost flop_ops op on its thread)
-- param: run VARCHAR a run_id, or NULL for every run
-- depends: flop_ops, compute_dtypes, device_peaks, tensor_core_kernels
-- flops: the rules of queries/reference/flop_ops.sql (NULL when the shapes are missing or the
-- rule does not apply).  gpu_ns: Σ duration of the device events launched (same
-- correlation) by the runtime calls inside the op's interval on its thread; num_kernels
-- their count.  dtype: the recorded `Input type` of the op's first operand (c10::BFloat16
-- → bfloat16), peak_dtype its device_peaks column (compute_dtypes; NULL: no table entry);
-- peak_flops the device_peaks figure for that dtype on the trace's device (the row of the
-- longest pattern the device name contains, as run_metrics; the table, not run.json's
-- peak_flops, which is for the run's dtype only).  An fp32 op counts against the plain FP32
-- peak unless a kernel it launched shows TF32 tensor cores in its name (tensor_core_kernels):
-- then its peak_dtype is tf32 and it counts against the TF32 peak (the trace records the op
-- as float either way).
-- matmul_gpu_ns: the part of gpu_ns in kernels of family GEMM, attention or convolution
-- (device_events.family), what run_facts' flops_coverage_pct counts.  a_dims, b_dims: the
-- two operands' recorded dims the rule reads (A, B of flop_ops).  gemm_rows (GEMM ops): the
-- rows of the product, A's dims but the last multiplied (mm: M; bmm: b·M; linear, matmul:
-- every leading dim), what run_facts compares with the token count.
-- Units: peak_flops FLOP/s.
-- Units: flops FLOP; gpu_ns, matmul_gpu_ns, ts_ns, dur_ns nanoseconds; gemm_rows rows.
WITH op AS (
    SELECT c.trace_id, c.run_id, c.rank, c.event_id, c.name, c.tid, c.ts_ns, c.dur_ns,
           c.input_dims, c.concrete_inputs, f.family, f.pass, f.rule, f.a_arg,
           CASE WHEN f.rule = 'conv' AND f.pass = 'backward' THEN 2 ELSE f.a_arg + 1 END AS b_arg,
           f.causal_arg,
           lower(replace(json_extract_string(c.input_types, '$[' || f.a_arg || ']'), 'c10::', '')) AS dtype
    FROM cpu_events c JOIN flop_ops f USING (name)
    WHERE (run IS NULL OR c.run_id = run)
),
leaf AS (
    -- the innermost counted op: none other lies within it on its thread
    SELECT o.* FROM op o
    WHERE NOT EXISTS (SELECT 1 FROM op i WHERE i.trace_id = o.trace_id AND i.tid = o.tid
                      AND i.event_id <> o.event_id AND i.ts_ns >= o.ts_ns
                      AND i.ts_ns + i.dur_ns <= o.ts_ns + o.dur_ns
                      AND (i.dur_ns < o.dur_ns OR i.event_id > o.event_id))
),
shaped AS (
    SELECT *,
           CAST(json_extract(input_dims, '$[' || a_arg || ']') AS BIGINT[]) AS a,
           CAST(json_extract(input_dims, '$[' || b_arg || ']') AS BIGINT[]) AS b,
           json_extract_string(concrete_inputs, '$[' || causal_arg || ']') = 'True' AS causal,
           TRY_CAST(json_extract_string(concrete_inputs, '$[3]') AS BIGINT[]) AS stride,
           TRY_CAST(json_extract_string(concrete_inputs, '$[4]') AS BIGINT[]) AS padding,
           TRY_CAST(json_extract_string(concrete_inputs, '$[5]') AS BIGINT[]) AS dilation
    FROM leaf
),
counted AS (
    SELECT *,
           CASE rule
               WHEN 'mm' THEN 2.0 * a[1] * a[2] * b[2]
               WHEN 'bmm' THEN 2.0 * a[1] * a[2] * a[3] * b[3]
               WHEN 'matmul' THEN 2.0 * greatest(
                   list_aggregate(a, 'product') * CASE WHEN len(b) >= 2 THEN b[-1] ELSE 1 END,
                   list_aggregate(b, 'product') * CASE WHEN len(a) >= 2 THEN a[-2] ELSE 1 END)
               WHEN 'linear' THEN 2.0 * list_aggregate(a, 'product') * b[1]
               WHEN 'attention' THEN 4.0 * a[1] * a[2] * a[3] * b[3] * a[4]
                   * CASE WHEN causal THEN 0.5 ELSE 1 END * CASE WHEN pass = 'backward' THEN 2.5 ELSE 1 END
               WHEN 'conv' THEN 2.0 * a[1] * list_aggregate(b, 'product') * conv_out * conv_grads
           END AS flops
    FROM (
        SELECT *,
               -- forward: the output's spatial size from the input's; backward: grad_output's
               CASE WHEN pass = 'backward' THEN list_aggregate(a[3:], 'product')
                    WHEN json_extract_string(concrete_inputs, '$[6]') = 'True' THEN NULL  -- transposed
                    ELSE list_aggregate(list_transform(a[3:], lambda x, i:
                        (x + 2 * padding[i] - dilation[i] * (b[i + 2] - 1) - 1) // stride[i] + 1), 'product') END AS conv_out,
               CASE WHEN pass = 'backward' THEN
                   len(list_filter(string_split(trim(json_extract_string(concrete_inputs, '$[10]'), '[]'), ', ')[1:2],
                                   lambda x: x = 'True'))
                    ELSE 1 END AS conv_grads
        FROM shaped
    )
),
device AS (
    SELECT t.trace_id, arg_max(p.pattern, length(p.pattern)) AS pattern
    FROM traces t LEFT JOIN runs r USING (run_id)
    JOIN device_peaks p ON contains(lower(coalesce(r.device_name, t.device_name)), lower(p.pattern))
    WHERE run IS NULL OR t.run_id = run
    GROUP BY t.trace_id
),
launch AS (
    SELECT c.trace_id, c.tid, c.ts_ns, c.correlation FROM cpu_events c
    WHERE c.correlation IS NOT NULL AND (run IS NULL OR c.run_id = run)
),
tensor_core AS (
    SELECT '(?i)(' || string_agg(pattern, '|') || ')' AS re FROM tensor_core_kernels
),
kernels AS (
    SELECT l.trace_id, l.tid, l.ts_ns, sum(d.dur_ns) AS dur_ns, count(*) AS n,
           bool_or(regexp_matches(d.name, tc.re)) AS tf32,
           coalesce(sum(d.dur_ns) FILTER (WHERE d.family IN ('GEMM', 'attention', 'convolution')), 0) AS matmul_ns
    FROM launch l JOIN device_events d ON d.trace_id = l.trace_id AND d.correlation = l.correlation
    CROSS JOIN tensor_core tc
    GROUP BY l.trace_id, l.tid, l.ts_ns, l.correlation
),
launched AS (
    SELECT o.trace_id, o.run_id, o.rank, o.event_id, o.name, o.family, o.pass, o.rule, o.input_dims, o.dtype,
           o.a, o.b, o.ts_ns, o.dur_ns, o.flops,
           coalesce(sum(k.dur_ns), 0)::BIGINT AS gpu_ns, coalesce(sum(k.n), 0)::BIGINT AS num_kernels,
           coalesce(bool_or(k.tf32), false) AS tf32_kernel,
           coalesce(sum(k.matmul_ns), 0)::BIGINT AS matmul_gpu_ns
    FROM counted o
    LEFT JOIN kernels k ON k.trace_id = o.trace_id AND k.tid = o.tid
                       AND k.ts_ns >= o.ts_ns AND k.ts_ns < o.ts_ns + o.dur_ns
    GROUP BY ALL
),
rated AS (
    SELECT o.*, CASE WHEN cd.peak_dtype = 'fp32' AND o.tf32_kernel THEN 'tf32' ELSE cd.peak_dtype END AS peak_dtype,
           dv.pattern
    FROM launched o LEFT JOIN compute_dtypes cd ON cd.name = o.dtype
    LEFT JOIN device dv ON dv.trace_id = o.trace_id
)
SELECT o.trace_id, o.run_id, o.rank, o.event_id, o.name, o.family, o.pass, o.input_dims, o.dtype,
       o.peak_dtype, CASE o.peak_dtype WHEN 'bf16' THEN p.bf16 WHEN 'fp16' THEN p.fp16
                                       WHEN 'tf32' THEN p.tf32 WHEN 'fp32' THEN p.fp32 END AS peak_flops,
       o.ts_ns, o.dur_ns, o.flops, o.gpu_ns, o.num_kernels, o.matmul_gpu_ns,
       o.a AS a_dims, o.b AS b_dims,
       CASE WHEN o.family = 'gemm' THEN CASE o.rule WHEN 'mm' THEN o.a[1] WHEN 'bmm' THEN o.a[1] * o.a[2]
                                                    ELSE list_aggregate(o.a[:-1], 'product') END END AS gemm_rows
FROM rated o LEFT JOIN device_peaks p ON p.pattern = o.pattern
