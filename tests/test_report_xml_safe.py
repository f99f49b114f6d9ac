"""A run id holding control characters (an escape sequence in run.json) reaches the charts' text; the
static SVGs and --svg / --png export must not abort the process (vl-convert panics on them)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import FIXTURES
from scaletrace.pipeline import ingest

ROOT = Path(__file__).resolve().parents[1]
EVIL = "evil\x1b]0;title\x07\x1b[31m-run"


def test_report_with_control_characters_in_a_run_id(tmp_path, static_svgs):
    run = tmp_path / "runs" / "evil"
    shutil.copytree(FIXTURES / "demo-sweep" / "ddp-2", run)
    manifest = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**manifest, "run_id": EVIL, "workload": EVIL}))
    db, out = tmp_path / "t.duckdb", tmp_path / "r.html"
    assert not ingest([run.parent], db=db, workers=1).errors
    # the report in a subprocess: vl-convert's abort would kill the test process itself
    code = ("import sys; from scaletrace.cli import main; sys.argv = ['scaletrace'] + sys.argv[1:]; main()")
    report = subprocess.run([sys.executable, "-c", code, "report", "--db", str(db), "-o", str(out),
                             "--svg", str(tmp_path / "svg")], capture_output=True, text=True, cwd=ROOT)
    assert report.returncode == 0, report.stderr[-2000:]
    assert out.exists() and "<noscript>" in out.read_text()
    assert list((tmp_path / "svg").glob("*.svg"))
