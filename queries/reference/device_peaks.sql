-- name: device_peaks
-- description: Peak FLOP/s per device and compute dtype, from the vendor data sheets (each row names its source).
-- grain: one row per device name pattern
-- Dense figures (the data sheets' "with sparsity" figures halved): bf16 / fp16
-- = dense tensor-core BF16 / FP16; tf32 = dense TF32 tensor core (AMD's TF32
-- / XF32 figure on CDNA3); fp32 = plain FP32 (non-tensor on NVIDIA; the FP32
-- matrix rate on AMD, which rocBLAS uses for fp32 GEMMs).  NULL: the device
-- has no such path or the data sheet gives none.  A run's device name matches
-- the longest `pattern` it contains (case-insensitive): "NVIDIA H100 NVL" is
-- the NVL row, not "H100".  Which dtype a run uses: run.json `dtype` (bf16
-- when unknown; fp16 on devices without bf16); run.json `device.peak_flops`
-- overrides the table (run_metrics).
-- Units: bf16, fp16, tf32, fp32 FLOP/s per GPU (the rows below are TFLOP/s × 1e12).
SELECT pattern, bf16 * 1e12 AS bf16, fp16 * 1e12 AS fp16, tf32 * 1e12 AS tf32, fp32 * 1e12 AS fp32, source
FROM (VALUES
    -- pattern      bf16     fp16     tf32    fp32   source (TFLOP/s, dense)
    ('A100',        312,     312,     156,    19.5,  'NVIDIA A100 Tensor Core GPU data sheet (SXM4 and PCIe)'),
    ('A800',        312,     312,     156,    19.5,  'NVIDIA A800 data sheet (A100 figures)'),
    ('A10',         125,     125,     62.5,   31.2,  'NVIDIA A10 data sheet'),
    ('A10G',        NULL,    NULL,    NULL,   NULL,  'no public NVIDIA data sheet for the A10G: set device.peak_flops'),
    ('A30',         165,     165,     82,     10.3,  'NVIDIA A30 data sheet'),
    ('L4',          121,     121,     60,     30.3,  'NVIDIA L4 data sheet'),
    ('L40',         181,     181,     90.5,   90.5,  'NVIDIA L40 data sheet'),
    ('L40S',        362,     362,     183,    91.6,  'NVIDIA L40S data sheet'),
    ('V100',        NULL,    125,     NULL,   15.7,  'NVIDIA V100 data sheet (SXM2; no BF16 or TF32)'),
    ('H100',        989,     989,     494,    67,    'NVIDIA H100 data sheet (SXM5)'),
    ('H100 PCIe',   756,     756,     378,    51,    'NVIDIA H100 data sheet (PCIe)'),
    ('H100 NVL',    835.5,   835.5,   417.5,  60,    'NVIDIA H100 NVL data sheet (per GPU)'),
    ('H800',        989,     989,     494,    67,    'NVIDIA H800 SXM5 data sheet (H100 SXM5 compute figures)'),
    ('H200',        989,     989,     494,    67,    'NVIDIA H200 data sheet (SXM)'),
    ('H200 NVL',    835.5,   835.5,   417.5,  60,    'NVIDIA H200 data sheet (NVL)'),
    ('GH200',       989,     989,     494,    67,    'NVIDIA GH200 Grace Hopper data sheet (GPU)'),
    ('B100',        1750,    1750,    NULL,   NULL,  'NVIDIA Blackwell B100 (HGX B100 figures per GPU)'),
    ('B200',        2250,    2250,    1125,   75,    'NVIDIA HGX B200 data sheet (8 GPUs; per GPU)'),
    ('GB200',       2500,    2500,    1250,   80,    'NVIDIA GB200 NVL72 data sheet (72 GPUs; per GPU)'),
    ('MI250',       362.1,   362.1,   NULL,   90.5,  'AMD Instinct MI250 data sheet (no TF32)'),
    ('MI250X',      383,     383,     NULL,   95.7,  'AMD Instinct MI250X data sheet (no TF32)'),
    ('MI300A',      980.6,   980.6,   490.3,  122.6, 'AMD Instinct MI300A data sheet'),
    ('MI300X',      1307.4,  1307.4,  653.7,  163.4, 'AMD Instinct MI300X data sheet'),
    ('MI325X',      1307.4,  1307.4,  653.7,  163.4, 'AMD Instinct MI325X data sheet')
) AS t(pattern, bf16, fp16, tf32, fp32, source)
