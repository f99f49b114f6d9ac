"""Kernel families: the one table that says what a compute kernel (or, on CPU traces, a CPU op) is.

A kernel's family (GEMM, attention, convolution, norm, softmax, loss, embedding, reduction,
elementwise, optimizer, other) comes first from the op that launched it (``family_basis = 'op'``),
as TraceLens classifies kernels by their parent op: the innermost ``cpu_op`` around the runtime
call that launched the kernel (``record_function`` annotations excluded), found by
``pipeline/read/nesting.py``.  An enclosing op of an *absorbing* family (attention, convolution, norm,
softmax, loss, embedding, optimizer) gives its family to what runs inside it: the
``aten::index_select`` inside ``aten::embedding`` is embedding time, the ``aten::_log_softmax``
inside ``aten::cross_entropy_loss`` is loss time; GEMM does not absorb (the copies inside
``aten::matmul`` stay elementwise, as in TraceLens).  Kernels launched inside an
``Optimizer.step#…`` annotation are optimizer time.  Every other ATen op is elementwise.

Ops are read by what they say they are: CamelCase names (a custom ``torch.autograd.Function``'s
forward, ``FlashAttnVarlenFunc``) with their words split (``flash_attn_varlen_func``), template
arguments removed; an autograd backward node (``NativeLayerNormBackward0``,
``FusedLayerNormAffineFunctionBackward``, ``torch::autograd::CppNode<SplitLookupFunction_Op>``, and the
engine's ``autograd::engine::evaluate_function: …`` wrapper around one) by its forward op: a built-in
node (a version number after ``Backward``) is PyTorch's CamelCase of its ATen op (``MmBackward0`` ->
``aten::mm``), a custom Function's is its class name.  The engine's wrapper also holds the gradient
accumulation after the node, so its family is its own kernels' only, never handed down.

A kernel with no launching op (CUDA-graph replays, Triton / inductor launches, raw launches), or
launched by an op no rule knows (a custom op such as ``_C::silu_and_mul``), is classified by its
*base name* (``family_basis = 'name'``): :func:`base_name` removes the return type, namespaces,
template arguments and parameter lists, so no pattern ever sees a template argument
(``{lambda()#1}`` is not LAMB, ``_typeConvert`` is not a convolution).

Each table is ordered, first match wins; patterns are regular expressions searched in the
lower-cased op name / base name.  ``tests/test_families.py`` holds real kernel names from
public traces with their launching ops.
"""

from __future__ import annotations

import re
from functools import lru_cache

FAMILIES = ("GEMM", "attention", "convolution", "norm", "softmax", "loss", "embedding", "reduction",
            "elementwise", "optimizer", "other")
# families that an enclosing op hands down to every kernel launched inside it
ABSORBING = frozenset({"attention", "convolution", "norm", "softmax", "loss", "embedding", "optimizer"})
ELEMENTWISE, OTHER = "elementwise", "other"

# -- by launching op (the innermost cpu_op's name, lower-cased) -------------------------------------
_ATEN_GEMMS = ("mm|bmm|addmm|baddbmm|addbmm|addmv|mv|dot|vdot|matmul|linear|einsum|_addmm_activation|"
               "_scaled_mm|_scaled_mm_v2|_int_mm|_grouped_mm|_scaled_grouped_mm|_weight_int4pack_mm|"
               "_weight_int8pack_mm|mkldnn_linear|_mixed_dtypes_linear|tensordot")
_ATEN_REDUCTIONS = ("sum|mean|amax|amin|max|min|aminmax|norm|linalg_vector_norm|frobenius_norm|prod|std|var|"
                    "var_mean|std_mean|all|any|argmax|argmin|logsumexp|count_nonzero|nansum|cumsum|cumprod")
