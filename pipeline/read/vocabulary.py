"""The Kineto trace vocabulary: every category, name prefix and pattern the pipeline recognises.

One place ("One place per decision"): extract, classify, collectives,
intervals and the byte pre-scan of ingest import these; none spells a category
or a collective prefix of its own.  Categories are compared lower-cased (the
2021 schema writes ``Kernel``, ``Memcpy``, ``Runtime``); names as written.

Device categories are the ones whose events are device activity (GPU kernels,
copies, syncs).  A rules file can add one: a gpu-side rule that names a
category exactly (``{"side": "gpu", "field": "cat", "match": "exact",
"pattern": "mtia_kernel", "kind": "compute"}``) makes extract keep its events
and the pre-scan count it (``Classifier.device_categories``).

The ``hta_*`` queries keep HTA's own spellings (``queries/``): they reproduce
HTA, not this vocabulary.
"""

from __future__ import annotations

import re
from typing import Iterable

# -- kinds: what every device event is classified as (pipeline/read/classify.py) ---------------------
# The tables whose rows come from one trace file each (keyed by trace_id; extract builds them,
# the store's schema creates them).
PER_TRACE_TABLES = ("device_events", "cpu_events", "steps", "collectives", "interval_unions", "compute_islands")

KINDS = ("compute", "comm", "memory", "sync", "other")

# -- categories ------------------------------------------------------------------------------------
# Device kernels: CUDA / ROCm `kernel`, and MTIA's `mtia_ccp_events` (libkineto's MTIA_CCP_EVENTS, the
# on-device events HTA counts as kernels: hta/common/types.py KERNEL_CATEGORY_PATTERN).
KERNEL_CATS = ("kernel", "mtia_ccp_events")
MEMORY_CATS = ("gpu_memcpy", "gpu_memset", "memcpy", "memset")  # memcpy / memset: 2021 schema
SYNC_CATS = ("cuda_sync", "xpu_sync")  # xpu_sync: libkineto's XPU_SYNC (PTI device synchronization)
# Device-side communication activity: libkineto's COLLECTIVE_COMM (on XPU, PTI's communication view)
COMM_CATS = ("collective_comm",)
DEVICE_CATS = frozenset(KERNEL_CATS + MEMORY_CATS + SYNC_CATS + COMM_CATS)
# Host-side launches and API calls; a device event's `correlation` points at one of these
# (libkineto's runtime / driver activity types of CUDA, ROCm, MTIA, XPU and PrivateUse1 backends).
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "runtime", "hip_runtime", "mtia_runtime",
                          "xpu_runtime", "xpu_driver", "privateuse1_runtime", "privateuse1_driver"})
CPU_OP_CAT = "cpu_op"  # an ATen op: compute on CPU-only traces; on GPU traces, what launched a kernel
# the categories of ops on GPU traces: the 2021 schema (PyTorch 1.8 / 1.9) writes `Operator`, for
# record_function spans (ProfilerStep#N) too; its runtime calls and kernels carry the op's
# `External id` as `external id` (pipeline/read/launchers.py)
CPU_OP_CATS = frozenset({CPU_OP_CAT, "operator"})
USER_ANNOTATION_CAT = "user_annotation"  # record_function spans (ProfilerStep#N, Optimizer.step#…)
PYTHON_CAT = "python_function"  # Python stack events: dropped unless --keep-python
GPU_ANNOTATION_CAT = "gpu_user_annotation"  # annotations mirrored on the GPU timeline: only steps kept
PROFILER_CAT = "trace"  # the profiler's own spans: dropped
# Host-side categories: never device activity, whatever their args (a `cpu_op` or a ROCm runtime call
# may carry a `stream` arg).  2021 schema: `Operator`, `Runtime`; CUPTI's own `overhead`; libkineto's
# host-side `hpu_op` and `glow_runtime`.
HOST_CATS = RUNTIME_CATS | {CPU_OP_CAT, USER_ANNOTATION_CAT, PYTHON_CAT, GPU_ANNOTATION_CAT, PROFILER_CAT,
                            "cpu_instant_event", "overhead", "operator", "user", "external_correlation",
                            "hpu_op", "glow_runtime"}
