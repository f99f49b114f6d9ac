"""One trace vocabulary (pipeline/read/vocabulary.py): what it names is what ingest keeps and classifies.

A device category that only a rules file names must reach the classifier: extract keeps its events
and the byte pre-scan of ingest counts it as device activity.
"""

from __future__ import annotations

import json
from dataclasses import asdict

import duckdb
import pytest
from click.testing import CliRunner
from conftest import cpu, kernel, query, write_trace

from scaletrace.cli import main
from scaletrace.pipeline.read import vocabulary
from scaletrace.pipeline.read.classify import DEFAULT_RULES, Classifier, Rule

NEW_DUR_US = 40  # the new category's event
KERNEL_DUR_US = 100  # an ordinary CUDA kernel beside it (when there is one)


def _trace(path, category: str, with_kernel: bool):
    """A rank-0 trace: one event of ``category`` [200, 240) µs launched inside ProfilerStep#1, a CPU
    op that no GPU trace keeps (``aten::add``), and optionally a CUDA kernel [0, 100) µs."""
    events = [
        cpu("ProfilerStep#1", 0, 500, cat="user_annotation"),
        cpu("aten::add", 1, 5),  # a CPU op a GPU trace does not keep (aten::mm would be: FLOP counting)
        cpu("cudaLaunchKernel", 2, 1, cat="cuda_runtime", correlation=1),
        kernel("xla_fusion_0", 200, NEW_DUR_US, stream=9, corr=1, cat=category),
    ]
    if with_kernel:
        events += [cpu("cudaLaunchKernel", 3, 1, cat="cuda_runtime", correlation=2),
                   kernel("gemm", 0, KERNEL_DUR_US, corr=2)]
    return write_trace(path, events, rank=0)


def _rules_file(path, category: str, kind: str):
    """The default table with one rule in front that names the new category (exactly, any case)."""
    rules = [asdict(Rule("gpu", "cat", "exact", category.lower(), kind))] + [asdict(r) for r in DEFAULT_RULES]
    path.write_text(json.dumps(rules))
    return path


@pytest.mark.parametrize("with_kernel", [True, False], ids=["beside-kernels", "only-device-events"])
@pytest.mark.parametrize("category,kind", [
    ("mtia_kernel", "compute"),
    ("MTIA_Kernel", "comm"),  # the trace spells it in capitals, the rule in lower case
    ("xpu_memcpy", "memory"),
    ("xpu_barrier", "sync"),
])
def test_rules_file_adds_a_device_category(tmp_path, category, kind, with_kernel):
    _trace(tmp_path / "run" / "rank0.json", category, with_kernel)
    rules = _rules_file(tmp_path / "rules.json", category, kind)
    db = tmp_path / "t.duckdb"
    result = CliRunner().invoke(main, ["ingest", str(tmp_path / "run"), "--db", str(db), "-q",
                                       "--rules", str(rules), "--workers", "1"])
    assert result.exit_code == 0, result.output
    con = duckdb.connect(str(db), read_only=True)
    rows = con.sql("SELECT cat, kind, dur_ns, step FROM device_events WHERE name = 'xla_fusion_0'").fetchall()
    assert rows == [(category, kind, NEW_DUR_US * 1000, 1)]  # kept as written, classified, stepped
    # The pre-scan saw device activity, so the trace is a GPU trace and keeps only the CPU events a
    # GPU trace needs (a miss keeps every CPU op, aten::add included, as on a CPU-only trace).
    assert con.sql("SELECT trace_mode FROM traces").fetchall() == [("gpu",)]
    assert con.sql("SELECT count(*) FROM cpu_events WHERE name = 'aten::add'").fetchall() == [(0,)]
    con.close()
    # ... and it counts: the new event's 40 µs are its kind's time, the kernel's 100 µs compute.
    breakdown = query(db, "rank_breakdown").to_dicts()[0]
    expected = {k: 0 for k in ("compute", "comm", "memory")}
    expected["compute"] += KERNEL_DUR_US * 1000 if with_kernel else 0
    if kind in expected:
        expected[kind] += NEW_DUR_US * 1000  # the two events do not overlap: unions add up
    assert {k: breakdown[f"{k}_ns"] for k in expected} == expected


