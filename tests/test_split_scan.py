"""A large file scanned in parts (pipeline/read/_scan.cpp, "split files"; docs/ingest.md, "One large file")
gives exactly the columns of one pass: on every shared trace and fixture cut into small parts, and on
generated hostile files whose cuts fall inside strings (braces, brackets, escaped quotes), inside
nested args, in another top-level array, or split a key the file has twice.

The one-pass scan is the reference here: tests/test_extractor_diff.py holds it to the msgspec reader.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, SHARED_TRACES
from scaletrace.pipeline.read import columns
from scaletrace.pipeline.read.classify import Classifier
from scaletrace.pipeline.read.decode import unpack
from test_extractor_diff import both, compiled, fixture_traces, real_traces

pytestmark = compiled
CATEGORIES = tuple(sorted(Classifier().device_categories))


def scanned(data: bytes, part_bytes: int, threads: int = 2) -> dict | None:
    """The scanner's raw answer (every column, the header, the pre-scans), without the count of parts."""
    found = columns._scan.scan(data, len(data), CATEGORIES, part_bytes, threads)
    if found is not None:
        found.pop("parts")
    return found


def parts(data: bytes, part_bytes: int, threads: int = 2) -> int:
    return columns._scan.scan(data, len(data), CATEGORIES, part_bytes, threads)["parts"]


def _same_as_one_pass(data: bytes, part_bytes: int, threads: int = 2) -> None:
    assert scanned(data, part_bytes, threads) == scanned(data, 0)