# Categories whose events are not activity on a device timeline, with why (a note names them when a
# trace holding them is stored CPU-only).  CUPTI's range profiler (libkineto CuptiRangeProfiler) writes
# one event per counter range, timed by splitting the profiled span evenly: no kernel's real time.
# CUDA event records (`cuda_event`, with stream and device args) mark a point of a stream, no work.
NOT_TIMELINE_CATS = {"cuda_profiler_range": "CUPTI range-profiler counters, not kernel times",
                     "cuda_event": "CUDA event records, not work", "mtia_counters": "MTIA counters, not work"}


def unknown_category(cat: str, device_categories: frozenset) -> bool:
    """A category (lower case, not empty) the vocabulary does not know: neither host-side nor device
    activity (``device_categories``: the vocabulary's and those a rules file names)."""
    return bool(cat) and cat not in HOST_CATS and cat not in device_categories


def found_on_device(cat: str, device_categories: frozenset) -> bool:
    """Whether an event of ``cat`` (lower case) that carries an int ``stream`` or ``device`` arg is
    device activity although its category is not a device category: a category the vocabulary does
    not know (a new accelerator's kernels: docs, Classification), unless it is not a timeline."""
    return unknown_category(cat, device_categories) and cat not in NOT_TIMELINE_CATS


# -- steps -----------------------------------------------------------------------------------------
STEP_NAME = "ProfilerStep"  # torch.profiler's step annotation, `ProfilerStep#N`
STEP_RE = re.compile(r"ProfilerStep\s*#\s*(\d+)")
# CPU ops kept with their recorded shapes on GPU traces: candidates for FLOP counting (a superset
# of the ops queries/reference/flop_ops.sql lists: which ops count, and how, is decided there) and
# the token embedding (`aten::embedding`, whose indices' shape gives the tokens a step processed).
FLOP_OP_RE = re.compile(r"aten::\w*(mm|matmul|linear|attention|conv)|aten::embedding$", re.IGNORECASE)

# -- collectives -----------------------------------------------------------------------------------
# On CPU-only traces the collective work itself: gloo / MPI / UCC events on the backend's threads.
CPU_COMM_PREFIXES = ("gloo:", "mpi:", "ucc:")
# Ops whose name gives the collective (`nccl:all_reduce`, `c10d::allreduce_`).
COLLECTIVE_NAME_PREFIXES = ("c10d::", "nccl:")
# CPU ops that carry a collective's metadata or enclose its launch (kept on GPU traces; the
# metadata of a comm kernel comes from the enclosing one when the kernel's args lack it).
COLLECTIVE_OP_PREFIXES = ("record_param_comms", *COLLECTIVE_NAME_PREFIXES, *CPU_COMM_PREFIXES)
# CPU ops that *are* collective calls: on CPU-only traces they and everything inside them are
# dispatch, not compute (docs: "Classification").  The functional collectives
# (`_c10d_functional::all_reduce`, used by DTensor / TP) dispatch to the c10d ops; their wait op is
# matched by WAIT_PATTERN first.
COLLECTIVE_CALL_PREFIXES = (*COLLECTIVE_OP_PREFIXES, "_c10d_functional::", "c10d_functional::",
                            "_c10d_functional_autograd::")
# Collectives as autograd Functions (TorchRec's comm_ops): `All2All_Pooled_Req` issues the all-to-all,
# `All2All_Pooled_Wait` waits for it; in backward `All2All_Pooled_WaitBackward` issues the gradients'
# one and `All2All_Pooled_ReqBackward` waits; also `All2Allv_*`, `All2All_Seq_*`, `ReduceScatterBase_*`,
# `AllGatherBase_*`, `Variable_Batch_All2All_Pooled_*`.  The issuing ones are collective calls (and
# comm on CPU-only traces: the caller's thread runs them); the waiting ones are waits.  Ignoring case.
COLLECTIVE_FUNCTION_WORD = r"(all2all|alltoall|reducescatter|allgather|allreduce)"  # the collective it is
COLLECTIVE_FUNCTION = r"^(?:\w+_)?" + COLLECTIVE_FUNCTION_WORD.replace("(", "(?:", 1) + r"\w*_"
COLLECTIVE_ISSUE_PATTERN = COLLECTIVE_FUNCTION + r"(?:req|waitbackward)$"
# The training thread blocked on a collective (CPU traces): torch's functional-collective wait op
# (`_c10d_functional::wait_tensor`, the legacy `c10d_functional::wait_tensor`), `c10d::wait`,
# Work / ProcessGroup wait annotations (`ProcessGroupNCCL::WorkNCCL::wait`, `Work::wait`) and the
# collective Functions' waits (`All2All_Pooled_Wait`).  Searched ignoring case.
WAIT_PATTERN = (r"^_?c10d_functional::wait_tensor$|^c10d::wait$|work\w*::wait$|processgroup\w*::wait$|"
                + COLLECTIVE_FUNCTION + r"(?:wait|reqbackward)$")
