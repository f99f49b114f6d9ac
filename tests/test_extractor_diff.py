"""The compiled extractor (pipeline/read/_scan.cpp) against the reference (msgspec, pipeline/read/columns.py
``read_python``): the same stage-1 columns, the same six tables and TraceMeta, the same error line,
on the real traces, the fixtures, the bad-input corpus and Hypothesis-generated traces.

The reference is the definition: wherever the scanner is not sure, it must refuse the file
("fallback"), and then the outcome is the reference's by construction.  A test here fails when
the scanner accepts a file and reads it differently.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, SHARED_TRACES, shared_runs
from scaletrace.pipeline.read import columns
from scaletrace.pipeline.read.classify import DEFAULT_RULES, Classifier
from scaletrace.pipeline.read.decode import decode, unpack
from scaletrace.pipeline.read.extract import read, scan_or_decode
from scaletrace.pipeline.execute.ingest import FRACTIONAL_TS, parse_file

NOT_BUILT = "the compiled extractor is not built (pipeline/read/_scan.cpp needs a C++ compiler and libsimdjson-dev)"
compiled = pytest.mark.skipif(not columns.compiled_available(), reason=NOT_BUILT)
pytestmark = compiled


@contextlib.contextmanager
def extractor(name: str):
    """``SCALETRACE_EXTRACTOR`` set to ``name`` ("python" forces the reference)."""
    old = os.environ.get(columns.ENV)
    os.environ[columns.ENV] = name
    try:
        yield
    finally:
        if old is None:
            del os.environ[columns.ENV]
        else:
            os.environ[columns.ENV] = old


def outcome(path: Path, keep_python: bool = False):
    """What ingest's worker makes of ``path``: its error line, or its meta and tables."""
    parsed = parse_file(str(path), None, DEFAULT_RULES, keep_python)
    if parsed.error is not None:
        return ("error", parsed.error)
    ext = parsed.extracted
    return ("ok", parsed.json_bytes, ext.meta, {name: table.to_pylist() for name, table in ext.tables().items()})


def both(path: Path, keep_python: bool = False):
    with extractor("python"):
        reference = outcome(path, keep_python)
    with extractor("compiled"):
        ours = outcome(path, keep_python)
    return reference, ours


def _side(side: columns.Side, vocab: columns.Vocab) -> dict:
    """A side's rows as values (the two readers number their vocabularies differently)."""
    return {
        **{n: getattr(side, n).tolist() for n in ("index", "ts", "dur", "stream", "device", "corr", "ext")},
        "cat": [vocab.cats[c] for c in side.cat.tolist()],
        "name": [vocab.names[c] for c in side.name.tolist()],
        "pid": [(type(v), v) for v in (vocab.ids[c] for c in side.pid.tolist())],
        "tid": [(type(v), v) for v in (vocab.ids[c] for c in side.tid.tolist())],
        "args": {p: msgspec.json.encode(a) for p, a in side.args.items()},
        "shapes": side.shapes,
    }


def stage1(data: bytes, keep_python: bool = False):
    """Both readers' stage-1 columns of ``data`` (JSON), or None when the scanner refuses it."""
    classifier = Classifier()
    gpu_trace = classifier.device_scan.search(data) is not None
    scanned = columns.scan(data)
    if scanned is None:
        return None
    kept = read(scanned, classifier, keep_python, gpu_trace)
    reference = read(decode(data), classifier, keep_python, gpu_trace)
    return [(_side(k.dev, k.vocab), _side(k.cpu, k.vocab), k.num_events) for k in (reference, kept)]


def real_traces() -> list:
    if not SHARED_TRACES.is_dir():
        return shared_runs()  # one skipped case that says why
    return sorted(str(p.relative_to(SHARED_TRACES)) for p in SHARED_TRACES.glob("*/*.json*"))


# The one shared trace the scanner refuses: 16 of its events write `args.stream` as a string,
# which the reference reads with int() (so "7" is 7); the scanner leaves that to it.
FALLS_BACK = {"hta-mi250-rocm/trace.json.gz"}


@pytest.mark.parametrize("name", real_traces())
def test_real_traces_identical(name):
    path = SHARED_TRACES / name
    reference, ours = both(path)
    assert reference[0] == "ok" and ours == reference
    data = unpack(path.read_bytes())
    found = stage1(data)
    assert (found is None) == (name in FALLS_BACK)
    if found:
        assert found[0] == found[1]


