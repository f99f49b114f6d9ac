-- name: run_facts
-- description: Per run: world size, device, compute dtype, parallel degrees, tokens and FLOPs per token, each with its basis (run.json, --meta, or inferred from the trace).
-- grain: one row per run
-- param: run VARCHAR a run_id, or NULL for every run
-- depends: op_flops, process_group_dims
-- "Where run facts come from" (docs/inputs.md): run.json wins, then `scaletrace ingest --meta`
-- (runs.meta_keys lists the keys it gave), then what the trace shows.  Each *_basis is
-- `run.json`, `--meta` or `inferred: <how>`.
-- world_size: distributedInfo.world_size (the largest over the run's traces), else the
--   number of ranks traced.
-- device_name: the traces' deviceProperties name (the most common one).
-- dtype: the device_peaks column (bf16, fp16, tf32, fp32) of the input type carrying the
--   most FLOPs among the FLOP-counted ops (op_flops); a run.json dtype is kept as written.
-- dp, tp, pp, cp: a process group whose description process_group_dims names a degree gives
--   it (its largest group size); when every group with more than one member has a known
--   description, a degree without a group is 1; a world of one rank is 1 everywhere; dp is
--   world_size ÷ (tp · pp · cp) when no data-parallel group is named.  parallel_basis says,
--   per degree, where it came from (one basis when all four share it).
-- tokens_per_step: run.json tokens_per_step, else global_batch_size × seq_len, else from the
--   token embedding: of the aten::embedding calls inside ProfilerSteps, those of the
--   largest-vocabulary table (first dimension of input 0; ties: the larger table); per rank
--   and step Σ over its calls (micro-batches) of the indices' element count (B·S for
--   [B, S], N for [N]); the mean over the ranks that call it, median over steps, × dp × cp
--   (ranks of one tensor- or pipeline-parallel group see the same tokens, counted once;
--   each context-parallel rank sees 1/cp of every sequence).  rank_tokens_per_step is that
--   per-rank figure (before × dp × cp).
-- flops_per_token: run.json model.flops_per_token, else 6·num_params + 12·num_layers·
--   hidden_size·seq_len when all are known, else 6·num_params, else the FLOP-counted ops'
--   FLOPs of a step (op_flops: GEMM, attention, convolution from their recorded shapes, the
--   mean over traced ranks, median over steps) × world_size ÷ tokens_per_step: MFU is then
--   the counted FLOPs ÷ step time ÷ peak (recomputed activations count; elementwise ops do not).
-- recorded_rank_flops_per_step: that FLOP-counted ops' FLOPs of a step (mean over traced
--   ranks, median over steps), whatever flops_per_token's basis.  kernel_efficiency_pct_of_peak:
--   compute_efficiency's compute_efficiency_pct_of_peak (the counted ops' FLOPs-weighted
--   achieved % of their dtype's table peak, over family × pass × dtype), for run_metrics' check.
-- Units: tokens_per_step, rank_tokens_per_step tokens; flops_per_token FLOP per token;
--   recorded_rank_flops_per_step FLOP; dtype_flops_pct, kernel_efficiency_pct_of_peak percent.
WITH r AS (
    SELECT *, coalesce(meta_keys, []::VARCHAR[]) AS mk FROM runs WHERE run IS NULL OR run_id = run
),
tr AS (
    SELECT run_id, count(DISTINCT rank) AS num_ranks, max(world_size) AS trace_world_size,
           mode(device_name) AS trace_device_name
    FROM traces WHERE run IS NULL OR run_id = run GROUP BY run_id
),
world AS (
    SELECT r.run_id,
           coalesce(r.world_size, tr.trace_world_size, tr.num_ranks) AS world_size,
           CASE WHEN r.world_size IS NOT NULL
                THEN CASE WHEN list_contains(r.mk, 'world_size') THEN '--meta' ELSE 'run.json' END
                WHEN tr.trace_world_size IS NOT NULL THEN 'inferred: distributedInfo.world_size'
                WHEN tr.num_ranks IS NOT NULL
                THEN format('inferred: ranks traced ({}; no distributedInfo)', tr.num_ranks) END AS world_size_basis,
           coalesce(r.device_name, tr.trace_device_name) AS device_name,
           CASE WHEN r.device_name IS NOT NULL
                THEN CASE WHEN list_contains(r.mk, 'device.name') THEN '--meta' ELSE 'run.json' END
                WHEN tr.trace_device_name IS NOT NULL THEN 'inferred: deviceProperties' END AS device_basis
    FROM r LEFT JOIN tr USING (run_id)
),
groups AS (
    -- every described process group of the run, with what its size measures (NULL: unknown name)
    SELECT c.run_id, c.pg_desc, max(c.group_size) AS size, any_value(d.measures) AS measures
    FROM collectives c LEFT JOIN process_group_dims d USING (pg_desc)
    WHERE (run IS NULL OR c.run_id = run) AND c.pg_desc IS NOT NULL
    GROUP BY c.run_id, c.pg_desc
),
named AS (
    SELECT run_id,
           arg_max(pg_desc, size) FILTER (WHERE measures = 'dp') AS dp_group,
           max(size) FILTER (WHERE measures = 'dp') AS dp,
           arg_max(pg_desc, size) FILTER (WHERE measures = 'tp') AS tp_group,
           max(size) FILTER (WHERE measures = 'tp') AS tp,
           arg_max(pg_desc, size) FILTER (WHERE measures = 'pp') AS pp_group,
           max(size) FILTER (WHERE measures = 'pp') AS pp,
           arg_max(pg_desc, size) FILTER (WHERE measures = 'cp') AS cp_group,
           max(size) FILTER (WHERE measures = 'cp') AS cp,
           -- a group of several ranks whose description says nothing: its degree may be any
           bool_and(measures IS NOT NULL OR coalesce(size, 2) <= 1) AS all_known,
           string_agg(DISTINCT pg_desc, ', ' ORDER BY pg_desc) AS descriptions
    FROM groups GROUP BY run_id
),
degrees AS (
    SELECT w.run_id, w.world_size, n.descriptions,
           -- a degree without a group of its own: 1 when every group is known, or in a world of one
           CASE WHEN w.world_size = 1 THEN 'inferred: world size 1'
                WHEN n.all_known THEN format('inferred: no process group of its own among {}', n.descriptions) END
               AS absent_basis,
           CASE WHEN w.world_size = 1 OR n.all_known THEN 1 END AS absent,
           r.dp AS dp_given, r.tp AS tp_given, r.pp AS pp_given, r.cp AS cp_given, r.mk,
           n.dp AS dp_named, n.dp_group, n.tp AS tp_named, n.tp_group,
           n.pp AS pp_named, n.pp_group, n.cp AS cp_named, n.cp_group
    FROM world w JOIN r USING (run_id) LEFT JOIN named n USING (run_id)
),
parallel AS (
    SELECT *,
           coalesce(tp_given, tp_named, absent) AS tp, coalesce(pp_given, pp_named, absent) AS pp,
           coalesce(cp_given, cp_named, absent) AS cp,
           coalesce(dp_given, dp_named,
                    CASE WHEN world_size % (tp * pp * cp) = 0 THEN world_size // (tp * pp * cp) END) AS dp,
           CASE WHEN tp_given IS NOT NULL THEN CASE WHEN list_contains(mk, 'parallel.tp') THEN '--meta' ELSE 'run.json' END
                WHEN tp_named IS NOT NULL THEN format('inferred: process group {}', tp_group)
                ELSE absent_basis END AS tp_basis,
           CASE WHEN pp_given IS NOT NULL THEN CASE WHEN list_contains(mk, 'parallel.pp') THEN '--meta' ELSE 'run.json' END
                WHEN pp_named IS NOT NULL THEN format('inferred: process group {}', pp_group)
                ELSE absent_basis END AS pp_basis,
           CASE WHEN cp_given IS NOT NULL THEN CASE WHEN list_contains(mk, 'parallel.cp') THEN '--meta' ELSE 'run.json' END
                WHEN cp_named IS NOT NULL THEN format('inferred: process group {}', cp_group)
                ELSE absent_basis END AS cp_basis,
           CASE WHEN dp_given IS NOT NULL THEN CASE WHEN list_contains(mk, 'parallel.dp') THEN '--meta' ELSE 'run.json' END
                WHEN dp_named IS NOT NULL THEN format('inferred: process group {}', dp_group)
                WHEN world_size = 1 THEN 'inferred: world size 1'
                WHEN dp IS NOT NULL
                THEN format('inferred: world size {} ÷ (tp · pp · cp = {})', world_size, tp * pp * cp) END AS dp_basis
    FROM degrees
),
bases AS (
    -- each degree's basis; degrees sharing one are said once ("tp 1, pp 1, cp 1: ...")
    SELECT run_id, 1 AS i, 'dp ' || coalesce(dp::VARCHAR, '?') AS label, dp_basis AS basis FROM parallel
    UNION ALL SELECT run_id, 2, 'tp ' || coalesce(tp::VARCHAR, '?'), tp_basis FROM parallel
    UNION ALL SELECT run_id, 3, 'pp ' || coalesce(pp::VARCHAR, '?'), pp_basis FROM parallel
    UNION ALL SELECT run_id, 4, 'cp ' || coalesce(cp::VARCHAR, '?'), cp_basis FROM parallel
),
said AS (
    SELECT run_id, count(*) AS n, string_agg(labels || ': ' || coalesce(basis, 'unknown'), '; ' ORDER BY i) AS text,
           any_value(basis) AS only_basis
    FROM (SELECT run_id, basis, min(i) AS i, string_agg(label, ', ' ORDER BY i) AS labels
          FROM bases GROUP BY run_id, basis)
    GROUP BY run_id
),
parallel_said AS (
    SELECT p.run_id, p.dp, p.tp, p.pp, p.cp,
           CASE WHEN s.n = 1 AND s.only_basis IS NOT NULL THEN s.only_basis
                WHEN s.n = 1 THEN CASE WHEN p.descriptions IS NULL THEN 'unknown: the trace names no process groups'
                                       ELSE format('unknown: process groups {} do not all say which degree they are',
                                                   p.descriptions) END
                ELSE s.text END AS parallel_basis
    FROM parallel p JOIN said s USING (run_id)
),
embedding AS (
    -- the aten::embedding calls inside a ProfilerStep, with their table and index shapes
    SELECT c.run_id, c.trace_id, s.step,
           TRY_CAST(json_extract(c.input_dims, '$[0]') AS BIGINT[]) AS weight,
           TRY_CAST(json_extract(c.input_dims, '$[1]') AS BIGINT[]) AS indices
    FROM cpu_events c JOIN steps s ON s.trace_id = c.trace_id AND c.ts_ns >= s.ts_ns AND c.ts_ns < s.ts_ns + s.dur_ns
    WHERE c.name = 'aten::embedding' AND c.input_dims IS NOT NULL AND (run IS NULL OR c.run_id = run)
),
token_table AS (
    -- the token embedding: the largest vocabulary (then the larger table, then by its shape)
    SELECT run_id, weight FROM (SELECT DISTINCT run_id, weight FROM embedding
                                WHERE len(weight) = 2 AND len(indices) >= 1)
    QUALIFY row_number() OVER (PARTITION BY run_id ORDER BY weight[1] DESC, weight[2] DESC, weight::VARCHAR) = 1
),
rank_steps AS (
    SELECT e.run_id, e.trace_id, e.step, sum(list_aggregate(e.indices, 'product'))::BIGINT AS tokens,
           count(*) AS calls, mode(e.indices) AS indices
    FROM embedding e JOIN token_table t ON t.run_id = e.run_id AND t.weight = e.weight
    WHERE len(e.indices) >= 1
    GROUP BY e.run_id, e.trace_id, e.step
),
rank_tokens AS (
    SELECT run_id, median(tokens)::BIGINT AS rank_tokens_per_step, median(calls)::BIGINT AS calls,
           mode(indices) AS indices
    FROM (SELECT run_id, step, avg(tokens) AS tokens, median(calls) AS calls, mode(indices) AS indices
          FROM rank_steps GROUP BY run_id, step)
    GROUP BY run_id
),
tokens AS (
    SELECT r.run_id, p.dp, p.tp, p.pp, p.cp, p.parallel_basis, rt.rank_tokens_per_step,
           coalesce(r.tokens_per_step, rt.rank_tokens_per_step * p.dp * p.cp) AS tokens_per_step,
           CASE WHEN r.tokens_per_step IS NOT NULL AND
                     (list_contains(r.mk, 'tokens_per_step') OR json_extract(r.manifest, '$.tokens_per_step') IS NOT NULL)
                THEN CASE WHEN list_contains(r.mk, 'tokens_per_step') THEN '--meta' ELSE 'run.json' END
                WHEN r.tokens_per_step IS NOT NULL
                THEN CASE WHEN list_contains(r.mk, 'global_batch_size') AND list_contains(r.mk, 'seq_len') THEN '--meta'
                          WHEN list_contains(r.mk, 'global_batch_size') OR list_contains(r.mk, 'seq_len')
                          THEN 'run.json and --meta' ELSE 'run.json' END || ': global_batch_size × seq_len'
                WHEN rt.rank_tokens_per_step IS NOT NULL AND p.dp IS NOT NULL AND p.cp IS NOT NULL
                THEN format('inferred: aten::embedding indices {}{} × dp {}{} (vocabulary {})', rt.indices,
                            CASE WHEN rt.calls > 1 THEN format(' × {} calls a step', rt.calls) ELSE '' END,
                            p.dp, CASE WHEN p.cp > 1 THEN format(' × cp {}', p.cp) ELSE '' END, t.weight[1]) END
               AS tokens_per_step_basis,
           r.tokens_per_step IS NULL AND rt.rank_tokens_per_step IS NOT NULL AS tokens_inferred,
           list_aggregate(rt.indices, 'product')::BIGINT AS call_tokens, t.weight AS token_weight
    FROM r JOIN parallel_said p USING (run_id) LEFT JOIN rank_tokens rt USING (run_id)
    LEFT JOIN token_table t USING (run_id)
),
counted AS (
    -- the FLOP-counted ops: FLOPs per input dtype, and per rank and step
    SELECT o.run_id, o.trace_id, o.peak_dtype, s.step, o.flops, o.family, o.pass, o.gpu_ns, o.peak_flops,
           o.matmul_gpu_ns, o.gemm_rows, o.b_dims
    FROM op_flops(run) o LEFT JOIN steps s
        ON s.trace_id = o.trace_id AND o.ts_ns >= s.ts_ns AND o.ts_ns < s.ts_ns + s.dur_ns
    WHERE o.flops > 0
),
dtype_share AS (
    SELECT run_id, arg_max(peak_dtype, flops) AS dtype, 100.0 * max(flops) / any_value(total) AS pct
    FROM (SELECT run_id, peak_dtype, sum(flops) AS flops, sum(sum(flops)) OVER (PARTITION BY run_id) AS total
          FROM counted GROUP BY run_id, peak_dtype)
    GROUP BY run_id
),
kernel_eff AS (
    -- compute_efficiency's figure, from the same rows (queries/compute_efficiency.sql)
    SELECT run_id, sum(flops * (100.0 * flops / (gpu_ns / 1e9) / peak)) / sum(flops) AS kernel_efficiency_pct_of_peak
    FROM (SELECT run_id, family, pass, peak_dtype, sum(flops) AS flops, sum(gpu_ns) AS gpu_ns, max(peak_flops) AS peak
          FROM counted WHERE gpu_ns > 0 AND peak_flops IS NOT NULL GROUP BY run_id, family, pass, peak_dtype)
    GROUP BY run_id
),
step_flops AS (
    SELECT run_id, median(flops) AS rank_flops_per_step
    FROM (SELECT run_id, step, avg(flops) AS flops
          FROM (SELECT run_id, trace_id, step, sum(flops) AS flops FROM counted
                WHERE step IS NOT NULL GROUP BY ALL)
          GROUP BY run_id, step)
    GROUP BY run_id
),
coverage AS (
    -- the GEMM / attention / convolution kernel time whose FLOPs are counted (launched by an op
    -- with FLOPs), of all such kernel time (device_events.family; torch.compile, CUDA-graph and
    -- Triton kernels have no recorded op)
    SELECT d.run_id, 100.0 * coalesce(c.counted_ns, 0) / d.total_ns AS flops_coverage_pct
    FROM (SELECT run_id, sum(dur_ns) AS total_ns FROM device_events
          WHERE family IN ('GEMM', 'attention', 'convolution') AND (run IS NULL OR run_id = run) GROUP BY run_id) d
    LEFT JOIN (SELECT run_id, sum(matmul_gpu_ns) AS counted_ns FROM counted GROUP BY run_id) c USING (run_id)
    WHERE d.total_ns > 0
),
token_evidence AS (
    -- is the token embedding's input what the model's GEMMs process?  An LM head (a GEMM whose
    -- weight operand is the table's [vocabulary, width], or its transpose), or the counted GEMM
    -- FLOPs on rows of exactly one call's indices (B·S)
    SELECT t.run_id,
           coalesce(bool_or(c.family = 'gemm' AND (c.b_dims = t.token_weight
                                                   OR c.b_dims = [t.token_weight[2], t.token_weight[1]])), false)
               AS lm_head,
           100.0 * coalesce(sum(c.flops) FILTER (WHERE c.family = 'gemm' AND c.gemm_rows = t.call_tokens), 0)
               / sum(c.flops) FILTER (WHERE c.family = 'gemm') AS token_rows_pct
    FROM tokens t LEFT JOIN counted c USING (run_id)
    WHERE t.tokens_inferred
    GROUP BY t.run_id
)
SELECT r.run_id, w.world_size, w.world_size_basis, w.device_name, w.device_basis,
       coalesce(r.dtype, ds.dtype) AS dtype,
       CASE WHEN r.dtype IS NOT NULL THEN CASE WHEN list_contains(r.mk, 'dtype') THEN '--meta' ELSE 'run.json' END
            WHEN ds.dtype IS NOT NULL
            THEN format('inferred: dominant GEMM input type ({}, {:.0f} % of counted GEMM/attention/conv FLOPs)',
                        ds.dtype, ds.pct) END AS dtype_basis,
       CASE WHEN r.dtype IS NULL THEN ds.pct END AS dtype_flops_pct,
       t.dp, t.tp, t.pp, t.cp, t.parallel_basis,
       t.tokens_per_step,
       t.tokens_per_step_basis,
       CASE WHEN t.tokens_per_step IS NULL THEN NULL
            WHEN NOT t.tokens_inferred THEN 'stated'
            WHEN te.lm_head OR te.token_rows_pct >= 50 THEN 'high'
            ELSE 'low' END AS tokens_per_step_confidence,
       CASE WHEN NOT t.tokens_inferred OR t.tokens_per_step IS NULL THEN NULL
            WHEN te.lm_head
            THEN format('a GEMM multiplies by the {} × {} table (an LM head over the same vocabulary)',
                        t.token_weight[1], t.token_weight[2])
            WHEN te.token_rows_pct >= 50
            THEN format('{:.0f} % of the counted GEMM FLOPs run on {} rows, one call''s indices',
                        te.token_rows_pct, t.call_tokens)
            ELSE format('no GEMM maps back to the vocabulary (no LM head) and {} of the counted GEMM FLOPs run '
                        'on {} rows, one call''s indices: the embedding may feed an encoder (a diffusion '
                        'model''s text prompt), not carry the tokens the step processes',
                        CASE WHEN te.token_rows_pct IS NULL THEN 'none' ELSE format('{:.0f} %', te.token_rows_pct) END,
                        t.call_tokens) END AS tokens_per_step_confidence_basis,
       t.rank_tokens_per_step,
       coalesce(r.flops_per_token,
                6 * r.num_params + 12.0 * r.num_layers * r.hidden_size * r.seq_len,
                6 * r.num_params,
                sf.rank_flops_per_step * w.world_size / t.tokens_per_step) AS flops_per_token,
       CASE WHEN r.flops_per_token IS NOT NULL
            THEN CASE WHEN list_contains(r.mk, 'model.flops_per_token') THEN '--meta' ELSE 'run.json' END
            WHEN r.num_params IS NOT NULL
            THEN CASE WHEN list_contains(r.mk, 'model.num_params') THEN '--meta' ELSE 'run.json' END
                 || CASE WHEN r.num_layers IS NOT NULL AND r.hidden_size IS NOT NULL AND r.seq_len IS NOT NULL
                         THEN ': 6 × model.num_params + 12 × num_layers × hidden_size × seq_len'
                         ELSE ': 6 × model.num_params' END
            WHEN sf.rank_flops_per_step IS NOT NULL AND w.world_size IS NOT NULL AND t.tokens_per_step IS NOT NULL
            THEN 'inferred: recorded GEMM/attention shapes (their FLOPs a step × world size ÷ tokens per step)'
       END AS flops_per_token_basis,
       sf.rank_flops_per_step AS recorded_rank_flops_per_step, ke.kernel_efficiency_pct_of_peak,
       cv.flops_coverage_pct,
       -- FLOPs per token from the recorded shapes that see under half the matmul time: MFU is a lower bound
       r.flops_per_token IS NULL AND r.num_params IS NULL AND sf.rank_flops_per_step IS NOT NULL
           AND coalesce(cv.flops_coverage_pct < 50, false) AS flops_per_token_lower_bound
FROM r JOIN world w USING (run_id) JOIN tokens t USING (run_id)
LEFT JOIN dtype_share ds USING (run_id) LEFT JOIN step_flops sf USING (run_id)
LEFT JOIN kernel_eff ke USING (run_id)
LEFT JOIN coverage cv USING (run_id) LEFT JOIN token_evidence te USING (run_id)