OP_FAMILIES: tuple[tuple[str, str], ...] = (
    ("elementwise", r"rotary"),  # rotary position embeddings are elementwise, not an embedding lookup
    ("attention", r"scaled_dot_product|flash_attn|flash_attention|efficient_attention|cudnn_attention|"
                  r"attention|fmha|sdpa|(^|::|_)mha(_|$)|paged_attention|flash_mla|flashinfer.*(decode|prefill)|"
                  r"(^|::|_|\.)sage_?(attn|attention)"),
    ("convolution", r"(^|::|_)conv(olution|_transpose|_tbc|_depthwise|\d)|cudnn_conv|miopen_conv|mkldnn_conv|"
                    r"slow_conv|convolutionbackward"),
    # (gemm / matmul in the op's own name, not its namespace: fbgemm::permute_2D_sparse_data is no GEMM)
    ("GEMM", rf"^aten::({_ATEN_GEMMS})(_|_out|\.\w+)?$|(^|::)\w*(gemm|matmul|scaled_mm|_mm)\w*$"),
    ("norm", r"(layer|rms|batch|group|instance)_?norm|_batch_norm_impl_index"),
    ("softmax", r"softmax"),
    ("loss", r"loss|cross_entropy|nll_"),
    ("embedding", r"embedding"),
    ("optimizer", r"(^|::)_foreach_|(^|::)_fused_(adam|adamw|sgd|adagrad)|optimizer"),
    ("reduction", rf"^aten::({_ATEN_REDUCTIONS})(_|_out|\.\w+)?$"),
    ("elementwise", r"^aten::"),  # the remaining ATen ops
)
# ops whose name says nothing of the kernel: inductor's record of a Triton launch (the kernel's own
# name, whose fused op list is not its family); the kernel's base name decides instead
OPAQUE_OPS = re.compile(r"^triton_")
# autograd's per-node wrapper: it holds the node's backward ops and the gradient accumulation after
# them, so its family (the node's) is for the kernels it launches itself, never handed down
ENGINE_WRAPPER_RE = re.compile(r"^autograd::engine::evaluate_function:\s*")
# a backward node: torch::autograd::CppNode<Function> (a C++ Function), or [module.]NameBackward[version]
CPP_NODE_RE = re.compile(r"^(?:\w+::)*CppNode<(\w+)>$")
BACKWARD_NODE_RE = re.compile(r"^(?:[\w.]*\.)?([A-Z]\w*?)Backward(\d*)$")
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
# record_function annotations around an optimizer step: kernels inside are optimizer time
OPTIMIZER_ANNOTATION_RE = re.compile(r"^optimizer\.(step|zero_grad)#", re.IGNORECASE)

# a custom op or Function whose words name a GEMM beside another family (Transformer Engine's
# _LayerNormLinear, _LayerNormMLP) launches kernels of both: neither family is the op's
FUSED_WITH_GEMM_RE = re.compile(r"(^|::|_|\.)(linear|mlp|gemm|matmul)(_|$)")