def fixture_traces() -> list:
    """Every trace file under fixtures/ (not the run manifests and step logs beside them)."""
    return sorted(str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("*.json*")
                  if p.name != "run.json" and not p.name.endswith(".jsonl"))


@pytest.mark.parametrize("name", fixture_traces())
@pytest.mark.parametrize("keep_python", [False, True])
def test_fixture_traces_identical(name, keep_python):
    path = FIXTURES / name
    reference, ours = both(path, keep_python)
    assert ours == reference
    data = unpack(path.read_bytes())
    found = stage1(data, keep_python)
    assert found is not None or data.lstrip()[:1] == b"["  # only the 2021 bare-array form is left to the reference
    assert found is None or found[0] == found[1]


def bad_inputs() -> dict:
    from test_bad_input import BAD_FILES, _raw_event
    cases = {name: make for name, (make, _, _) in BAD_FILES.items()}
    cases.update({  # what only the scanner has to decide: each must give the reference's outcome
        "bare array": lambda: b'[{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2}]',
        "ts as a numeric string": lambda: _raw_event(ts='"12.5"'),
        "ts with an exponent": lambda: _raw_event(ts="1.5e3"),
        "duplicate ts": lambda: b'{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1, "ts": 2, "dur": 1}]}',
        "stream as a string": lambda: b'{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1, "dur": 1,'
                                      b' "args": {"stream": "7"}}]}',
        "stream -2**63": lambda: b'{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1, "dur": 1,'
                                 b' "args": {"stream": -9223372036854775808}}]}',
        "trailing garbage": lambda: b'{"traceEvents": []} x',
        "bad literal in an unused field": lambda: b'{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1,'
                                                  b' "dur": 1, "x": tru}]}',
        "leading zero": lambda: _raw_event(ts="012"),
        "ns beyond int64": lambda: _raw_event(ts="9223372036854775.808"),
        "ns at int64 max": lambda: _raw_event(ts="9223372036854775.807"),
        "negative ts": lambda: _raw_event(ts="-5.9999"),
        "escaped keys and names": lambda: (b'{"traceEvents": [{"p\\u0068": "X", "cat": "k\\u0065rnel", '
                                           b'"name": "a\\"b\\u00e9\\ud83d\\ude00", "ts": 1, "dur": 1}]}'),
        "lone surrogate": lambda: b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "\\ud800", "ts": 1,'
                                  b' "dur": 1}]}',
        "raw control character": lambda: b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "a\tb", "ts": 1,'
                                         b' "dur": 1}]}',
        "no traceEvents": lambda: b'{"traceEvents": null}',
        "valid UTF-8": lambda: b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "\xe2\x82\xac\xf0\x9f\x98\x80",'
                               b' "ts": 1, "dur": 1}]}',
    })
    # text that is not UTF-8 (the scanner leaves the check to simdjson; the reference names the byte)
    for label, bad in (("0xff", b"\xff"), ("surrogate", b"\xed\xa0\x80"), ("overlong", b"\xc0\xaf"),
                       ("cut sequence", b"\xe2\x82"), ("beyond U+10FFFF", b"\xf4\x90\x80\x80")):
        good = b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k%s", "ts": 1, "dur": 1}], "x": "%s"}'
        cases[f"not UTF-8 in a name: {label}"] = lambda bad=bad: good % (bad, b"")
        cases[f"not UTF-8 in an unused field: {label}"] = lambda bad=bad: good % (b"", bad)
    return cases


BAD = bad_inputs()


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_inputs_identical(case, tmp_path):
    path = tmp_path / "rank5.json"
    path.write_bytes(BAD[case]())
    reference, ours = both(path)
    assert ours == reference
    if reference[0] == "ok":
        found = stage1(unpack(path.read_bytes()))
        assert found is None or found[0] == found[1]
        if case in ("escaped keys and names", "negative ts", "ns at int64 max", "valid UTF-8"):
            assert found is not None  # read by the scanner, not left to the reference


# -- Hypothesis: generated traces, written as JSON text so that odd spellings reach the scanner ------

def _text(value) -> str:
    return json.dumps(value)


def mostly(plain, odd):
    """``plain`` 39 times in 40, else ``odd``: the scanner refuses a whole file for one odd value,
    so odd values must be rare for the scanner to read (and be compared on) most traces."""
    return st.integers(0, 39).flatmap(lambda k: odd if k == 17 else plain)  # (Hypothesis favours 0 and 39)


