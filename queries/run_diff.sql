-- name: run_diff
-- description: What changed between two runs: per kernel family, launches and GPU time per step per GPU in each run, and the change, largest first.
-- grain: one row per kernel family present in either run
-- param: run_a VARCHAR optional; the first run (e.g. the smaller one); NULL: no rows
-- param: run_b VARCHAR optional; the second run; NULL: no rows
-- Family: compute kernels (and, on CPU traces, CPU ops) by their stored family
-- (kernel_summary: from the launching op, else the base name; GEMM,
-- attention, …, elementwise, optimizer, other), so templated names group; communication by collective ×
-- process group ('all_reduce · default_pg', process group = description, else
-- name); memory by 'memcpy HtoD' / 'memcpy DtoD' / ... / 'memset'; sync and the
-- rest by kind.
-- Normalised per step and per GPU, so runs of different sizes compare: only
-- events launched inside a ProfilerStep count (every event when the run has
-- none, the whole trace being one window); count_per_step_X = events ÷ (ranks
-- traced × profiled steps); time_per_step_X_ns = Σ durations ÷ (ranks traced ×
-- profiled steps): one GPU's kernel time of that family in one step (concurrent
-- kernels each count; waiting inside collectives included).  On CPU traces the
-- ops nest (aten::linear holds aten::addmm): each op counts its self time (its
-- duration less that of the ops directly inside it on its thread), so no time
-- is counted twice (floored at 0 where a trace's nesting is imperfect, e.g.
-- a child rounded past its parent's end); count_per_step counts every op.
-- delta_* = b − a.  top_kernel = the family's kernel with the most time in run b
-- (run a when absent in b), by its short name (kernel_summary.short_name: return
-- type, namespaces, template arguments and parameter lists removed).
-- An unknown run_a or run_b is an error naming it.
-- Units: *_ns nanoseconds; count_per_step_* events per step per GPU.
WITH sides AS (
    SELECT 'a' AS side, $run_a AS run_id UNION ALL SELECT 'b', $run_b
),
chk AS (
    SELECT s.side, s.run_id,
           CASE WHEN s.run_id IS NOT NULL AND s.run_id NOT IN (SELECT run_id FROM runs)
                THEN error(format('no run ''{}'' in the database (run_{})', s.run_id, s.side)) END AS bad
    FROM sides s
),
win AS (
    SELECT c.side, c.run_id,
           (SELECT count(DISTINCT rank) FROM traces t WHERE t.run_id = c.run_id) AS num_ranks,
           (SELECT count(DISTINCT step) FROM steps st WHERE st.run_id = c.run_id) AS num_steps
    FROM chk c WHERE c.run_id IS NOT NULL AND c.bad IS NULL
),
ev AS (
    SELECT w.side, d.trace_id, d.event_id, d.lane, d.name, d.kind, d.ts_ns, d.dur_ns,
           d.family, coalesce(d.short_name, d.name) AS short_name, t.trace_mode = 'cpu' AS cpu
    FROM win w JOIN device_events d ON d.run_id = w.run_id JOIN traces t ON t.trace_id = d.trace_id
    WHERE w.num_steps = 0 OR d.step IS NOT NULL
),
pts AS (
    -- CPU ops nest on their thread: depth from a running count of opened minus closed ops
    -- (an op ending where the next starts is closed first, so neighbours do not nest)
    SELECT trace_id, lane, event_id, ts_ns AS at_ns, 1 AS delta, 1 AS o, -dur_ns AS tie FROM ev WHERE cpu
    UNION ALL
    SELECT trace_id, lane, event_id, ts_ns + dur_ns, -1, 0, 0 FROM ev WHERE cpu
),
depths AS (
    SELECT trace_id, lane, event_id, at_ns,
           sum(delta) OVER (PARTITION BY trace_id, lane ORDER BY at_ns, o, tie, event_id
                            ROWS UNBOUNDED PRECEDING) - 1 AS depth, delta
    FROM pts
),
nested AS (
    SELECT e.*, d.depth FROM ev e JOIN depths d USING (trace_id, lane, event_id) WHERE e.cpu AND d.delta = 1
),
parents AS (
    -- an op's parent: the latest op one level up on its thread that started at or before it
    SELECT c.trace_id, p.event_id AS parent_id, sum(c.dur_ns) AS children_ns
    FROM nested c ASOF JOIN nested p
      ON p.trace_id = c.trace_id AND p.lane = c.lane AND p.depth = c.depth - 1 AND p.ts_ns <= c.ts_ns
    GROUP BY c.trace_id, p.event_id
),
leaf AS (
    -- self time: an op's duration less its direct children's (GPU kernels do not nest: their duration)
    SELECT e.side, e.trace_id, e.event_id, e.name, e.kind, e.family, e.short_name,
           greatest(e.dur_ns - coalesce(pa.children_ns, 0), 0) AS dur_ns
    FROM ev e LEFT JOIN parents pa ON e.cpu AND pa.trace_id = e.trace_id AND pa.parent_id = e.event_id
),
fam AS (
    SELECT l.side, l.kind, l.dur_ns,
           CASE WHEN l.kind = 'comm'
                THEN coalesce(c.collective, '?') || ' · ' || coalesce(c.pg_desc, c.pg_name, 'unnamed group')
                WHEN l.kind = 'memory' AND lower(l.name) LIKE '%memset%' THEN 'memset'
                WHEN l.kind = 'memory'
                THEN 'memcpy' || coalesce(' ' || nullif(regexp_extract(l.name, '(HtoD|DtoH|DtoD|PtoP|HtoH)'), ''), '')
                WHEN l.kind = 'compute' THEN coalesce(l.family, 'other')
                ELSE l.kind END AS family,
           l.short_name AS kernel
    FROM leaf l
    LEFT JOIN collectives c ON l.kind = 'comm' AND c.trace_id = l.trace_id AND c.event_id = l.event_id
),
per_kernel AS (
    SELECT side, family, kind, kernel, count(*) AS n, sum(dur_ns) AS t FROM fam GROUP BY ALL
),
per_family AS (
    SELECT p.family, any_value(p.kind) AS kind,
           sum(p.n) FILTER (WHERE p.side = 'a') AS n_a, sum(p.n) FILTER (WHERE p.side = 'b') AS n_b,
           sum(p.t) FILTER (WHERE p.side = 'a') AS t_a, sum(p.t) FILTER (WHERE p.side = 'b') AS t_b,
           arg_max(p.kernel, (p.side = 'b', p.t)) AS top_kernel
    FROM per_kernel p GROUP BY p.family
),
norm AS (
    SELECT max(num_ranks * greatest(num_steps, 1)) FILTER (WHERE side = 'a') AS per_a,
           max(num_ranks * greatest(num_steps, 1)) FILTER (WHERE side = 'b') AS per_b
    FROM win
)
SELECT (SELECT run_id FROM sides WHERE side = 'a') AS run_a, (SELECT run_id FROM sides WHERE side = 'b') AS run_b,
       f.family, f.kind,
       coalesce(f.n_a, 0) / n.per_a AS count_per_step_a, coalesce(f.n_b, 0) / n.per_b AS count_per_step_b,
       count_per_step_b - count_per_step_a AS delta_count_per_step,
       coalesce(f.t_a, 0) / n.per_a AS time_per_step_a_ns, coalesce(f.t_b, 0) / n.per_b AS time_per_step_b_ns,
       time_per_step_b_ns - time_per_step_a_ns AS delta_time_per_step_ns,
       f.top_kernel
FROM per_family f, norm n
WHERE n.per_a IS NOT NULL AND n.per_b IS NOT NULL
ORDER BY abs(delta_time_per_step_ns) DESC, f.family
