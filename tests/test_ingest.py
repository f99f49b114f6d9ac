"""Ingest behaviour: idempotency, replacement, ranks, forms, collectives, the query loader."""

from __future__ import annotations

import json
import shutil

import pytest

from scaletrace import queries
from conftest import FIXTURES, cpu, kernel, query, write_trace
from scaletrace.pipeline import connect, ingest


def counts(db):
    with connect(db) as d:
        return d.sql("SELECT (SELECT count(*) FROM traces) AS t, (SELECT count(*) FROM device_events) AS e, "
                     "(SELECT count(*) FROM collectives) AS c, (SELECT count(*) FROM steps) AS s").row(0)


def test_same_files_twice_change_nothing_and_changed_file_replaces(tmp_path):
    run = tmp_path / "micro-2rank"
    shutil.copytree(FIXTURES / "micro-2rank", run)
    db = tmp_path / "t.duckdb"
    first = ingest([run], db=db)
    assert [o.status for o in first.outcomes] == ["ok", "ok"]
    before = counts(db)
    again = ingest([run], db=db)
    assert [o.status for o in again.outcomes] == ["unchanged", "unchanged"]
    assert counts(db) == before
    doc = json.loads((run / "rank1.json").read_text())
    doc["traceEvents"].append(kernel("extra_kernel", 300, 10))
    (run / "rank1.json").write_text(json.dumps(doc))
    changed = ingest([run], db=db)
    assert [o.status for o in changed.outcomes] == ["unchanged", "ok"]
    assert counts(db)[1] == before[1] + 1  # one more device event, no duplicates


def test_gzip_object_and_bare_array_forms_agree(tmp_path):
    events = [kernel("gemm", 0, 100), kernel("ncclKernel_AllReduce", 50, 100, stream=20)]
    write_trace(tmp_path / "a" / "rank0.json.gz", events, rank=0, gz=True)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "rank0.json").write_text(json.dumps(events))
    db = tmp_path / "t.duckdb"
    assert not ingest([tmp_path / "a", tmp_path / "b"], db=db).errors
    df = query(db, "rank_breakdown").drop("run_id")
    assert df.row(0) == df.row(1)


def test_single_rankless_trace_is_rank_0_with_a_note(tmp_path):
    write_trace(tmp_path / "solo" / "trace.json", [kernel("gemm", 0, 10)])
    report = ingest([tmp_path / "solo"], db=tmp_path / "t.duckdb")
    assert report.outcomes[0].rank == 0 and "a run of one trace is rank 0" in report.outcomes[0].message


def test_rank_from_manifest_then_file_name(tmp_path):
    run = tmp_path / "run"
    write_trace(run / "worker-a.json", [kernel("gemm", 0, 10)])
    write_trace(run / "node1_rank_3.json", [kernel("gemm", 0, 10)])
    (run / "run.json").write_text(json.dumps({"ranks": {"worker-a.json": 5}}))
    report = ingest([run], db=tmp_path / "t.duckdb", workers=1)
    assert sorted(o.rank for o in report.outcomes) == [3, 5]


def test_collective_metadata_sources(fixtures_db):
    with connect(fixtures_db) as d:
        rows = d.sql("SELECT rank, collective, pg_name, group_size, dtype, in_nelems, meta_source "
                     "FROM collectives WHERE run_id = 'micro-2rank' ORDER BY rank, event_id").rows()
    assert rows == [
        (0, "all_reduce", "0", 2, "BFloat16", 4096, "kernel_args"),  # NCCL kernel args
        (0, "all_reduce", "0", 2, "Float", 1024, "cpu_op"),  # ncclDevKernel_Generic: record_param_comms
        (1, "all_reduce", None, None, None, None, "kernel_name"),  # ncclKernel_AllReduce_...
    ]