@pytest.mark.parametrize("name", real_traces())
def test_shared_traces_in_parts(name):
    data = unpack((SHARED_TRACES / name).read_bytes())
    if scanned(data, 0) is None:
        pytest.skip("the scanner leaves this file to the reference (tests/test_extractor_diff.py FALLS_BACK)")
    small = len(data) < 4_000_000  # a cut after every event (a part for each: slow on the larger files)
    for size in (len(data) // 3, len(data) // 17) + ((1,) if small else ()):
        _same_as_one_pass(data, size)
    # really cut: after every event, or at least once in 17 (its events may all lie in one part)
    assert parts(data, 1 if small else len(data) // 17) > 1 or scanned(data, 0)["num_events"] < 2


@pytest.mark.parametrize("name", ["hta-a100-2rank/rank0.json.gz", "tracelens-h100-qwen/rank0.json.gz",
                                  "hta-cpu-only-gloo/rank34.json.gz"])
def test_ingest_reads_a_split_file_as_the_reference(name, monkeypatch):
    """Ingest's worker (parse_file) with parts of 4 kB: the tables, trace facts and byte count the
    reference extractor (msgspec) gives."""
    path = SHARED_TRACES / name
    if not path.exists():
        pytest.skip(f"{name} is not in the shared traces")
    monkeypatch.setattr(columns, "PART_BYTES", 4096)
    assert parts(unpack(path.read_bytes()), columns.PART_BYTES) > 1
    reference, ours = both(path)
    assert reference[0] == "ok" and ours == reference


@pytest.mark.parametrize("name", fixture_traces())
def test_fixture_traces_in_parts(name):
    data = unpack((FIXTURES / name).read_bytes())
    for size in (1, 64, max(1, len(data) // 5)):
        _same_as_one_pass(data, size)


def test_every_event_its_own_part():
    """A plain trace of n events, parts of 1 byte: a cut after every event, n parts, one pass's columns."""
    n = 40
    events = [{"ph": "X", "cat": "kernel" if i % 3 else "cpu_op", "name": f"op{i % 7}", "pid": i % 2, "tid": "t",
               "ts": 1000 + i * 10.5, "dur": 5, "args": {"correlation": i, "stream": 7}} for i in range(n)]
    data = json.dumps({"distributedInfo": {"rank": 3}, "traceEvents": events, "baseTimeNanoseconds": 9}).encode()
    assert parts(data, 1) == n
    assert parts(data, 1, threads=1) == n
    _same_as_one_pass(data, 1)
    _same_as_one_pass(data, 1, threads=1)
    found = scanned(data, 1)
    assert found["num_events"] == n and found["rank"] == 3 and found["base_time_ns"] == 9


# -- generated hostile files -------------------------------------------------------------------------
# Each candidate cut (`}` `,` `{`) that is not between two events must be refused by the parts' scans,
# and every outcome (columns, or None: "left to the reference") must be one pass's.

HOSTILE_NAMES = ['"a}, {b"', '"}, {\\"ph\\": \\"X\\", \\"ts\\": 1, \\"dur\\": 2}"', '"x\\"}, {\\"y"', '"]}"',
                 '"{\\"traceEvents\\": [{}, {}]"', '"\\\\"', '"\\\\\\"},{"', '"[{},{}]"', '"k"', '"ProfilerStep#4"',
                 '"ncclKernel_AllReduce"', '"}\\n,\\n{"']
HOSTILE_ARGS = ['{"correlation": 5, "stream": 7}', '{"list": [{"a": 1}, {"b": "}, {"}], "correlation": 2}',
                '{"o": {"p": [{"q": {}}, {}], "r": [[{}],{}]}}', '{"Input Dims": [[1, 2], [3]], "x": {"y": {}}}',
                '{"Collective name": "allreduce", "In msg nelems": 4, "Process Group Name": "0"}', "null", "{}"]
SEPARATORS = [",", ", ", ",\n  ", "\n,\n", " ,\t"]
CLOSERS = ["}", "\n}", " }"]
HEADS = ['{"traceEvents": [', '{"schemaVersion": 1, "traceEvents":\n[',
         '{"note": "\\"traceEvents\\": [{}, {}]", "traceEvents": [',
         '{"distributedInfo": {"rank": 1, "traceEvents": [{"a": 1}, {"b": 2}]}, "traceEvents": [',
         '{"distributedInfo": {"rank": 2}, "traceEvents": [', '{"traceEvents": null, "traceEvents": [',
         '{"deviceProperties": [{"name": "H100"}, {"name": "A100"}], "traceEvents" : [']
TAILS = ["]}", '], "other": [{"x": 1}, {"y": 2}, {"z": [{}, {}]}]}', '], "distributedInfo": {"rank": 5}}',
         '], "traceEvents": [{"ph": "X"}]}', '], "baseTimeNanoseconds": 17, "host_name": "h}, {"}',
         '], "deviceProperties": [{"name": "B200"}]}', "]}\n"]


@st.composite
def hostile_events(draw) -> str:
    ph = draw(st.sampled_from(['"X"', '"X"', '"i"']))
    cat = draw(st.sampled_from(['"kernel"', '"cpu_op"', '"cuda_runtime"', '"gpu_memcpy"', '"user_annotation"']))
    ts = draw(st.sampled_from(["1", "2.5", "10.125", "7"]))
    return (f'{{"ph": {ph}, "cat": {cat}, "name": {draw(st.sampled_from(HOSTILE_NAMES))}, "pid": 1, '
            f'"tid": {draw(st.sampled_from(["2", chr(34) + "t" + chr(34)]))}, "ts": {ts}, "dur": 3, '
            f'"args": {draw(st.sampled_from(HOSTILE_ARGS))}{draw(st.sampled_from(CLOSERS))}')


@st.composite
def hostile_traces(draw) -> bytes:
    events = draw(st.lists(hostile_events(), max_size=12))
    body = ""
    for i, event in enumerate(events):
        body += (draw(st.sampled_from(SEPARATORS)) if i else "") + event
    text = (draw(st.sampled_from(HEADS)) + body + draw(st.sampled_from(TAILS))).encode()
    mutation = draw(st.integers(0, 19))  # now and then a byte cut or inserted: a file the reference refuses
    if mutation == 7 and text:
        text = text[:draw(st.integers(0, len(text) - 1))]
    elif mutation == 8:
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from([b",", b"}", b"]", b'"', b"\\", b"{", b"\xff"])) + text[at:]
    return text


@settings(max_examples=400, deadline=None, derandomize=True)
@given(data=hostile_traces(), part_bytes=st.sampled_from([1, 2, 17, 40, 97, 250]), threads=st.sampled_from([1, 2, 3]))
def test_hostile_files_in_parts(data, part_bytes, threads):
    _same_as_one_pass(data, part_bytes, threads)


@pytest.mark.parametrize("text, split", [
    # a real cut after each event: 3 parts
    ('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1},{"ph": "i"},\n {"ph": "i"}]}', 3),
    # the first candidate is inside a string: the first part does not scan, and the file is one pass
    ('{"traceEvents": [{"ph": "X", "name": "a}, {b", "ts": 1, "dur": 1},{"ph": "i"},\n {"ph": "i"}]}', 1),
    # the only candidate cut is inside a string: one pass
    ('{"traceEvents": [{"ph": "X", "name": "x\\"}, {\\"y", "ts": 1, "dur": 1}]}', 1),
    # inside nested args: one pass
    ('{"traceEvents": [{"ph": "i", "args": {"l": [{"a": 1}, {"b": 2}]}}]}', 1),
    # in another top-level array after traceEvents: one pass
    ('{"traceEvents": [{"ph": "i"}], "other": [{"x": 1}, {"y": 2}]}', 1),
    # an event cut off, then a key the head has too: one pass (which refuses the duplicate)
    ('{"distributedInfo": {"rank": 1}, "traceEvents": [{"ph": "i"}, {"ph": "i"}], "distributedInfo": null}', None),
])
def test_where_the_cuts_fall(text, split):
    data = text.encode()
    _same_as_one_pass(data, 1)
    if split is None:
        assert scanned(data, 1) is None and scanned(data, 0) is None
    else:
        assert parts(data, 1) == split
