"""The CLI as a new user meets it ("CLI and README, as found"): examples
that run as written, typed parameters, one SQL statement, empty results that
explain themselves, narrow views of wide tables, plurals, aligned columns."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner

from scaletrace import queries
from conftest import FIXTURES, ROOT
from scaletrace.pipeline import connect, ingest
from scaletrace.cli import main

README = (ROOT / "README.md").read_text()
# what a user reads: the README and the documentation site's pages
DOCS = "\n".join([README, *(p.read_text() for p in sorted((ROOT / "docs").rglob("*.md")))])
FIXTURE_RUNS = ("micro-2021", "micro-2rank", "micro-cpu-gloo")


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_error_line(result) -> str:
    """The user-mistake contract: exit 1, one `error: ...` line on stderr, no traceback."""
    assert result.exit_code == 1, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


# --- examples in README and --help -------------------------------------------------------

def _examples(verbs=("sql", "query")) -> list[str]:
    """`scaletrace sql|query ...` lines of the README's and the docs' code blocks and of the verbs' --help."""
    texts = [DOCS] + [invoke(verb, "-h").output for verb in verbs]
    texts = [re.sub(r"\\\n\s*", " ", text) for text in texts]  # a shell line continued with a backslash
    pattern = re.compile(rf"^\s*(scaletrace (?:{'|'.join(verbs)}) .*)$", re.M)
    return [m.group(1) for text in texts for m in pattern.finditer(text)]


def _argv(line: str) -> list[str]:
    return shlex.split(line, comments=True)[1:]  # without "scaletrace"


def test_readme_does_not_send_the_reader_to_a_missing_design_md():
    assert "DESIGN.md" not in DOCS and not (ROOT / "DESIGN.md").exists()


def test_every_sql_and_query_example_names_its_database():
    examples = _examples()
    assert sum(line.startswith("scaletrace sql") for line in examples) >= 4  # README + help
    lacking = [line for line in examples
               if "--db" not in _argv(line) and not {"--list", "--show"} & set(_argv(line))]
    assert not lacking, lacking


@pytest.fixture(scope="module")
def demo_cwd(tmp_path_factory):
    """A directory holding `demo.duckdb` as `make demo` leaves it: the recorded demo
    sweep (fixtures/demo-sweep) under the run ids and workload the demo sweep gives."""
    cwd = tmp_path_factory.mktemp("demo")
    runs = shutil.copytree(FIXTURES / "demo-sweep", cwd / "runs", ignore=shutil.ignore_patterns("README.md"))
    for manifest in runs.glob("*/run.json"):
        data = json.loads(manifest.read_text())
        data.update(run_id=f"demo-gpt-{manifest.parent.name}", workload="demo-gpt")
        manifest.write_text(json.dumps(data))
    report = ingest([runs], db=cwd / "demo.duckdb", workers=1)
    assert not report.errors, [o.line() for o in report.errors]
    return cwd


def test_demo_database_examples_run_as_written(demo_cwd, monkeypatch):
    monkeypatch.chdir(demo_cwd)
    examples = [line for line in _examples() if "demo.duckdb" in _argv(line)]
    assert any(line.startswith("scaletrace sql") for line in examples)
    assert any("--columns" in line for line in examples) and any("line" in _argv(line) for line in examples)
    for line in examples:
        result = CliRunner().invoke(main, _argv(line))
        assert result.exit_code == 0, (line, result.stderr)
        assert result.stdout.strip(), line


# --- typed parameters ----------------------------------------------------------------------

def test_parameter_of_the_wrong_type_names_the_parameter_and_the_type(fixtures_db):
    line = one_error_line(invoke("query", "layouts", "--db", fixtures_db, "-p", "world_size", "four"))
    assert "world_size" in line and "integer" in line and "'four'" in line
    assert "Conversion Error" not in line  # DuckDB's words are not the user's


def test_typed_parameters_are_converted_from_cli_strings(fixtures_db):
    q = queries.load("layouts")
    assert q.params["world_size"].type == "BIGINT" and queries.bind(q, {"world_size": "4"}) == {"world_size": 4}
    assert invoke("query", "layouts", "--db", fixtures_db, "-p", "world_size", "4").exit_code == 0
    with pytest.raises(queries.QueryError, match="run_id .* wants a string"):
        queries.bind(queries.load("rank_breakdown"), {"run_id": 3})


def test_query_loader_refuses_a_parameter_without_a_type(tmp_path):
    bad = tmp_path / "untyped.sql"
    bad.write_text("-- name: untyped\n-- description: a parameter declared without a type\n"
                   "-- param: run_id  optional; only this run\nSELECT * FROM runs WHERE run_id = $run_id\n")
    with pytest.raises(queries.QueryError, match="run_id.*needs a type"):
        queries.parse(bad.read_text(), bad)