def test_python_functions_skipped_unless_kept(tmp_path):
    events = [kernel("gemm", 0, 10), cpu("ProfilerStep#1", 0, 50, cat="user_annotation"),
              cpu("train.py(10): step", 0, 40, cat="python_function")]
    write_trace(tmp_path / "run" / "rank0.json", events, rank=0)
    for keep, expected in ((False, 0), (True, 1)):
        db = tmp_path / f"{keep}.duckdb"
        ingest([tmp_path / "run"], db=db, keep_python=keep)
        with connect(db) as d:
            assert d.sql("SELECT count(*) FROM cpu_events WHERE cat = 'python_function'").item() == expected


def test_query_loader_refuses_undeclared_parameters(tmp_path):
    bad = tmp_path / "bad_query.sql"
    bad.write_text("-- name: bad_query\n-- description: uses a parameter it does not declare\n"
                   "SELECT * FROM traces WHERE run_id = $run_id\n")
    with pytest.raises(queries.QueryError, match="differ"):
        queries.parse(bad.read_text(), bad)


UNIT_SUFFIXES = ("_ns", "_us", "_pct", "_bytes", "_gbps", "_j", "_per_s", "_per_s_per_gpu", "_ratio", "_tflops",
                 "_gpu_ns_per_token", "_pts")
# Identifiers, labels, counts and named quantities whose unit is in the name or the header.
UNITLESS = {"run_id", "rank", "step", "pg_name", "pg_desc", "collective", "seq", "seq_source",
            "group_size", "dtype", "bw_null_reason", "meta_source", "kernel", "count", "num_ranks",
            "workload", "sweep", "scaling", "world_size", "num_nodes", "dp", "tp", "pp", "cp",
            "ranks_traced", "num_steps", "step_time_source", "tokens_per_step", "flops_per_token", "device_name",
            "peak_flops_per_gpu", "peak_flops_source", "null_reasons", "baseline_run", "speedup",
            "straggler_rank", "types_agree", "collectives_seen", "num_collectives", "straggler_count",
            "layout", "strategy", "layouts_at_size", "rank_by_tokens_per_s", "warnings", "peak_flops_dtype",
            "peak_flops_basis", "process_group",
            # idle and op efficiency (flops: a FLOP count)
            "stream", "idle_category", "family", "pass", "name", "input_dims", "num_ops",
            # kernel_summary (launches: a count of events)
            "short_name", "kind", "family_basis", "launching_op", "launches", "launches_per_step_per_gpu",
            "num_ops_without_flops", "flops",
            # scaling attribution and run_diff
            "vs", "baseline_gpus", "is_best", "is_baseline", "from_run", "to_run", "from_gpus", "to_gpus",
            "run_a", "run_b", "kind", "top_kernel", "count_per_step_a", "count_per_step_b",
            "delta_count_per_step", "gpus_per_node",
            # run_summary: where each run fact came from (run.json, --meta, inferred: run_facts)
            "world_size_basis", "parallel_basis", "tokens_per_step_basis", "flops_per_token_basis", "device_basis",
            "dtype_basis",
            # run_summary's sanity columns: FLOP counts a step (the unit is in the name)
            "model_flops_per_step", "recorded_flops_per_step",
            # run_device_share: whether the run's traces are CPU-only (its device is the traced threads)
            "cpu_only",
            # critical_path / critical_path_summary: where a segment runs, what it is part of, who costs most
            "lane", "event_id", "slowest_rank", "by_rank", "top_rank", "top_op", "top_op_kind", "top_op_rank",
            "has_sync_events", "cross_stream_basis",
            # efficiency queries: why a figure cannot be true (a % of peak above 100); run_summary's counts of
            # ProfilerSteps and trace events, how sure an inferred tokens per step is and why, whether MFU is a
            # lower bound (recorded FLOPs cover under half the matmul time)
            "warning", "profiled_steps", "trace_events", "tokens_per_step_confidence",
            "tokens_per_step_confidence_basis", "mfu_is_lower_bound",
            # hta_temporal_breakdown: whether HTA's µs rounding left an impossible figure that was clamped
            "clamped",
            # critical_path_summary: whether the step is one the steady-state step period is the median over
            "steady_state",
            # run_breakdown: the step length its ms-per-step parts are drawn on ('step_time' / 'device_period')
            "step_basis"}


