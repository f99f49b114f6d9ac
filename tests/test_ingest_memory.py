"""What a parsed file costs in memory on its way from the parse worker to DuckDB (docs: Robustness,
"Memory"): its tables travel packed, stay packed in the writing process until inserted, and DuckDB
does not hold an inserted table until the COMMIT."""

from __future__ import annotations

import pickle

import duckdb
import pyarrow as pa

from scaletrace.pipeline.execute.ingest import parse_file
from scaletrace.pipeline.read import arrays
from scaletrace.pipeline.read.classify import DEFAULT_RULES
from scaletrace.pipeline.store import schema, write

EVENTS = 20_000


def cpu_only_trace(path, n: int = EVENTS):
    """A CPU-only gloo trace: ``n`` gloo:all_reduce cpu_ops, each a row of three tables."""
    events = ",".join(f'{{"ph":"X","cat":"cpu_op","name":"gloo:all_reduce","pid":1,"tid":2,"ts":{1000 + 10 * i},'
                      f'"dur":5}}' for i in range(n))
    path.write_text('{"distributedInfo":{"rank":0,"world_size":1,"backend":"gloo"},"traceEvents":[' + events + "]}")
    return path


def test_a_received_file_is_its_tables_packed_and_unpacks_to_the_same_tables(tmp_path):
    parsed = parse_file(str(cpu_only_trace(tmp_path / "rank0.json")), None, DEFAULT_RULES, False)
    sent = parsed.extracted.tables()
    assert [sent[t].num_rows for t in ("device_events", "cpu_events", "collectives")] == [EVENTS] * 3
    buffers = sum(t.get_total_buffer_size() for t in sent.values())
    pickled = pickle.dumps(parsed)
    # one int64 column alone is 8 bytes a row: pickled whole, the tables were more than their buffers;
    # packed (compressed), the CPU-only tables' null and repeated columns take a fraction of them
    assert len(pickled) < buffers / 4, (len(pickled), buffers)
    received = pickle.loads(pickled).extracted
    assert all(isinstance(getattr(received, name), arrays.Packed) for name in received.TABLES)
    assert received.nbytes() == buffers
    for name, table in received.tables().items():
        assert table.schema == sent[name].schema, name
        assert table.equals(sent[name]), name
    assert received.meta == parsed.extracted.meta


def test_an_insert_does_not_hold_its_tables_until_the_commit(tmp_path):
    """The writing process inserts a file's tables one at a time and drops each: DuckDB must not keep
    a reference to them (a registered Arrow table stayed alive until the transaction ended, so a
    batch's tables were all in memory at its COMMIT)."""
    parsed = parse_file(str(cpu_only_trace(tmp_path / "rank0.json")), None, DEFAULT_RULES, False)
    received = pickle.loads(pickle.dumps(parsed)).extracted  # unpacked tables live in Arrow's pool
    con = duckdb.connect(str(tmp_path / "t.duckdb"))
    con.execute(schema.SCHEMA_SQL.read_text())
    trace = write.TraceRow(**{name: None for name in write.TraceRow.__dataclass_fields__} | {"run_id": "r", "rank": 0})
    before = pa.total_allocated_bytes()
    con.execute("BEGIN")
    write.append_rows(con, [(1, trace, received)])
    held = pa.total_allocated_bytes() - before
    con.execute("COMMIT")
    assert con.execute("SELECT count(*) FROM device_events").fetchone()[0] == EVENTS
    one_column = 8 * EVENTS  # the smallest a table of these rows could hold: an int64 column
    assert held < one_column, (held, one_column)
