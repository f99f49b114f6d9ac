-- name: dtype_sizes
-- description: Bytes per element of the dtype names PyTorch writes in record_param_comms / NCCL kernel args.
-- grain: one row per dtype name
-- The names of the `dtype` arg, lower case, matched case-insensitively after
-- stripping a `c10::` prefix (comm_events).
-- Units: bytes per element.
SELECT * FROM (VALUES
    ('float', 4), ('float32', 4), ('double', 8), ('float64', 8),
    ('half', 2), ('float16', 2), ('bfloat16', 2),
    ('float8_e4m3fn', 1), ('float8_e5m2', 1), ('float8_e4m3fnuz', 1), ('float8_e5m2fnuz', 1),
    ('long', 8), ('int64', 8), ('int', 4), ('int32', 4), ('short', 2), ('int16', 2),
    ('char', 1), ('signed char', 1), ('byte', 1), ('unsigned char', 1), ('int8', 1), ('uint8', 1),
    ('bool', 1), ('complexfloat', 8), ('complexdouble', 16)
) AS t(dtype, bytes)
