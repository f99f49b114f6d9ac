"""The rule table on real kernel names from ../shared/traces and awkward ones."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scaletrace.pipeline.read import vocabulary as vocab
from scaletrace.pipeline.read.classify import (DEFAULT_RULES, Classifier, Rule, RulesError, is_collective_call,
                                               load_rules)

CASES = [
    # (side, category, name, kind): names copied from the shared real traces
    ("gpu", "kernel", "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "comm"),
    ("gpu", "kernel", "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "comm"),
    ("gpu", "kernel", "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "comm"),
    ("gpu", "kernel", "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "comm"),  # RCCL, MI300X
    ("gpu", "kernel", "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolution", "compute"),
    ("gpu", "kernel", "triton_poi_fused_add_cos_sin_0", "compute"),
    ("gpu", "kernel", "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", "compute"),
    ("gpu", "gpu_memcpy", "Memcpy DtoD (Device -> Device)", "memory"),
    ("gpu", "gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", "memory"),
    ("gpu", "gpu_memset", "Memset (Device)", "memory"),
    # awkward names and older schemas
    ("gpu", "kernel", "rcclKernel_AllReduce_RING", "comm"),
    ("gpu", "kernel", "NCCLKERNEL_upper_case", "comm"),
    ("gpu", "kernel", "hcclAllReduce", "comm"),
    ("gpu", "Kernel", "volta_sgemm_128x64_nn", "compute"),  # 2021: capitalised category
    ("gpu", "Memcpy", "Memcpy DtoH (Device -> Pageable)", "memory"),
    ("gpu", "kernel", "hipMemcpyAsync_kernel", "memory"),
    ("gpu", "kernel", "dma_copy_engine", "memory"),
    ("gpu", "cuda_sync", "Event Sync", "sync"),
    ("gpu", "kernel", "Stream Wait Event", "sync"),
    ("gpu", "kernel", "Context Sync", "sync"),
    # CPU-only traces (gloo)
    ("cpu", "user_annotation", "gloo:all_reduce", "comm"),
    ("cpu", "user_annotation", "mpi:all_gather", "comm"),
    ("cpu", "cpu_op", "aten::addmm", "compute"),
    ("cpu", "user_annotation", "## forward ##", "other"),
    # the training thread blocked on a collective is sync, never compute (torch 2.x op names)
    ("cpu", "cpu_op", "_c10d_functional::wait_tensor", "sync"),
    ("cpu", "cpu_op", "c10d_functional::wait_tensor", "sync"),
    ("cpu", "cpu_op", "c10d::wait", "sync"),
    ("cpu", "user_annotation", "ProcessGroupNCCL::WorkNCCL::wait", "sync"),
    ("cpu", "user_annotation", "Work::wait", "sync"),
    ("cpu", "cpu_op", "_c10d_functional::all_reduce", "compute"),  # a call: dropped by is_collective_call
    ("cpu", "cpu_op", "aten::wait_for_nothing", "compute"),
]


@pytest.mark.parametrize("name,is_call", [
    ("c10d::allreduce_", True), ("_c10d_functional::all_reduce", True),
    ("_c10d_functional::wait_tensor", True), ("c10d_functional::all_gather_into_tensor", True),
    ("record_param_comms", True), ("aten::mm", False), ("my_c10d::thing", False),
])
def test_collective_calls(name, is_call):
    assert is_collective_call(name) is is_call


def test_regex_rules_keep_their_case_classes(tmp_path):
    """A regex is matched ignoring case but not lower-cased (lower-casing would turn \\W into \\w)."""
    path = tmp_path / "rules.json"
    path.write_text(json.dumps([{"side": "gpu", "field": "name", "match": "regex",
                                 "pattern": r"^ag\W", "kind": "comm"}]))
    rules = load_rules(path)
    assert Classifier(rules).classify("gpu", "kernel", "AG_x") == "other"  # _ is a word character
    assert Classifier(rules).classify("gpu", "kernel", "ag-x") == "comm"


def test_bad_regex_is_one_line(tmp_path):
    path = tmp_path / "rules.json"
    path.write_text(json.dumps([{"side": "gpu", "field": "name", "match": "regex", "pattern": "(",
                                 "kind": "comm"}]))
    with pytest.raises(RulesError, match="not a regular expression"):
        load_rules(path)


@pytest.mark.parametrize("side,cat,name,kind", CASES)
def test_default_rules(side, cat, name, kind):
    assert Classifier().classify(side, cat.lower(), name) == kind


def test_rules_are_overridable(tmp_path):
    path = tmp_path / "rules.json"
    path.write_text(json.dumps([{"side": "gpu", "field": "name", "match": "prefix",
                                 "pattern": "my_exchange", "kind": "comm"}]
                               + [r.__dict__ for r in DEFAULT_RULES]))
    rules = load_rules(path)
    assert Classifier(rules).classify("gpu", "kernel", "my_exchange_kernel") == "comm"
    assert Classifier().classify("gpu", "kernel", "my_exchange_kernel") == "compute"


def test_bad_rules_file_names_the_problem(tmp_path):
    path = tmp_path / "rules.json"
    path.write_text(json.dumps([{"side": "gpu", "field": "name", "match": "prefix",
                                 "pattern": "x", "kind": "network"}]))
    with pytest.raises(RulesError, match="kind must be one of"):
        load_rules(path)


def _one_by_one(rules, side: str, cat: str, name: str) -> str:
    """The rule table's meaning, read literally: the first rule of the side that matches."""
    return next((rule.kind for rule in rules if rule.side == side and rule.matches(cat, name)), "other")