# -- by base name (kernels with no known launching op), lower-cased ---------------------------------
NAME_FAMILIES: tuple[tuple[str, str], ...] = (
    # Triton / inductor: the prefix says the kind; the fused op names after it do not
    ("GEMM", r"^triton_tem_fused_\w*mm"),
    ("elementwise", r"^triton_poi_"),
    ("norm", r"^triton_(per|red)_fused\w*(layer|rms|group|batch)_?norm"),  # a fused norm is a reduction kernel
    ("softmax", r"^triton_(per|red)_fused\w*softmax"),
    ("reduction", r"^triton_(per|red)_"),
    ("other", r"^triton_"),
    ("attention", r"flash|fmha|attn|attention|sdpa|(^|_)mha_|paged_|xformers|mla_|decode_kernel|prefill_kernel|"
                  r"_fwd_kernel_stage|(^|_)sage(_|attn|attention|$)"),  # SageAttention: sage_fwd, sageattn_*
    ("convolution", r"conv(?!ert)|implicit_?gemm|im2d?2?col|^igemm_|winograd|wgrad|dgrad|fprop|scudnn|nchwtonhwc|nhwctonchw"),
    ("GEMM", r"gemm|gemv|xmma|^nvjet|^cijk_|^bmm_|cutlass|cublas|s16816|h16816|s1688|i8816|wgmma|splitk|"
             r"matmul|gemmsn|^sm\d+_|^ampere_|^volta_|^turing_|^hopper_"),
    ("norm", r"(layer|rms|batch|group|instance)_?norm|^bn_(fw|bw)|batchnorm|gammabeta|rowwisemoments|"
             r"computefusedparams|welford|^(ln|rmsnorm)_(fwd|bwd)"),  # Transformer Engine / apex: ln_bwd_kernel
    ("elementwise", r"rotary"),
    ("embedding", r"embedding|embbag"),  # before optimizer: FBGEMM's fused embedding backward + adagrad
    ("optimizer", r"multi_tensor_apply|adam|(^|_)lamb(_|$)|(^|_)sgd(_|$)|adagrad|fused_optim"),
    ("softmax", r"softmax"),
    ("loss", r"loss|cross_entropy|nll_"),
    ("reduction", r"reduce|reduction|(^|_)sum(_|$)|_norm_kernel|argmax|argmin|logsumexp"),
    ("elementwise", r"elementwise|vectorized|unrolled|pointwise|fill|copy|catarray|cat_|gelu|silu|relu|"
                    r"(^|_)(swi|ge|re)glu|swish|sigmoid|act_and_mul|transpose|permute|quant|index|scatter|gather|"
                    r"where|cast|convert|clamp|"
                    r"tensorop|subtensor|scale|bias|dropout|mask|arange|pad|reshape"),
)


@lru_cache(maxsize=2)
def compiled(rules: tuple[tuple[str, str], ...]) -> tuple[tuple[str, re.Pattern], ...]:
    """``rules`` (OP_FAMILIES, NAME_FAMILIES) compiled, once per process, on first use: a process
    that classifies nothing (a no-op ingest) never compiles them."""
    return tuple((family, re.compile(pattern)) for family, pattern in rules)


@lru_cache(maxsize=65536)
def op_family(op: str) -> str | None:
    """The family of a launching op, or None when no rule knows it (then the kernel's name decides)."""
    if OPAQUE_OPS.match(op):
        return None
    text = op_text(op)
    for family, pattern in compiled(OP_FAMILIES):
        if pattern.search(text):
            if family in ABSORBING and FUSED_WITH_GEMM_RE.search(text) and not text.startswith("aten::"):
                return None  # a norm or attention fused with its GEMM: the kernels' own names decide
            return family
    return None


def hands_down(op: str) -> bool:
    """Whether an op's family may be handed to what runs inside it (when the family absorbs): not
    the autograd engine's per-node wrapper."""
    return ENGINE_WRAPPER_RE.match(op) is None


def op_text(op: str) -> str:
    """What the op rules search: a backward node's forward op (the engine's wrapper read as the
    node inside it), template arguments removed, CamelCase words split by ``_``, lower case."""
    name = ENGINE_WRAPPER_RE.sub("", op[:MAX_NAME_CHARS], count=1).strip()
    node = CPP_NODE_RE.match(name)
    if node:
        name = node.group(1)
    elif "<" in name:
        name = _top_level(name)[0]
    backward = BACKWARD_NODE_RE.match(name)
    if backward:  # NativeLayerNormBackward0 -> aten::native_layer_norm; FlashAttnFuncBackward -> FlashAttnFunc
        forward, version = backward.groups()
        name = f"aten::{_snake(forward)}" if version else forward
    return _snake(name)


def _snake(name: str) -> str:
    """``FlashAttnVarlenFunc`` -> ``flash_attn_varlen_func``; ``RMSNorm`` -> ``rms_norm``."""
    return _CAMEL_BOUNDARY.sub("_", name).lower()


@lru_cache(maxsize=65536)
def name_family(name: str) -> str:
    """The family of a kernel from its base name alone."""
    text = base_name(name).lower()[:MAX_NAME_CHARS]
    for family, pattern in compiled(NAME_FAMILIES):
        if pattern.search(text):
            return family
    return OTHER


