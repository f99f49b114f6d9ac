-- name: kernel_summary
-- description: Per run and kernel name: its family (from the launching op, else the base name), launches, GPU time and share of all kernel time.
-- grain: one row per run × kernel name as written in the trace (on CPU-only traces: per CPU op name)
-- param: run_id VARCHAR optional; only this run (NULL: every run)
-- Columns:
--   name = the device event's name as written (full, templated); short_name = its
--   base name (return type, namespaces, template arguments and parameter lists
--   removed: `void at::native::vectorized_elementwise_kernel<4, …>(…)` ->
--   `vectorized_elementwise_kernel`); memcpy / memset / sync events keep their name.
--   kind = compute, comm, memory, sync or other (the classification rules).
--   family = for compute events GEMM, attention, convolution, norm, softmax,
--   loss, embedding, reduction, elementwise, optimizer or other, from the op
--   that launched the kernel (family_basis 'op') or, with no launching op or an
--   op no rule knows, from the base name (family_basis 'name'); the rules are
--   pipeline/read/families.py.  Other kinds: 'communication', 'memory', 'sync',
--   'other' (family_basis NULL).  Where one name has several families or bases
--   (launched by different ops, or some launches not in the trace) the one
--   with the most time is shown.
--   launching_op = the innermost CPU op around the runtime call that launched the
--   kernel (the most frequent one; NULL when no launch is in the trace: CUDA
--   graph replays, launches before the profiler started; NULL on CPU traces).
--   launches = events of that name; total_ns = Σ durations over every rank and the
--   whole trace; mean_ns = total_ns ÷ launches; time_pct_of_kernel_time = total_ns ÷
--   Σ total_ns of the run's device events × 100 (concurrent kernels each count,
--   so this is a share of summed kernel time, not of the step).
--   launches_per_step_per_gpu, time_per_step_per_gpu_ns: only events launched
--   inside a ProfilerStep, ÷ (ranks traced × profiled steps); NULL when the run
--   has no ProfilerStep.
-- On CPU-only traces the rows are the CPU ops of the lanes; a nested op's time
-- is also inside its parent's.
-- Units: *_ns nanoseconds, *_pct percent (0–100), launches events.
WITH ev AS (
    SELECT run_id, rank, name, kind, dur_ns, step, launch_op, family, family_basis,
           coalesce(short_name, name) AS short_name
    FROM device_events WHERE $run_id IS NULL OR run_id = $run_id
),
win AS (
    SELECT t.run_id, count(DISTINCT t.rank) AS num_ranks,
           (SELECT count(DISTINCT step) FROM steps s WHERE s.run_id = t.run_id) AS num_steps
    FROM traces t WHERE $run_id IS NULL OR t.run_id = $run_id GROUP BY t.run_id
),
labelled AS (
    SELECT *, CASE WHEN kind = 'compute' THEN coalesce(family, 'other')
                   WHEN kind = 'comm' THEN 'communication' ELSE kind END AS fam
    FROM ev
),
by_family AS (
    SELECT run_id, name, fam, family_basis AS basis, sum(dur_ns) AS t FROM labelled GROUP BY ALL
),
by_op AS (
    SELECT run_id, name, launch_op, count(*) AS n FROM labelled WHERE launch_op IS NOT NULL GROUP BY ALL
),
per_name AS (
    SELECT run_id, name, min(short_name) AS short_name, min(kind) AS kind, count(*) AS launches,
           sum(dur_ns) AS total_ns,
           count(*) FILTER (WHERE step IS NOT NULL) AS in_step_launches,
           sum(dur_ns) FILTER (WHERE step IS NOT NULL) AS in_step_ns
    FROM labelled GROUP BY ALL
)
SELECT p.run_id, p.name, p.short_name, p.kind,
       -- ties broken by the value itself, so that the answer never depends on the scan order
       (SELECT arg_max(f.fam, (f.t, f.fam)) FROM by_family f WHERE f.run_id = p.run_id AND f.name = p.name) AS family,
       (SELECT arg_max(f.basis, (f.t, coalesce(f.basis, ''))) FROM by_family f
        WHERE f.run_id = p.run_id AND f.name = p.name) AS family_basis,
       (SELECT arg_max(o.launch_op, (o.n, o.launch_op)) FROM by_op o
        WHERE o.run_id = p.run_id AND o.name = p.name) AS launching_op,
       p.launches, p.total_ns, p.total_ns / p.launches AS mean_ns,
       100.0 * p.total_ns / nullif(sum(p.total_ns) OVER (PARTITION BY p.run_id), 0) AS time_pct_of_kernel_time,
       CASE WHEN w.num_steps > 0 THEN p.in_step_launches / (w.num_ranks * w.num_steps) END
           AS launches_per_step_per_gpu,
       CASE WHEN w.num_steps > 0 THEN coalesce(p.in_step_ns, 0) / (w.num_ranks * w.num_steps) END
           AS time_per_step_per_gpu_ns
FROM per_name p JOIN win w USING (run_id)
ORDER BY p.run_id, p.total_ns DESC, p.name