@pytest.mark.parametrize("with_kernel", [True, False], ids=["beside-kernels", "only-device-events"])
def test_without_a_rule_an_unknown_category_is_not_device_activity(tmp_path, with_kernel):
    """... unless its events carry a stream or device arg (tests/test_accelerator_categories.py): here
    they carry neither."""
    path = _trace(tmp_path / "run" / "rank0.json", "mtia_kernel", with_kernel)
    doc = json.loads(path.read_text())
    for event in doc["traceEvents"]:
        if event["cat"] == "mtia_kernel":
            del event["args"]["stream"], event["args"]["device"]
    path.write_text(json.dumps(doc))
    db = tmp_path / "t.duckdb"
    result = CliRunner().invoke(main, ["ingest", str(tmp_path / "run"), "--db", str(db), "-q"])
    assert result.exit_code == 0, result.output
    con = duckdb.connect(str(db), read_only=True)
    assert con.sql("SELECT count(*) FROM device_events WHERE name = 'xla_fusion_0'").fetchall() == [(0,)]
    assert con.sql("SELECT trace_mode FROM traces").fetchall() == [("gpu" if with_kernel else "cpu",)]


@pytest.mark.parametrize("category", ["mtia_kernel", "MTIA_KERNEL", "Mtia_Kernel"])
def test_byte_prescan_finds_a_category_named_by_a_rule(category):
    classifier = Classifier((Rule("gpu", "cat", "exact", "mtia_kernel", "compute"), *DEFAULT_RULES))
    only_new = json.dumps({"traceEvents": [kernel("k", 0, 1, cat=category)]}).encode()
    assert classifier.device_categories >= vocabulary.DEVICE_CATS | {"mtia_kernel"}
    assert classifier.device_scan.search(only_new)
    assert not Classifier().device_scan.search(only_new)


@pytest.mark.parametrize("category", sorted(vocabulary.DEVICE_CATS) + ["Kernel", "Memcpy", "Memset", "GPU_MEMCPY"])
def test_byte_prescan_finds_every_vocabulary_device_category(category):
    """The 2021 schema capitalises categories; extract lower-cases them, so the scan ignores case."""
    assert Classifier().device_scan.search(json.dumps({"cat": category}).encode())
    assert Classifier().device_scan.search(b'{"cat" : "' + category.encode() + b'"}')


@pytest.mark.parametrize("text", [b'{"cat": "cpu_op"}', b'{"cat": "kernel_launch"}', b'{"name": "kernel"}',
                                  b'{"cat": "cuda_runtime", "name": "cudaLaunchKernel"}'])
def test_byte_prescan_ignores_other_categories(text):
    assert not Classifier().device_scan.search(text)


def test_default_rules_give_every_vocabulary_device_category_a_kind():
    """Each category extract keeps by default has an exact rule on the gpu side (memory and sync
    categories before the kernel category: first match wins)."""
    named = {r.pattern for r in DEFAULT_RULES if r.side == "gpu" and r.field == "cat" and r.match == "exact"}
    assert named == set(vocabulary.DEVICE_CATS)
    classify = Classifier().classify
    for cat in vocabulary.MEMORY_CATS:
        assert classify("gpu", cat, "some_copy") == "memory"
    for cat in vocabulary.SYNC_CATS:
        assert classify("gpu", cat, "cudaDeviceSynchronize") == "sync"
    for cat in vocabulary.KERNEL_CATS:
        assert classify("gpu", cat, "sm90_gemm") == "compute"


def test_kinds_are_one_list():
    from scaletrace.pipeline.read import classify, intervals

    assert classify.KINDS is vocabulary.KINDS and intervals.KINDS is vocabulary.KINDS
    assert set(intervals.SETS["all"]) == set(vocabulary.KINDS)


@pytest.mark.parametrize("name,step", [("ProfilerStep#12", 12), ("ProfilerStep #3", 3), ("ProfilerStep# 7", 7),
                                       ("ProfilerStep", None), ("MyStep#4", None)])
def test_step_pattern(name, step):
    match = vocabulary.STEP_RE.search(name)
    assert (int(match.group(1)) if match else None) == step