plain_numbers = st.one_of(
    st.integers(0, 10**17).map(str),
    st.tuples(st.integers(0, 10**16), st.text("0123456789", min_size=1, max_size=6)).map(lambda t: f"{t[0]}.{t[1]}"))
numbers = mostly(plain_numbers, st.sampled_from(
    ["-0", "0.0", "-0.0004", "1e3", "1.5E-2", '"7"', "null", "true", "-12.5", "92233720368547758.07",
     "-3", "0.9999", "00", "9223372036854775.807"]))
plain_ints = st.integers(-5, 2**40).map(str)
ints = mostly(plain_ints, st.one_of(st.integers(-2**64, 2**64).map(str),
                                    st.sampled_from(['"3"', "null", "1.0", '"x"', "-9223372036854775808"])))
plain_strings = st.one_of(
    st.sampled_from(["kernel", "Kernel", "cuda_runtime", "cpu_op", "python_function", "gpu_user_annotation", "trace",
                     "gpu_memcpy", "Memset", "cuda_driver", "user_annotation", "cuda_sync"]),
    st.sampled_from(["ProfilerStep#3", "ProfilerStep#12", "ncclKernel_AllReduce_RING", "nccl:all_reduce",
                     "record_param_comms", "aten::mm", "aten::addmm", "gemm", "cudaLaunchKernel", "gloo:all_reduce",
                     "c10d::allreduce_", "Memcpy HtoD", "", "ProfilerStep#", "Stream Wait Event"]),
    st.text(max_size=6)).map(_text)
strings = mostly(plain_strings, st.sampled_from(["null", "5", '"\\u006bernel"', '"caf\\u00e9"', '"a\\"b"']))
pids = mostly(st.integers(0, 5).map(str), st.sampled_from(['"Spans"', "null", '"7"', "1.5", "-1"]))

ARG_KINDS = {"correlation": ints, "stream": ints, "device": ints, "External id": ints, "external id": ints,
             "In msg nelems": ints,
             "Out msg nelems": ints, "Group size": ints, "Seq": ints,
             "Process Group Name": mostly(st.sampled_from(['"0"', '"12"', "3"]), ints),
             "Collective name": mostly(st.sampled_from(['"allreduce"', '"all_gather"', "null"]), strings),
             "dtype": strings, "Process Group Description": strings,
             "Input Dims": st.sampled_from(["[[1, 2], [3]]", "[]", "null", '[[4,4],[4, 4]]']),
             "Input type": st.sampled_from(['["float", "float"]', '[""]', "{}"]),
             "Concrete Inputs": st.sampled_from(['["", "1"]', "[]"]),
             "wait_on_stream": ints, "wait_on_cuda_event_record_corr_id": ints,
             "other": st.sampled_from(["[1, {}]", '"x"', "true", "null", "1.5e300"])}
arg_pair = st.sampled_from(sorted(ARG_KINDS)).flatmap(lambda k: st.tuples(st.just(k), ARG_KINDS[k]))
args = mostly(st.lists(arg_pair, max_size=5).map(
    lambda kv: "{" + ", ".join(f"{_text(k)}: {v}" for k, v in kv) + "}"), st.sampled_from(["null", "[]"]))

