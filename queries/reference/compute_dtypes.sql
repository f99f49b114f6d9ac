-- name: compute_dtypes
-- description: The names run.json `dtype` may use, and the device_peaks column each picks.
-- grain: one row per dtype name
-- Units: none (names).
SELECT * FROM (VALUES
    ('bf16', 'bf16'), ('bfloat16', 'bf16'), ('fp16', 'fp16'), ('float16', 'fp16'), ('half', 'fp16'),
    ('tf32', 'tf32'), ('fp32', 'fp32'), ('float32', 'fp32'), ('float', 'fp32')
) AS t(name, peak_dtype)
