"""A parse past its memory cap (pipeline/common/limits.py: resident size + headroom + k × the JSON) is
its file's one line, the worker lives on with its limit restored, and the next file ingests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

DRIVER = r"""
import sys
from scaletrace.pipeline.common import limits
limits.PARSE_HEADROOM = 20 << 20  # small numbers, so that a small file shows it
limits.PARSE_BYTES_PER_JSON_BYTE = 1
from scaletrace.pipeline.execute.ingest import ingest
report = ingest([sys.argv[1]], db=sys.argv[2], workers=1)
for o in report.outcomes:
    print(o.status, o.line())
"""


@pytest.mark.parametrize("extractor", ["compiled", "python"])
def test_a_parse_past_its_cap_is_one_line_and_the_next_file_ingests(tmp_path, extractor):
    run = tmp_path / "run"
    run.mkdir()
    # 20 MB of empty elements: the scan alone needs ~4 bytes a byte (over 20 MiB + 1 × the JSON)
    (run / "rank0.json").write_bytes(b'{"traceEvents":[' + b",".join([b"{}"] * 7_000_000) + b"]}")
    (run / "rank1.json").write_text(json.dumps({"distributedInfo": {"rank": 1}, "traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2, "args": {"stream": 7}}]}))
    env = {"PATH": "/usr/bin:/bin", "SCALETRACE_EXTRACTOR": extractor}
    out = subprocess.run([sys.executable, "-c", DRIVER, str(run), str(tmp_path / "t.duckdb")], cwd=ROOT.parent,
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith(f"error {run / 'rank0.json'}: parsing it needs more memory than a parse may take "
                               "(20 MiB + 1 × its 20 MiB of JSON)"), lines
    assert lines[1] == f"ok {run / 'rank1.json'}: ingested as run 'run' rank 1", lines
    assert len(lines) == 2, lines