event_keys = st.sampled_from(["ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "s"])


phases = mostly(st.sampled_from(['"X"', '"X"', '"X"', '"i"', '"M"', '"f"']), st.sampled_from(["null", "1"]))


@st.composite
def events(draw) -> str:
    fields = {"ph": draw(phases),
              "cat": draw(strings), "name": draw(strings), "pid": draw(pids), "tid": draw(pids),
              "ts": draw(numbers), "dur": draw(numbers), "args": draw(args)}
    keys = [k for k in fields if draw(st.integers(0, 29)) != 17]  # mostly all present
    pairs = [(k, fields[k]) for k in keys]
    if draw(st.integers(0, 39)) == 17:  # now and then a duplicate or an extra key
        pairs.append((draw(event_keys), draw(numbers)))
    return "{" + ", ".join(f"{_text(k)}: {v}" for k, v in pairs) + "}"


@st.composite
def traces(draw) -> bytes:
    body = ", ".join(draw(st.lists(events(), max_size=8)))
    header = draw(st.sampled_from([
        "", ', "distributedInfo": {"rank": 1, "world_size": 2, "backend": "nccl"}',
        ', "deviceProperties": [{"name": "H100"}, {"name": null}]', ', "baseTimeNanoseconds": 17',
        ', "host_name": "h\\u00f6st"', ', "distributedInfo": null', ', "distributedInfo": {"rank": "1"}',
        ', "deviceProperties": [{"name": ""}, {"name": "B200"}]']))
    text = ('{"traceEvents": [' + body + "]" + header + "}").encode()
    cut = draw(st.integers(0, 60))  # now and then a byte-level mutation
    if cut == 17 and text:
        text = text[:draw(st.integers(0, len(text) - 1))]
    elif cut == 18:
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from([b",", b"}", b"]", b'"', b"\\", b"0", b"\xff", b"\xed\xa0\x80",
                                                        b"\xc0\xaf", b"\xe2\x82", b"\x01"])) + text[at:]
    return text


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("diff") / "rank3.json"


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=traces(), keep_python=st.booleans())
def test_generated_traces_identical(data, keep_python, scratch):
    scratch.write_bytes(data)
    reference, ours = both(scratch, keep_python)
    assert ours == reference
    if reference[0] == "ok":
        found = stage1(data, keep_python)
        assert found is None or found[0] == found[1]


# -- the scanner's answers to ingest's two byte pre-scans (ingest.prescans) -------------------------
# The definition is the pair of byte regexes (FRACTIONAL_TS, Classifier.device_scan) over the raw JSON;
# the scanner answers from the keys as it reads them.  Keys and values are drawn as written, escapes
# and spacing included: a key that ends in an escaped quote and "ts" matches the regex, one that
# spells "ts" with an escape does not, whatever it decodes to.

PRESCAN_KEYS = ["ts", "cat", "TS", "Cat", 'x\\"ts', 'x\\"cat', "\\u0074s", "c\\u0061t", "its", "cats", "t s",
                'ts\\"', "a\\\\", "name", "args"]
PRESCAN_VALUES = ["1", "1.5", "-2.25", "0.0", "17", "-0.5", "1e3", "1.5E3", '"1.5"', '"kernel"', '"KERNEL"',
                  '"k\\u0065rnel"', '"kernel "', '"memcpy"', '"Memset"', '"cuda_sync"', '"cpu_op"', '""', "null",
                  "true", "[1.5, 2]", '["kernel"]']
SPACES = [":", ": ", " : ", "\t:\n", "\r\n:  "]


def _prescan_objects(value) -> st.SearchStrategy[str]:
    pairs = st.lists(st.tuples(st.sampled_from(PRESCAN_KEYS), st.sampled_from(SPACES), value), max_size=4,
                     unique_by=lambda p: p[0])
    return pairs.map(lambda ps: "{" + ", ".join(f'"{k}"{sep}{v}' for k, sep, v in ps) + "}")


# Objects nested up to three deep, built once: a strategy built inside each draw is validated anew
# each time, most of an example's cost.
_prescan_values = st.sampled_from(PRESCAN_VALUES)
prescan_objects = _prescan_objects(st.one_of(_prescan_values, _prescan_objects(
    st.one_of(_prescan_values, _prescan_objects(_prescan_values)))))
_prescan_cats = st.sampled_from(['"kernel"', '"Kernel"', '"cpu_op"', '"k\\u0065rnel"', '"gpu_memcpy"', "null",
                                 '"cuda_runtime"'])
_prescan_ts = st.sampled_from(["1", "2.5", "-3.125", "40", "0"])
_spaces = st.sampled_from(SPACES)


@st.composite
def prescan_traces(draw) -> bytes:
    events = []
    for _ in range(draw(st.integers(0, 4))):
        cat, ts, sep = draw(_prescan_cats), draw(_prescan_ts), draw(_spaces)
        events.append(f'{{"ph": "X", "cat"{sep}{cat}, "name": "n", "ts"{sep}{ts}, "dur": 1, '
                      f'"args": {draw(prescan_objects)}}}')
    extra = draw(st.sampled_from(["", ', "other": ' + draw(prescan_objects),
                                  ', "distributedInfo": {"rank": 0, "ts": 2.5}']))
    return ('{"traceEvents": [' + ", ".join(events) + "]" + extra + "}").encode()


