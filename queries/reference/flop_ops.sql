-- name: flop_ops
-- description: The CPU ops whose FLOPs op_efficiency counts: family, pass, FLOP rule and where the rule reads its inputs.
-- grain: one row per op name
-- rule: how op_flops computes FLOPs from the recorded `Input Dims` (A = dims of arg a_arg,
--   B = dims of arg a_arg + 1; args numbered from 0 as recorded):
--   mm      A [M, K], B [K, N] (addmm: after the bias)      2·M·K·N
--   bmm     A [b, M, K], B [b, K, N] (baddbmm: after the bias)  2·b·M·K·N
--   matmul  A [..., M, K], B [..., K, N] (1-D operands: M or N = 1)  2·max(|A|·N, |B|·M), |X| = product of dims
--   linear  input A [..., K], weight B [N, K]                2·|A|·N
--   attention  q A [B, H, S_q, D], k B [B, H_kv, S_kv, D]    4·B·H·S_q·S_kv·D, × ½ when the
--           `is_causal` argument (Concrete Inputs, arg causal_arg) is True; backward ops
--           × 2.5 (FlashAttention-2's count: 5 matmuls against the forward's 2)
--   conv    input A [N, C_in, *in], weight B [C_out, C_in/g, *k]: 2·N·|out|·|B| with out
--           from stride, padding, dilation (args 3–5); transposed convolutions are not
--           counted (NULL); convolution_backward reads grad_output [N, C_out, *out] as A and
--           the weight (arg 2), and counts the forward's FLOPs once per gradient its
--           output_mask (arg 10) asks for, of grad input and grad weight.
-- Which op's FLOPs count: only the innermost listed op on its thread (aten::linear over
-- aten::addmm counts the addmm, whose dtype is the one autocast gave it).  The SDPA backend
-- ops ([B, H, S, D] layout) are listed, not the kernels' wrappers under them
-- (_flash_attention_forward is [B, S, H, D]).
-- Units: none (names, argument positions, factors).
SELECT * FROM (VALUES
    -- name                                                   family       pass        rule      a_arg causal_arg
    ('aten::mm',                                              'gemm',      'any',      'mm',      0,   NULL),
    ('aten::addmm',                                           'gemm',      'any',      'mm',      1,   NULL),
    ('aten::bmm',                                             'gemm',      'any',      'bmm',     0,   NULL),
    ('aten::baddbmm',                                         'gemm',      'any',      'bmm',     1,   NULL),
    ('aten::matmul',                                          'gemm',      'any',      'matmul',  0,   NULL),
    ('aten::linear',                                          'gemm',      'forward',  'linear',  0,   NULL),
    ('aten::scaled_dot_product_attention',                    'attention', 'forward',  'attention', 0, 5),
    ('aten::_scaled_dot_product_flash_attention',             'attention', 'forward',  'attention', 0, 4),
    ('aten::_scaled_dot_product_flash_attention_for_cpu',     'attention', 'forward',  'attention', 0, 4),
    ('aten::_scaled_dot_product_efficient_attention',         'attention', 'forward',  'attention', 0, 6),
    ('aten::_scaled_dot_product_cudnn_attention',             'attention', 'forward',  'attention', 0, 6),
    ('aten::_scaled_dot_product_flash_attention_backward',    'attention', 'backward', 'attention', 1, 11),
    ('aten::_scaled_dot_product_flash_attention_for_cpu_backward', 'attention', 'backward', 'attention', 1, 7),
    ('aten::_scaled_dot_product_efficient_attention_backward', 'attention', 'backward', 'attention', 1, 11),
    ('aten::_scaled_dot_product_cudnn_attention_backward',    'attention', 'backward', 'attention', 1, 14),
    ('aten::convolution',                                     'conv',      'forward',  'conv',    0,   NULL),
    ('aten::convolution_backward',                            'conv',      'backward', 'conv',    0,   NULL)
) AS t(name, family, pass, rule, a_arg, causal_arg)