# runs of consecutive regex rules of one side, field and kind (each joined into one search), a
# back-reference and an inline flag between them (never joined), rules of other kinds after them
MIXED_RULES = (
    Rule("gpu", "name", "regex", r"fo+bar", "comm"),
    Rule("gpu", "name", "regex", r"ba[rz]$", "comm"),
    Rule("gpu", "name", "regex", r"(ab)\1", "comm"),
    Rule("gpu", "name", "regex", r"(?i)zed", "comm"),
    Rule("gpu", "name", "regex", r"^x|y$", "comm"),
    Rule("gpu", "name", "regex", r"q{2}", "comm"),
    Rule("gpu", "name", "regex", r"z{2}", "memory"),  # another kind: a run of its own
    Rule("gpu", "function", "regex", r"gemm", "compute"),
    Rule("gpu", "function", "regex", r"co+py", "compute"),
    Rule("gpu", "name", "contains", "bar", "sync"),
    Rule("gpu", "name", "regex", r"oo", "memory"),
    Rule("cpu", "name", "regex", r"ab", "comm"),
    Rule("cpu", "name", "regex", r"ba", "comm"),
)


@settings(max_examples=400, deadline=None)
@given(name=st.text(alphabet="abxyzfoqedgmcpr_:<>(), ", max_size=24),
       cat=st.sampled_from(["kernel", "gpu_memcpy", "cuda_runtime", "cpu_op"]), side=st.sampled_from(["gpu", "cpu"]))
def test_joined_regex_rules_classify_as_the_rules_one_by_one(name, cat, side):
    for rules in (DEFAULT_RULES, MIXED_RULES):
        assert Classifier(rules).classify(side, cat, name) == _one_by_one(rules, side, cat, name)


def test_runs_of_regex_rules_are_joined_only_where_the_meaning_holds():
    steps = [(type(step).__name__, step.side, step.kind) for step in Classifier(MIXED_RULES).steps]
    assert steps == [("_RegexRun", "gpu", "comm"), ("Rule", "gpu", "comm"), ("Rule", "gpu", "comm"),
                     ("_RegexRun", "gpu", "comm"), ("Rule", "gpu", "memory"), ("_RegexRun", "gpu", "compute"),
                     ("Rule", "gpu", "sync"),
                     ("Rule", "gpu", "memory"), ("_RegexRun", "cpu", "comm")]
    joined = Classifier(DEFAULT_RULES).steps
    assert sum(type(step).__name__ == "_RegexRun" for step in joined) == 1  # the comm kernel patterns
    assert len(joined) == len(DEFAULT_RULES) - len(vocab.COMM_KERNELS) + 1
