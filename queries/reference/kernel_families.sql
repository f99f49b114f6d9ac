-- name: kernel_families
-- description: The kernel families run_diff groups compute kernels (and CPU ops) into: a regular expression on the lower-cased name per family, first match wins.
-- grain: one row per family pattern
-- priority: lower wins when several patterns match one name; a compute name no
-- pattern matches is 'other compute'.  Communication, memory and sync events are
-- not matched here: run_diff names their family by collective × process group,
-- memcpy direction / memset, and kind.  The patterns cover CUDA/ROCm kernel names
-- (cuBLAS/CUTLASS/xmma GEMMs, flash / fmha / cuDNN attention, PyTorch's
-- vectorized_elementwise / reduce / layer_norm kernels, Triton's triton_poi /
-- triton_per / triton_red, multi_tensor_apply optimizers) and aten:: CPU ops;
-- tests/test_run_diff.py holds a parametrised table of awkward names.
-- Units: none (names and patterns).
SELECT * FROM (VALUES
    (1, 'attention', 'flash|fmha|attention|attn|sdpa|mha_(fwd|bwd)|scaled_dot_product'),
    (2, 'convolution', 'conv|implicit_?gemm|wgrad|dgrad|fprop'),
    (3, 'GEMM', 'gemm|xmma|cutlass|s16816|h16816|s1688|wgmma|cublas|splitk|^aten::(mm|addmm|bmm|baddbmm|matmul|linear|_addmm_activation)$'),
    (4, 'norm', 'layer_?norm|rms_?norm|batch_?norm|group_?norm|instance_?norm|norm_kernel'),
    (5, 'optimizer', 'adam|sgd|lamb|adagrad|multi_tensor_apply|_foreach_|optimizer|^aten::(lerp_|addcdiv_|addcmul_)$'),
    (6, 'softmax', 'softmax'),
    (7, 'loss', 'cross_entropy|nll_loss'),
    (8, 'embedding', 'embedding'),
    (9, 'reduction', 'reduce_kernel|reduction|triton_(per|red)_|^aten::(sum|mean|amax|max|min|norm|linalg_vector_norm)$'),
    (10, 'elementwise', 'elementwise|vectorized|unrolled|triton_poi_|pointwise|fill|copy|gelu|silu|relu|^aten::(add|mul|div|sub|sqrt|exp|neg|pow|where|clamp|rsqrt|tanh|sigmoid)_?$')
) AS t(priority, family, pattern)