@pytest.fixture(scope="module")
def empty_schema():
    """An in-memory database of the schema and the SQL definitions, no rows: each query's columns
    (set up once for the module; the tests only read it)."""
    import duckdb
    from scaletrace.pipeline.store.schema import SCHEMA_SQL
    from scaletrace.queries import definitions
    con = duckdb.connect()
    con.execute(SCHEMA_SQL.read_text())
    definitions.register(con)
    yield con
    con.close()


@pytest.mark.parametrize("name", queries.names())
def test_every_query_documents_its_grain_and_units(name, empty_schema):
    q = queries.load(name)
    assert q.grain and q.description
    odd = [c for c in _columns(empty_schema, q)
           if not c.endswith(UNIT_SUFFIXES) and "_pct_of_" not in c and c not in UNITLESS]
    assert not odd, f"columns without a unit suffix: {odd}"


# The README's percentage convention (section "Queries"): a bare `<part>_pct` is 100 · part ÷ the
# window's span (its mean over ranks at run grain); any other denominator is named after
# `_pct_of_` (`overlap_pct_of_comm`); a named ratio whose definition fixes its denominator keeps its
# name (MFU ÷ peak FLOP/s, an efficiency ÷ the ideal).  A new bare `_pct` column joins one of these
# sets only if it is one of these things.
SPAN_SHARES = {"compute_pct", "exposed_comm_pct", "exposed_memory_pct", "other_pct", "idle_pct",
               "overlapped_comm_pct", "group_exposed_comm_pct", "from_group_exposed_comm_pct",
               "to_group_exposed_comm_pct",
               "host_wait_pct", "dependency_wait_pct", "other_idle_pct", "collective_wait_pct"}
# (flops_coverage_pct: the share of GEMM / attention / convolution kernel time whose FLOPs are counted)
NAMED_RATIOS = {"mfu_pct", "scaling_efficiency_vs_sweep_baseline_pct", "from_scaling_efficiency_pct", "to_scaling_efficiency_pct",
                "flops_coverage_pct"}


@pytest.fixture(scope="module")
def fixtures_database(fixtures_db):
    """One read-only connection to the fixtures' database for the tests of every query (they only read)."""
    with connect(fixtures_db) as database:
        yield database


@pytest.mark.parametrize("name", queries.names())
def test_every_percentage_names_its_denominator_or_is_a_share_of_the_span(name, fixtures_database):
    result = fixtures_database.query(name)
    for column in [c for c in result.columns if "_pct" in c]:
        part, _, denominator = column.partition("_pct_of_")
        if not denominator:
            assert column.endswith("_pct") and column in SPAN_SHARES | NAMED_RATIOS, \
                f"{name}.{column}: a bare _pct is a share of the span or a named ratio; else say _pct_of_<what>"
            part, denominator = column.removesuffix("_pct"), "span" if column in SPAN_SHARES else ""
        _check_ratio(result, column, part, denominator)


def _check_ratio(df, column: str, part: str, whole: str) -> int:
    """Where the row carries both part and whole (same time unit), the percentage is 100 · part ÷ whole
    (to HTA's 2 decimals): on the micro fixtures, rank_breakdown, rank_step_breakdown, rank_wait,
    exposed_comm_by_group and hta_temporal_breakdown.  Returns the rows checked."""
    for unit in ("_ns", "_us"):
        if part + unit in df.columns and whole + unit in df.columns:
            rows = df.filter(df[whole + unit] > 0).select(column, part + unit, whole + unit).rows()
            for pct, p, w in rows:
                assert pct == pytest.approx(100 * p / w, abs=0.006), (column, p, w)
            return len(rows)
    return 0


def _columns(con, q):
    return con.sql(q.sql, params={p: None for p in q.params}).columns