# -- base names ------------------------------------------------------------------------------------------
_OPEN, _CLOSE = "<({[", ">)}]"
MAX_NAME_CHARS = 8192  # a hostile trace's megabyte-long names cost no more than this each
# wrapper kernels whose real name is their first template argument (cutlass::Kernel<cutlass_80_..._sgemm_...>)
WRAPPERS = frozenset({"kernel", "kernel2", "device_kernel", "trampoline_kernel", "kernelwrapper"})


_BUILTIN_TYPES = frozenset({"float", "double", "short", "unsigned", "signed", "BFloat16", "Half", "bfloat16_t",
                            "half_t", "__half", "__nv_bfloat16", "__hip_bfloat16"})


def _top_level(name: str) -> tuple[str, str]:
    """``name`` with every bracketed group removed, and the text of its first template argument list.

    A '>' closes only a '<' (``enable_if<((8)>(0))>`` keeps its parentheses together), so
    comparisons inside template arguments do not end them."""
    out, first_template, stack, start = [], "", [], 0
    for i, ch in enumerate(name):
        if ch in _OPEN:
            if not stack:
                start = i
            stack.append(_CLOSE[_OPEN.index(ch)])
        elif stack and ch == stack[-1]:
            stack.pop()
            if not stack and ch == ">" and not first_template:
                first_template = name[start + 1:i]
        elif not stack:
            if ch == " ":  # a new word (after the return type): its template is the one that counts
                first_template = ""
            out.append(ch)
    return "".join(out), first_template


@lru_cache(maxsize=65536)
def function_name(name: str, _depth: int = 0) -> str:
    """The qualified function name: return type, template arguments and parameter lists removed
    (``void at::native::foo<4, x>(int)`` -> ``at::native::foo``); a wrapper kernel's first template
    argument (``cutlass::Kernel2<cutlass_80_simt_sgemm_…>`` -> ``cutlass_80_simt_sgemm_…``);
    Itanium-mangled names (``_ZN2ck…``) read from their length-prefixed identifiers.  Only the first
    ``MAX_NAME_CHARS`` characters are read (the longest real kernel names are a few thousand)."""
    name = name[:MAX_NAME_CHARS].strip()
    if name.startswith("_Z"):
        return _demangled(name)
    text, first_template = _top_level(name)
    words = text.replace("::::", "::").split()
    qualified = words[-1].strip(":") if words else name
    parts = qualified.split("::")
    if parts[-1].lower() in WRAPPERS:
        inner = function_name(first_template.split(",")[0], _depth + 1) if first_template and _depth < 4 else ""
        if re.search(r"[A-Za-z_]\w{4,}", inner) and inner.rsplit("::", 1)[-1] not in _BUILTIN_TYPES:
            return inner
        if len(parts) > 1:  # internal::gemvx::kernel<int, …>: the namespace names it
            return "::".join(parts[:-1])
    return qualified


def _demangled(name: str) -> str:
    """A mangled name's function identifier (the last of its leading nested names; a wrapper's
    first template argument's), qualified by the identifiers before it."""
    ids = _mangled_run(name, name.find("N") + 1 if name.startswith("_ZN") else 2)
    if not ids:
        return name
    if ids[-1][0].lower() in WRAPPERS:
        inner = _mangled_run(name, ids[-1][1])
        if inner:
            return inner[-1][0]
    return "::".join(i for i, _ in ids)


def _mangled_run(name: str, pos: int) -> list[tuple[str, int]]:
    """The length-prefixed identifiers from ``pos`` (skipping to the first digit, past ``I``/``N``/``S_``)."""
    while pos < len(name) and not name[pos].isdigit():
        if name[pos] == "E":
            return []
        pos += 1
    ids = []
    while pos < len(name) and name[pos].isdigit():
        match = re.match(r"\d+", name[pos:])
        length = int(match.group())
        pos += len(match.group())
        ids.append((name[pos:pos + length], pos + length))
        pos += length
    return ids


@lru_cache(maxsize=65536)
def base_name(name: str) -> str:
    """The kernel's own name: :func:`function_name` without its namespaces."""
    return function_name(name).rsplit("::", 1)[-1] or name