@pytest.mark.parametrize("name", queries.names())
def test_every_query_parameter_has_a_known_type(name):
    assert all(p.type in queries.PARAM_TYPES for p in queries.load(name).params.values())


# --- one SQL statement ---------------------------------------------------------------------

def test_sql_refuses_several_statements(fixtures_db):
    line = one_error_line(invoke("sql", "SELECT 1 AS a; SELECT 2 AS b", "--db", fixtures_db))
    assert "one SQL statement" in line and "got 2" in line
    single = invoke("sql", "SELECT 1 AS a;", "--db", fixtures_db, "--format", "csv")
    assert single.exit_code == 0 and single.output == "a\n1\n"
    assert "got 0" in one_error_line(invoke("sql", " ; ", "--db", fixtures_db))


# --- empty results explain themselves ------------------------------------------------------

def test_unknown_run_id_is_an_error_listing_the_known_runs(fixtures_db):
    line = one_error_line(invoke("query", "rank_breakdown", "--db", fixtures_db, "-p", "run_id", "nosuchrun"))
    assert "no run 'nosuchrun'" in line and all(run in line for run in FIXTURE_RUNS)
    with connect(fixtures_db) as db, pytest.raises(queries.QueryError, match="no run 'nosuchrun'"):
        db.query("rank_breakdown", run_id="nosuchrun")  # the Python API says the same


def test_unknown_workload_is_an_error_listing_the_known_ones(fixtures_db):
    line = one_error_line(invoke("query", "scaling", "--db", fixtures_db, "-p", "workload", "nosuch"))
    assert "'nosuch'" in line and "known workloads: micro" in line


@pytest.mark.parametrize("name", ["hta_temporal_breakdown", "hta_comm_comp_overlap"])
def test_hta_queries_say_cpu_only_runs_have_no_rows(fixtures_db, name):
    cpu = invoke("query", name, "--db", fixtures_db, "-p", "run_id", "micro-cpu-gloo", "--format", "json")
    assert cpu.exit_code == 0 and json.loads(cpu.stdout) == []  # the rows stay empty
    assert cpu.stderr.startswith("note: micro-cpu-gloo: ") and "needs GPU events" in cpu.stderr
    every = invoke("query", name, "--db", fixtures_db, "--format", "json")
    assert {r["run_id"] for r in json.loads(every.stdout)} == {"micro-2021", "micro-2rank"}
    assert "note: micro-cpu-gloo: " in every.stderr and "micro-2rank" not in every.stderr
    gpu = invoke("query", name, "--db", fixtures_db, "-p", "run_id", "micro-2rank")
    assert gpu.exit_code == 0 and gpu.stderr == ""


def test_breakdown_on_a_cpu_run_has_no_note(fixtures_db):
    result = invoke("query", "rank_breakdown", "--db", fixtures_db, "-p", "run_id", "micro-cpu-gloo")
    assert result.exit_code == 0 and result.stderr == ""


def test_failed_first_ingest_says_the_database_is_empty(tmp_path):
    bad = tmp_path / "run" / "rank0.json"
    bad.parent.mkdir()
    bad.write_text('{"traceEvents": [')
    db = tmp_path / "new.duckdb"
    result = invoke("ingest", tmp_path / "run", "--db", db, "-q")
    assert result.exit_code == 1
    assert f"{db} holds no traces: nothing could be ingested" in result.stderr
    empty = invoke("query", "rank_breakdown", "--db", db)
    assert empty.exit_code == 0 and f"note: {db} holds no traces" in empty.stderr
    assert "it holds no runs" in one_error_line(invoke("query", "rank_breakdown", "--db", db, "-p", "run_id", "x"))


def test_ingest_into_a_database_with_traces_does_not_call_it_empty(fixtures_db, tmp_path):
    bad = tmp_path / "run" / "rank0.json"
    bad.parent.mkdir()
    bad.write_text("")
    db = tmp_path / "copy.duckdb"
    shutil.copy(fixtures_db, db)
    result = invoke("ingest", tmp_path / "run", "--db", db, "-q")
    assert result.exit_code == 1 and "holds no traces" not in result.stderr


# --- wide tables ----------------------------------------------------------------------------

@pytest.mark.parametrize("what, known", [
    (["query", "rank_breakdown"], "run_id, rank, span_ns, busy_ns"),
    (["sql", "SELECT run_id, rank, trace_mode, idle_ns FROM traces, (SELECT 5 AS idle_ns)"],
     "run_id, rank, trace_mode, idle_ns"),
])
def test_columns_selects_in_the_order_given(fixtures_db, what, known):
    result = invoke(*what, "--db", fixtures_db, "--columns", "idle_ns, run_id", "--format", "csv")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[0] == "idle_ns,run_id" and len(result.stdout.splitlines()) > 2
    line = one_error_line(invoke(*what, "--db", fixtures_db, "--columns", "run_id,bogus"))
    assert "no column bogus" in line and known in line


