-- name: tensor_core_kernels
-- description: Kernel-name patterns that show an fp32 op ran on TF32 tensor cores, so op_flops rates it against the TF32 peak.
-- grain: one row per pattern
-- pattern: a regular expression matched case-insensitively anywhere in a kernel's full name
-- (template arguments included: CUTLASS 2 kernels name their configuration there).  It is
-- applied only to the kernels of an op whose recorded input type is fp32 (float): PyTorch
-- runs such a matmul or convolution on tensor cores only as TF32 (allow_tf32, or
-- set_float32_matmul_precision('high')), and the trace records the op as float either way,
-- so the kernel's name is the only evidence.  A pattern names the TF32 type or a
-- tensor-core instruction shape on fp32 data; plain FP32 kernels (`ampere_sgemm_*`,
-- `cutlass_*_simt_sgemm_*`, `volta_sgemm_*`) match none.
-- Units: none (patterns).
SELECT * FROM (VALUES
    -- pattern              what it matches (example kernel names)
    ('tf32',               'the TF32 type in the name: cuBLAS sm80_xmma_gemm_f32f32_tf32f32_f32_*, ampere_tf32_s1688gemm_tf32_*, CUTLASS 3 *_tf32gemm_*, cuDNN *_tf32_*'),
    ('tensorop_s[0-9]',    'CUTLASS 2 tensor-op GEMM on fp32 elements: cutlass_80_tensorop_s1688gemm_*, cutlass_tensorop_s16816*'),
    ('s1688gemm',          'the m16n8k8 tensor-core shape on fp32 elements (TF32 on Ampere and later): *_s1688gemm_*')
) AS t(pattern, matches)
