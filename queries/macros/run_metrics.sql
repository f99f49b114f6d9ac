-- name: run_metrics
-- description: Per run: step time, throughput, MFU, energy per token and the step-time shares.
-- grain: one row per run
-- param: run VARCHAR a run_id, or NULL for every run
-- depends: steps_breakdown, step_slot_breakdown, step_windows, device_peaks, compute_dtypes, run_facts, collective_waits_cpu
-- The definitions of every column are in queries/run_summary.sql (which
-- returns this relation) and the README ("Run level and across runs").  The run's facts
-- (world size, device, dtype, parallel degrees, tokens and FLOPs per token) and their bases
-- come from run_facts: run.json, then `ingest --meta`, then what the trace shows.
-- compute_pct, exposed_comm_pct, exposed_memory_pct, other_pct, idle_pct =
-- each part summed over the ranks' steady-state device slots ÷ their summed
-- span (steps_breakdown; the whole trace without steps); the five sum to 100.
-- device_step_period_ns = Σ span ÷ Σ slots of the same slots (docs/metrics.md
-- "The step model"); step_time_ns is it (step_time_source 'device_period')
-- where the device runs behind the host and it is longer than the host's step.
-- Units: *_ns nanoseconds, tokens_per_s tokens per second, *_pct percent,
-- flops FLOP (*_flops_per_step FLOP a step), peak FLOP/s, energy J, *_ratio a ratio.
WITH r AS (SELECT * FROM runs WHERE run IS NULL OR run_id = run),
tr AS (
    SELECT run_id, count(DISTINCT rank) AS num_ranks, bool_and(trace_mode = 'cpu') AS cpu_only,
           sum(num_events)::BIGINT AS trace_events
    FROM traces WHERE run IS NULL OR run_id = run GROUP BY run_id
),
slowest AS (
    SELECT run_id, step, max(dur_ns) AS slowest_ns FROM steps
    WHERE run IS NULL OR run_id = run GROUP BY run_id, step
),
worked AS (
    -- the profiled steps that launched device work (step_windows)
    SELECT DISTINCT run_id, step FROM step_windows(run)
),
profiler_time AS (
    -- a ProfilerStep that launched no device work, in a run whose other steps did, is left out of
    -- the median (a 49 µs empty step must not halve a 9.29 ms step: hta-mi250-rocm) and warned about
    SELECT run_id, median(slowest_ns) FILTER (WHERE NOT empty)::BIGINT AS step_time_ns,
           count(*) FILTER (WHERE NOT empty) AS num_steps, count(*) AS all_steps,
           count(*) FILTER (WHERE empty) AS empty_steps
    FROM (SELECT s.*, w.step IS NULL AND s.run_id IN (SELECT run_id FROM worked) AS empty
          FROM slowest s LEFT JOIN worked w USING (run_id, step))
    GROUP BY run_id
),
logged AS (
    -- the collector's step log: steps outside the profiled window, after the first, and not the
    -- step right after the window (a log written before the collector's device clock holds the
    -- trace's export there: docs/collecting.md "Step times")
    SELECT run_id, step, max(dur_ns) AS slowest_ns
    FROM (SELECT *, lag(profiled) OVER (PARTITION BY run_id, rank ORDER BY step) AS after_window
          FROM step_log WHERE run IS NULL OR run_id = run)
    WHERE NOT profiled AND step > 0 AND NOT coalesce(after_window, false)
    GROUP BY run_id, step
),
logged_time AS (
    SELECT run_id, median(slowest_ns)::BIGINT AS step_time_ns, count(*) AS num_steps
    FROM logged GROUP BY run_id
),
step_time AS (
    SELECT run_id,
           coalesce(l.step_time_ns, p.step_time_ns) AS step_time_ns,
           coalesce(l.num_steps, p.num_steps) AS num_steps, p.all_steps AS profiled_steps, p.empty_steps,
           p.step_time_ns AS profiled_step_time_ns,
           CASE WHEN l.step_time_ns IS NOT NULL THEN 'step_log'
                WHEN p.step_time_ns IS NOT NULL THEN 'profiler_step' END AS step_time_source
    FROM profiler_time p FULL JOIN logged_time l USING (run_id)
),
power AS (
    SELECT run_id, sum(mean_watts) AS watts, count(*) AS ranks_with_power
    FROM (SELECT run_id, rank, avg(watts) AS mean_watts FROM power_samples
          WHERE run IS NULL OR run_id = run GROUP BY run_id, rank)
    GROUP BY run_id
),
shares AS (
    -- "exposed comm % of step" (docs/inputs.md): each part summed over the ranks' steady-state
    -- device slots ÷ their summed span (steps_breakdown; the whole trace without steps): one
    -- aggregate, so a share × the device step period (window_ns: Σ span ÷ Σ slots) is that part's
    -- mean ms a step (run_breakdown, the idle chart, explain); the five sum to 100
    SELECT run_id,
           100.0 * sum(compute_ns) / sum(span_ns) AS compute_pct,
           100.0 * sum(exposed_comm_ns) / sum(span_ns) AS exposed_comm_pct,
           100.0 * sum(exposed_memory_ns) / sum(span_ns) AS exposed_memory_pct,
           100.0 * sum(other_ns) / sum(span_ns) AS other_pct,
           -- the part of other that a CPU-only trace's threads sat blocked waiting for a collective
           100.0 * sum(coalesce(cw.wait_ns, 0)) / sum(span_ns) AS collective_wait_pct,
           100.0 * sum(idle_ns) / sum(span_ns) AS idle_pct,
           avg(span_ns) FILTER (WHERE num_steps > 0) AS span_ns,
           sum(span_ns) FILTER (WHERE num_steps > 0) / sum(num_steps) FILTER (WHERE num_steps > 0) AS window_ns,
           round(avg(num_steps) FILTER (WHERE num_steps > 0))::INTEGER AS window_steps
    FROM steps_breakdown(run) LEFT JOIN collective_waits_cpu(run) cw USING (trace_id) GROUP BY run_id
),
slot_steps AS (
    -- each steady-state step's slowest rank's ProfilerStep (docs/metrics.md "The step model")
    SELECT run_id, step, max(cpu_ns) AS cpu_ns
    FROM step_slot_breakdown(run) WHERE steady_state GROUP BY run_id, step
),
period AS (
    -- the CPU time of the steady-state steps: the median of their slowest rank's ProfilerStep (the
    -- device step period is the shares' window a step, shares.window_ns: the mean steady-state slot)
    SELECT run_id, median(cpu_ns)::BIGINT AS cpu_step_ns FROM slot_steps GROUP BY run_id
),
base AS (
    SELECT r.* EXCLUDE (world_size, dp, tp, pp, cp, tokens_per_step, flops_per_token, device_name, dtype),
           tr.num_ranks, tr.cpu_only, tr.trace_events,
           -- ranks sharing one host: the manifest's per-node count, else world ÷ nodes
           coalesce(r.gpus_per_node, ceil(f.world_size / r.num_nodes)::INTEGER) AS ranks_per_host,
           f.world_size AS gpus, f.world_size_basis, f.device_name AS device, f.device_basis,
           f.dtype, f.dtype_basis, f.dp, f.tp, f.pp, f.cp, f.parallel_basis,
           f.tokens_per_step, f.tokens_per_step_basis, f.rank_tokens_per_step,
           -- one step time for throughput (docs/metrics.md "The step model"): where the device runs
           -- behind the host (its steady-state period over 1.1 × the same steps' CPU time) and that
           -- period is longer than the host's step, the device paces the loop: the step is its period
           sh.window_ns > 1.1 * pd.cpu_step_ns AS device_behind,
           device_behind AND sh.window_ns > st.step_time_ns AND NOT coalesce(tr.cpu_only, false) AS paced_by_device,
           CASE WHEN paced_by_device THEN sh.window_ns::BIGINT ELSE st.step_time_ns END AS step_time_ns,
           CASE WHEN paced_by_device THEN 'device_period' ELSE st.step_time_source END AS step_time_source,
           st.step_time_ns AS host_step_time_ns, st.step_time_source AS host_step_source, st.empty_steps,
           st.num_steps, st.profiled_steps, st.profiled_step_time_ns,
           f.recorded_rank_flops_per_step, f.kernel_efficiency_pct_of_peak,
           f.flops_coverage_pct, f.flops_per_token_lower_bound, f.tokens_per_step_confidence,
           f.tokens_per_step_confidence_basis,
           pw.watts, pw.ranks_with_power,
           f.flops_per_token AS fpt, f.flops_per_token_basis,
           sh.compute_pct, sh.exposed_comm_pct, sh.exposed_memory_pct, sh.other_pct, sh.collective_wait_pct, sh.idle_pct, sh.span_ns, sh.window_ns, sh.window_steps,
           sh.window_ns::BIGINT AS period_ns, pd.cpu_step_ns
    FROM r JOIN run_facts(run) f USING (run_id) LEFT JOIN tr USING (run_id) LEFT JOIN step_time st USING (run_id)
    LEFT JOIN shares sh USING (run_id) LEFT JOIN power pw USING (run_id) LEFT JOIN period pd USING (run_id)
),
device_row AS (
    -- the device_peaks row of the longest pattern the device name contains
    SELECT b.run_id, arg_max(p.pattern, length(p.pattern)) AS pattern
    FROM base b JOIN device_peaks p ON contains(lower(b.device), lower(p.pattern))
    GROUP BY b.run_id
),
peaks AS (
    -- the run's dtype (run.json / --meta `dtype`, else the dominant GEMM input type: run_facts),
    -- else bf16 (fp16 on a device without bf16)
    SELECT b.run_id, cd.peak_dtype AS run_dtype, d.source AS table_source,
           coalesce(cd.peak_dtype, CASE WHEN d.bf16 IS NULL AND d.fp16 IS NOT NULL THEN 'fp16'
                                        ELSE 'bf16' END) AS table_dtype,
           CASE table_dtype WHEN 'bf16' THEN d.bf16 WHEN 'fp16' THEN d.fp16
                            WHEN 'tf32' THEN d.tf32 WHEN 'fp32' THEN d.fp32 END AS table_peak
    FROM base b LEFT JOIN compute_dtypes cd ON cd.name = lower(b.dtype)
    LEFT JOIN device_row USING (run_id) LEFT JOIN device_peaks d USING (pattern)
),
m AS (
    SELECT b.*, coalesce(b.peak_flops, peaks.table_peak) AS peak,
           CASE WHEN b.peak_flops IS NOT NULL THEN coalesce(b.peak_flops_source, 'manifest')
                WHEN peaks.table_peak IS NOT NULL THEN 'table' END AS peak_source,
           CASE WHEN b.peak_flops IS NOT NULL AND b.peak_flops_source = 'measured' THEN 'fp32'
                WHEN b.peak_flops IS NOT NULL THEN peaks.run_dtype
                WHEN peaks.table_peak IS NOT NULL THEN peaks.table_dtype END AS peak_dtype,
           CASE WHEN b.peak_flops IS NOT NULL AND b.peak_flops_source = 'measured'
                THEN 'measured by the collector: fp32 matrix products on the device'
                WHEN b.peak_flops IS NOT NULL
                THEN CASE WHEN list_contains(coalesce(b.meta_keys, []), 'device.peak_flops') THEN '--meta'
                          ELSE 'run.json' END || ' device.peak_flops'
                WHEN peaks.table_peak IS NOT NULL
                THEN format('dense {} peak of the device table ({}){}', peaks.table_dtype, peaks.table_source,
                            CASE WHEN peaks.run_dtype IS NULL
                                 THEN format('; the run''s dtype is unknown, {} assumed (set dtype in run.json '
                                             'or --meta dtype=...)', peaks.table_dtype) ELSE '' END) END AS peak_basis,
           peaks.table_source, peaks.table_dtype,
           b.tokens_per_step / (b.step_time_ns / 1e9) AS tps,
           b.fpt * b.tokens_per_step AS model_flops,
           b.recorded_rank_flops_per_step * b.gpus AS recorded_flops,
           -- FLOP counts in words for the warnings, SI without e-notation ('9.05 TFLOP')
           [CASE WHEN x >= 1e15 THEN format('{:.2f} PFLOP', x / 1e15) WHEN x >= 1e12 THEN format('{:.2f} TFLOP', x / 1e12)
                 WHEN x >= 1e9 THEN format('{:.2f} GFLOP', x / 1e9) ELSE format('{:.2f} MFLOP', x / 1e6) END
            FOR x IN [b.fpt * b.tokens_per_step, b.recorded_rank_flops_per_step * b.gpus]] AS flops_words,
           -- durations in words: step time, device span, window a step, profiled step ('1.26 s', '16 ms')
           [CASE WHEN x >= 999.5e9 THEN format('{:,.0f} s', x / 1e9) WHEN x >= 999.5e6 THEN format('{:.3g} s', x / 1e9)
                 WHEN x >= 999.5e3 THEN format('{:.3g} ms', x / 1e6) WHEN x >= 999.5 THEN format('{:.3g} µs', x / 1e3)
                 ELSE format('{:.3g} ns', x) END
            FOR x IN [b.host_step_time_ns, b.span_ns, b.window_ns, b.profiled_step_time_ns, b.period_ns,
                      b.cpu_step_ns - b.period_ns, b.cpu_step_ns]] AS ns_words,
           -- whole-job power: the mean per sampled rank, scaled to every GPU
           b.watts * b.gpus / b.ranks_with_power AS job_watts
    FROM base b LEFT JOIN peaks USING (run_id)
)
SELECT run_id, workload, coalesce(scaling, 'strong') AS scaling, gpus AS world_size, world_size_basis, num_nodes,
       dp, tp, pp, cp, parallel_basis, num_ranks AS ranks_traced, num_steps, step_time_ns, step_time_source,
       coalesce(profiled_steps, 0) AS profiled_steps, trace_events,
       tokens_per_step, tokens_per_step_basis, tokens_per_step_confidence,
       tokens_per_step_confidence_basis,
       tps AS tokens_per_s, tps / gpus AS tokens_per_s_per_gpu,
       fpt AS flops_per_token, flops_per_token_basis, device AS device_name, device_basis,
       coalesce(cpu_only, false) AS cpu_only,
       peak AS peak_flops_per_gpu, peak_source AS peak_flops_source, peak_dtype AS peak_flops_dtype, dtype_basis,
       peak_basis AS peak_flops_basis,
       100.0 * tps * fpt / (gpus * peak) AS mfu_pct,
       model_flops AS model_flops_per_step, recorded_flops AS recorded_flops_per_step,
       model_flops / recorded_flops AS model_to_recorded_flops_ratio, kernel_efficiency_pct_of_peak,
       flops_coverage_pct,
       CASE WHEN tps * fpt / (gpus * peak) IS NOT NULL THEN flops_per_token_lower_bound END AS mfu_is_lower_bound,
       window_ns AS traced_window_per_step_ns, step_time_ns / window_ns AS step_time_to_traced_window_ratio,
       period_ns AS device_step_period_ns,
       job_watts * (step_time_ns / 1e9) / tokens_per_step AS energy_per_token_j,
       compute_pct, exposed_comm_pct, exposed_memory_pct, other_pct, collective_wait_pct, idle_pct,
       concat_ws('; ',
           CASE WHEN step_time_ns IS NULL THEN 'no ProfilerStep annotations: no step time' END,
           CASE WHEN tokens_per_step IS NULL AND rank_tokens_per_step IS NOT NULL
                THEN format('no tokens_per_step (or global_batch_size and seq_len) in run.json or --meta; the '
                            'token embedding shows {} tokens a step per rank, but the parallel degrees are {} '
                            '(set parallel.dp, tp, pp, cp with --meta)', rank_tokens_per_step, parallel_basis)
                WHEN tokens_per_step IS NULL
                THEN 'no tokens_per_step (or global_batch_size and seq_len) in run.json or --meta, and no '
                     'aten::embedding with recorded shapes inside a ProfilerStep to infer it from' END,
           CASE WHEN fpt IS NULL THEN 'no model.flops_per_token or model.num_params in run.json or --meta'
                || CASE WHEN tokens_per_step IS NULL THEN ' (the recorded GEMM shapes give FLOPs per token only '
                                                          'with tokens per step)'
                        ELSE ', and no FLOP-counted ops with recorded shapes inside a ProfilerStep' END END,
           CASE WHEN peak IS NULL AND table_source IS NOT NULL
                THEN format('the device table has no {} peak for {} ({}): set device.peak_flops in run.json or --meta',
                            table_dtype, device, table_source)
                WHEN peak IS NULL THEN 'device peak FLOP/s unknown: set device.peak_flops in run.json or --meta' END,
           CASE WHEN job_watts IS NULL
                THEN 'no power samples: energy needs the collector''s NVML samples (CUDA)' END) AS null_reasons,
       -- NULL when there is nothing to warn about
       nullif(concat_ws('; ',
           CASE WHEN cpu_only AND ranks_per_host > cpu_cores
                THEN format('CPU run with {} ranks per host on {} core{}: ranks compete for cores, so '
                            'its step time partly measures contention, not scaling', ranks_per_host,
                            cpu_cores, CASE WHEN cpu_cores = 1 THEN '' ELSE 's' END) END,
           -- a trace that names a device but holds none of its events: every share is of CPU ops
           CASE WHEN cpu_only AND device_basis = 'inferred: deviceProperties'
                THEN format('no device activity in the traces although their deviceProperties name {}: they '
                            'hold CPU events only, so every share and idle figure is of the traced CPU threads, '
                            'not the device', device) END,
           -- an impossible result is a warning next to the number, with where its inputs came from
           CASE WHEN tps * fpt / (gpus * peak) > 1
                THEN format('MFU {:.0f} % is above 100 %: tokens per step ({}), FLOPs per token ({}) or world size '
                            '({}) is too high, or the peak ({}) too low', 100.0 * tps * fpt / (gpus * peak),
                            tokens_per_step_basis, flops_per_token_basis, world_size_basis, peak_basis) END,
           -- the counted kernels cannot run slower than the whole step: MFU above their own efficiency
           -- means the model's FLOPs per step exceed what the recorded shapes count (or the peaks differ)
           CASE WHEN 100.0 * tps * fpt / (gpus * peak) > kernel_efficiency_pct_of_peak
                THEN format('MFU {:.1f} % is above the {:.1f} % its own GEMM / attention / convolution kernels reach '
                            '(FLOPs-weighted, compute_efficiency): the model''s FLOPs per step ({}, {}) '
                            'are {:.2f} × what the recorded shapes count ({})',
                            100.0 * tps * fpt / (gpus * peak), kernel_efficiency_pct_of_peak, flops_words[1],
                            flops_per_token_basis, model_flops / recorded_flops, flops_words[2]) END,
           -- the counted kernels above their peak: impossible (compute_efficiency's warning names the groups)
           CASE WHEN kernel_efficiency_pct_of_peak > 100
                THEN format('the counted GEMM / attention / convolution kernels reach {:.0f} % of their peak, above '
                            'what the device can do (query compute_efficiency: its warning names the op groups)',
                            kernel_efficiency_pct_of_peak) END,
           -- FLOPs per token from recorded shapes that see under half the matmul kernel time (run_facts)
           CASE WHEN flops_per_token_lower_bound AND tps * fpt / (gpus * peak) IS NOT NULL
                THEN format('MFU {:.1f} % is a lower bound: its FLOPs per token come from the recorded shapes, '
                            'and the ops with recorded shapes launched only {:.0f} % of the GEMM / attention / '
                            'convolution kernel time (the rest ran with no recorded op: torch.compile, CUDA '
                            'graphs, Triton); set model.flops_per_token or model.num_params for the model''s MFU',
                            100.0 * tps * fpt / (gpus * peak), flops_coverage_pct) END,
           CASE WHEN tokens_per_step_confidence = 'low'
                THEN format('tokens per step ({}) inferred with low confidence ({}), so tokens/s{} and energy '
                            'per token rest on a guess; set tokens_per_step in run.json or --meta', tokens_per_step,
                            tokens_per_step_confidence_basis,
                            CASE WHEN flops_per_token_basis LIKE 'inferred:%' THEN '' ELSE ', MFU' END) END,
           -- the step time and the traced steps must describe the same steps (docs/metrics.md "The step
           -- model"), in both directions: the device cannot do more than a step's work a step in steady
           -- state (a device period longer than the same steps' CPU windows: it runs behind the host, and
           -- the step time understates the step), and shares of a device window much shorter than the
           -- step describe only that window; the step log times the same loop
           CASE WHEN device_behind
                THEN format('the device runs behind the host: its steady-state step period (the mean device slot of '
                            '{} steady-state step{}) is {}, {:.2f} × the same steps'' CPU time ({}) and {:.2f} × '
                            'the host''s step {} ({}), so {}the report''s ms per step are of the device period',
                            window_steps, CASE WHEN window_steps = 1 THEN '' ELSE 's' END, ns_words[5],
                            period_ns / cpu_step_ns, ns_words[7], period_ns / host_step_time_ns, ns_words[1],
                            host_step_source,
                            CASE WHEN step_time_source = 'device_period'
                                 THEN 'the step time, tokens/s, MFU and energy per token are of that period, and '
                                 ELSE '' END)
                WHEN window_ns > 1.5 * host_step_time_ns
                THEN format('step time {} ({}) disagrees with the traced window: {} steady-state step{} over a '
                            'device span of {} is {} a step, {:.2f} × the step time',
                            ns_words[1], host_step_source, window_steps,
                            CASE WHEN window_steps = 1 THEN '' ELSE 's' END, ns_words[2], ns_words[3],
                            window_ns / host_step_time_ns)
                WHEN period_ns < cpu_step_ns / 1.5
                THEN format('the device''s step period (the profiled steps'' device window, {} a step) covers '
                            '{} of the profiled steps'' CPU time {}: the step''s shares (compute {:.0f} %, '
                            'idle {:.0f} %) are of that window; the other {} of the step ran no traced device '
                            'work (the step-time chart draws the device period)', ns_words[5],
                            CASE WHEN period_ns < cpu_step_ns / 100 THEN 'under 1 %'
                                 ELSE format('{:.0f} %', 100.0 * period_ns / cpu_step_ns) END,
                            ns_words[7], compute_pct, idle_pct, ns_words[6]) END,
           CASE WHEN empty_steps > 0
                THEN format('{} of the {} profiled steps launched no device work: left out of the step time and '
                            'the step model', empty_steps, profiled_steps) END,
           CASE WHEN host_step_source = 'step_log' AND profiled_step_time_ns / host_step_time_ns NOT BETWEEN 0.5 AND 2
                THEN format('step time {} (the collector''s step log, steps outside the profiled window) '
                            'is {:.2f} × the profiled steps'' {} (ProfilerStep median of the slowest rank): '
                            'the traced steps are not the steps timed', ns_words[1],
                            host_step_time_ns / profiled_step_time_ns, ns_words[4]) END), '')
           AS warnings
FROM m