def test_format_line_prints_one_column_per_line_and_a_blank_line_between_rows(fixtures_db):
    args = ["query", "rank_breakdown", "--db", fixtures_db, "-p", "run_id", "micro-2rank"]
    rows = json.loads(invoke(*args, "--format", "json").stdout)
    result = invoke(*args, "--format", "line")
    assert result.exit_code == 0
    blocks = result.stdout.rstrip("\n").split("\n\n")
    assert len(blocks) == len(rows) == 2
    for block, row in zip(blocks, rows):
        pairs = [ln.split(":", 1) for ln in block.splitlines()]
        assert [k for k, _ in pairs] == list(row)  # every column, in order
        assert {k: v.strip() for k, v in pairs}["rank"] == str(row["rank"])
    narrow = invoke(*args, "--format", "line", "--columns", "rank,run_id").stdout
    assert narrow == "rank:   0\nrun_id: micro-2rank\n\nrank:   1\nrun_id: micro-2rank\n"


def test_format_line_of_an_empty_result_prints_nothing(fixtures_db):
    result = invoke("sql", "SELECT * FROM runs WHERE false", "--db", fixtures_db, "--format", "line")
    assert result.exit_code == 0 and result.stdout == ""


# --- plurals and aligned columns ------------------------------------------------------------

def test_synth_says_1_rank_and_1_step(tmp_path):
    result = invoke("synth", tmp_path / "s", "--ranks", "1", "--steps", "1", "--no-gzip")
    assert result.exit_code == 0 and result.stderr.strip().endswith(": 1 rank × 1 step"), result.stderr
    more = invoke("synth", tmp_path / "m", "--ranks", "2", "--steps", "3", "--no-gzip")
    assert more.stderr.strip().endswith(": 2 ranks × 3 steps")


def test_cpu_device_name_says_1_thread_per_rank(monkeypatch):
    torch = pytest.importorskip("torch")
    from scaletrace.collectors import environment

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        monkeypatch.setattr(os, "cpu_count", lambda: 1)
        assert environment.device_facts()["device"] == "CPU (1 core, 1 thread per rank)"
        torch.set_num_threads(2)
        monkeypatch.setattr(os, "cpu_count", lambda: 4)
        assert environment.device_facts()["device"] == "CPU (4 cores, 2 threads per rank)"
    finally:
        torch.set_num_threads(threads)


SWEEP = """
workload = "w"
out_dir = "runs"
run_id = "{workload}-{name}-{code}"
launcher = []
command = ["python", "-c", "import sys; sys.exit({code})"]
[matrix]
name = ["a", "a-much-longer-name"]
code = [0, 3]
"""


def test_sweep_dry_run_starts_every_command_in_one_column(tmp_path):
    (tmp_path / "s.toml").write_text(SWEEP)
    lines = invoke("sweep", tmp_path / "s.toml", "--dry-run").stdout.splitlines()
    assert len(lines) == 4 and lines[0].startswith("w-a-0: ")
    assert len({line.index(" python ") for line in lines}) == 1, lines


def test_sweep_progress_lines_keep_their_columns(tmp_path):
    (tmp_path / "s.toml").write_text(SWEEP)
    result = invoke("sweep", tmp_path / "s.toml")
    assert result.exit_code == 1  # the two runs with code 3 fail
    lines = [ln for ln in result.stderr.splitlines() if re.search(r"\d s\b", ln)]
    assert len(lines) == 4, result.stderr
    assert len({ln.index(" s ") if " s " in ln else ln.rindex(" s") for ln in lines}) == 1, lines
    assert len({ln.index("w-") for ln in lines}) == 1, lines


# --- the skip reason where the shared traces are absent -------------------------------------

def test_shared_trace_tests_skip_with_the_real_reason(tmp_path):
    missing = tmp_path / "no-such-shared" / "traces"
    env = {**os.environ, "SCALETRACE_SHARED_TRACES": str(missing)}
    run = subprocess.run([sys.executable, "-m", "pytest", "-rs", "-q", "-p", "no:cacheprovider",
                          "tests/test_hta_conformance.py"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert f"real traces not present at {missing}" in out
    assert "empty parameter set" not in out


def test_version_and_ingest_v_say_which_extractor(monkeypatch, tmp_path):
    from scaletrace.pipeline.read import columns
    from scaletrace.pipeline.common import limits

    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert f"extractor: {columns.active_extractor()}" in result.output
    assert f"gunzip: {limits.GZIP_DECODER}" in result.output
    monkeypatch.setenv("SCALETRACE_EXTRACTOR", "python")
    assert "extractor: python (msgspec)" in CliRunner().invoke(main, ["--version"]).output
    result = CliRunner().invoke(main, ["ingest", str(FIXTURES / "micro-2rank"), "--db", str(tmp_path / "t.duckdb"), "-v"])
    assert result.exit_code == 0 and "extractor: python (msgspec)" in result.stderr