# NCCL / RCCL kernel names that say the collective: `ncclKernel_AllReduce_RING_LL_Sum_float`,
# `ncclDevKernel_AllGather_RING_LL`, NCCL 2.27's symmetric `ncclSymkDevKernel_AllReduce_AGxLLMC_R_sum_bf16`;
# RCCL's `ncclDevKernel_Generic` does not (its collective comes from the enclosing CPU op).
COLLECTIVE_KERNEL_RE = re.compile(r"^(?:nccl|rccl)(?:Symk)?(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)
# Communication kernels that are not NCCL's: (regex searched in the kernel's qualified function name,
# pipeline/families.function_name: no template argument or parameter list is ever searched, any case;
# the collective it is, or None when the name does not say).  Sources: torch symmetric memory
# (torch/csrc/distributed/c10d/symm_mem: multimem_all_reduce_kernel, multimem_one_shot_reduce_kernel,
# one_shot_all_reduce_kernel, two_shot_all_reduce_kernel, multimem_all_gather_kernel, reduce_scatter
# kernels), vLLM's custom all-reduce (csrc/custom_all_reduce.cuh: cross_device_reduce_1stage / _2stage),
# FlashInfer / TensorRT-LLM all-reduce fusion (allreduce_fusion_kernel_*, oneShotAllReduceKernel,
# twoShotAllReduceKernel, lamport kernels), DeepEP (EP_KERNEL below: dispatch / combine are
# all-to-all), NVSHMEM (nvshmem*), Transformer Engine userbuffers (userbuffers_*), MSCCL++ (mscclpp).
# Expert-parallel dispatch / combine in any library's namespace (EP_KERNEL): DeepEP's
# deep_ep::{intranode,internode,internode_ll}::{notify_dispatch, cached_notify_dispatch, dispatch,
# cached_notify, cached_notify_combine, combine}, NCCL's nccl_ep::internode_ll::dispatch, forks'
# `<vendor>::ep::internode::dispatch`, pplx-kernels' intranode / internode all-to-all: a namespace `ep`,
# `*_ep`, `intranode*` or `internode*` holding a kernel whose own name says dispatch, combine or
# notify.  Not DeepEP's deep_ep::layout::get_dispatch_layout (local counting: compute).
EP_KERNEL = (r"(?:^|::)(?:\w+_)?ep::(?:(?:intra|inter)node\w*::)?\w*(?:dispatch|combine|notify)\w*$"
             r"|(?:^|::)(?:intra|inter)node\w*::\w*(?:dispatch|combine|notify)\w*$")
COMM_KERNELS: tuple[tuple[str, str | None], ...] = (
    (r"all_?gather", "all_gather"),
    (r"reduce_?scatter", "reduce_scatter"),
    (r"all_?reduce|cross_device_reduce|multimem_one_shot_reduce|lamport", "all_reduce"),
    (EP_KERNEL + r"|all_?to_?all", "all_to_all"),
    (r"(^|::)nvshmemi?_|(^|::)userbuffers|(^|::)mscclpp", None),
)
GENERIC_KERNEL_COLLECTIVE = "generic"
# nccl-tests / c10d spellings -> canonical collective name; keys lower case without "_".
CANONICAL_COLLECTIVES = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "alltoallv": "all_to_all",
    "all2all": "all_to_all",  # TorchRec's All2All_* Functions
    "all2allv": "all_to_all",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "sendrecv": "send_recv",
    "send": "send",
    "recv": "recv",
    "barrier": "barrier",
    "gather": "gather",
    "scatter": "scatter",
}
# Variants that name the same collective: `all_gather_into_tensor`, `allreduce_coalesced`, `_allgather_base`.
COLLECTIVE_NAME_NOISE = ("_into_tensor", "_coalesced", "_base", "_tensor")


def category_scan(categories: Iterable[str]) -> re.Pattern[bytes]:
    """A byte regex that finds an event of one of ``categories`` in a trace's raw JSON, any case
    (extract lower-cases categories): ingest's pre-scan for "is this a GPU trace"."""
    names = b"|".join(re.escape(c.encode()) for c in sorted(categories))
    return re.compile(rb'"cat"\s*:\s*"(?i:' + names + rb')"')