def regex_prescans(data: bytes, classifier: Classifier) -> tuple[bool, bool]:
    return FRACTIONAL_TS.search(data) is not None, classifier.device_scan.search(data) is not None


@settings(max_examples=400, deadline=None, derandomize=True)
@given(data=prescan_traces())
def test_the_scanners_prescans_are_the_byte_searches(data):
    classifier = Classifier()
    scanned = columns.scan(data, device_categories=classifier.device_categories)
    assert scanned is not None  # every drawn value is one the scanner reads
    assert scanned.prescans == regex_prescans(data, classifier)


@pytest.mark.parametrize("text, expected", [
    ('{"traceEvents": [], "x": {"a\\"ts": 1.5}}', (True, False)),  # a key ending in an escaped quote and ts
    ('{"traceEvents": [], "x": {"\\u0074s": 1.5}}', (False, False)),  # decodes to "ts", but not so written
    ('{"traceEvents": [{"ph": "i", "cat": "KERNEL", "ts": 1}]}', (False, True)),  # any event, any ASCII case
    ('{"traceEvents": [{"ph": "X", "cat": "k\\u0065rnel", "name": "k", "ts": 1, "dur": 1}]}', (False, False)),
    ('{"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": 1, "args": {"cat" :\t"memset", "ts": "1.5"}}]}',
     (False, True)),
    ('{"traceEvents": [{"ph": "X", "name": "k", "ts": -0.5, "dur": 1}]}', (True, False)),
])
def test_prescan_cases(text, expected):
    classifier = Classifier()
    data = text.encode()
    assert regex_prescans(data, classifier) == expected  # the definition, on the case
    assert columns.scan(data, device_categories=classifier.device_categories).prescans == expected


def test_a_build_of_another_interface_is_not_used():
    assert columns.usable(columns._scan)  # this build is this source's
    assert not columns.usable(type("OlderBuild", (), {})) and not columns.usable(type("B", (), {"INTERFACE": 2}))


def test_prescans_follow_the_rules_device_categories():
    data = b'{"traceEvents": [{"ph": "X", "cat": "MyAccel", "name": "k", "ts": 1, "dur": 1}]}'
    assert columns.scan(data, device_categories={"myaccel"}).prescans == (False, True)
    assert columns.scan(data, device_categories={"kernel"}).prescans == (False, False)


def test_the_scanner_reads_generated_traces_too():
    """The fuzzing above proves something only where the scanner accepts the input: a plain
    generated trace is scanned, not refused."""
    data = json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1.5, "dur": 2,
         "args": {"stream": 7, "correlation": 3}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 1, "dur": 1,
         "args": {"correlation": 3}}]}).encode()
    assert columns.scan(data) is not None
    found = stage1(data)
    assert found[0] == found[1]


def test_the_scanner_reads_sync_waits(tmp_path):
    """A Kineto CUDA sync event's wait (``wait_on_stream``, ``wait_on_cuda_event_record_corr_id``)
    is read by the scanner, not left to the reference, and stored as the reference stores it."""
    sync = {"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": 20, "ts": 3, "dur": 0,
            "args": {"device": 0, "stream": 20, "correlation": 9, "wait_on_stream": 7,
                     "wait_on_cuda_event_record_corr_id": 5, "wait_on_cuda_event_id": 2}}
    kernel = {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1, "dur": 2,
              "args": {"stream": 7, "correlation": 4}}
    data = json.dumps({"traceEvents": [kernel, sync]}).encode()
    assert columns.scan(data) is not None
    found = stage1(data)
    assert found[0] == found[1]
    path = tmp_path / "rank0.json"
    path.write_bytes(data)
    reference, ours = both(path)
    assert ours == reference
    rows = {r["name"]: (r["wait_stream"], r["wait_event_corr"]) for r in ours[3]["device_events"]}
    assert rows == {"gemm": (None, None), "Stream Wait Event": (7, 5)}


def test_forcing_the_reference(monkeypatch):
    monkeypatch.setenv(columns.ENV, "python")
    assert columns.active_extractor() == "python (msgspec)"
    assert type(scan_or_decode(b'{"traceEvents": []}')).__name__ == "TraceDoc"
    monkeypatch.delenv(columns.ENV)
    assert columns.active_extractor().startswith("compiled (simdjson ")
    assert isinstance(scan_or_decode(b'{"traceEvents": []}'), columns.Scanned)
