-- Reference tables, rewritten by every ingest (one place for each decision).

-- dtype_sizes: bytes per element of the dtype names PyTorch writes in
-- record_param_comms / NCCL kernel args (`dtype`), matched case-insensitively
-- after stripping a `c10::` prefix.
CREATE OR REPLACE TABLE dtype_sizes AS
SELECT * FROM (VALUES
    ('float', 4), ('float32', 4), ('double', 8), ('float64', 8),
    ('half', 2), ('float16', 2), ('bfloat16', 2),
    ('float8_e4m3fn', 1), ('float8_e5m2', 1), ('float8_e4m3fnuz', 1), ('float8_e5m2fnuz', 1),
    ('long', 8), ('int64', 8), ('int', 4), ('int32', 4), ('short', 2), ('int16', 2),
    ('char', 1), ('signed char', 1), ('byte', 1), ('unsigned char', 1), ('int8', 1), ('uint8', 1),
    ('bool', 1), ('complexfloat', 8), ('complexdouble', 16)
) AS t(dtype, bytes);

-- device_peaks: dense BF16 tensor-core peak FLOP/s per device (vendor data
-- sheets; V100 has no BF16, its FP16 tensor peak is used).  A run's device
-- name matches the longest `pattern` it contains (case-insensitive);
-- run.json `device.peak_flops` overrides.
CREATE OR REPLACE TABLE device_peaks AS
SELECT * FROM (VALUES
    ('A100', 312e12), ('A800', 312e12), ('A10', 125e12), ('A30', 165e12), ('L4', 121e12),
    ('L40S', 362e12), ('L40', 181e12),
    ('H100', 989e12), ('H100 PCIe', 756e12), ('H800', 989e12), ('H200', 989e12), ('GH200', 989e12),
    ('B100', 1750e12), ('B200', 2250e12), ('GB200', 2500e12),
    ('V100', 125e12), ('MI250X', 383e12), ('MI250', 362e12), ('MI300X', 1307e12),
    ('MI300A', 981e12), ('MI325X', 1307e12)
) AS t(pattern, peak_flops);
