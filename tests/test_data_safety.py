"""Nothing lost, no answer read twice: outputs never land on inputs, one run per directory, paths
reach SQL as the paths they are, exports appear whole or not at all, long names are stored, files
named like traces that are not files are one line each, and two profiling windows are two runs."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

import scaletrace
from conftest import query
from scaletrace.cli import main
from scaletrace.pipeline.common.oneline import MAX_MESSAGE_CHARS
from scaletrace.pipeline.synth import SynthRun, write_run

CUT_MARK = len("… (cut)")


def _tree_digest(path: Path) -> str:
    """Every file under ``path`` (or the file itself), its name and bytes: unchanged means untouched."""
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        digest.update(str(f.relative_to(path.parent)).encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()


def _one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A run of 2 ranks (2 steps), ingested into a DuckDB file and a Parquet dataset."""
    root = tmp_path_factory.mktemp("stored")
    run = write_run(root / "traces", SynthRun("r2", ranks=2, steps=2))
    db, dataset = root / "runs.duckdb", root / "dataset"
    assert not scaletrace.ingest([run], db=db, workers=1).errors
    assert not scaletrace.ingest_parquet([run], dataset, workers=1).errors
    return run, db, dataset


# --- outputs onto inputs ---------------------------------------------------------------------------

def _cases(run: Path, db: Path, dataset: Path, tmp: Path):
    """(command, the input it would have overwritten), each a way of writing onto an input."""
    (tmp / "link.html").symlink_to(db)
    os.link(db, tmp / "hard.html")  # the same inode under another name
    (tmp / "holds-db").mkdir()
    os.link(db, tmp / "holds-db" / "runs.duckdb")
    (tmp / "out").mkdir()
    (tmp / "out" / "report.html").symlink_to(run / "rank0.json")
    return {
        "report -o the database": (["report", "--db", db, "-o", db], db),
        "report -o a symlink to it": (["report", "--db", db, "-o", tmp / "link.html"], db),
        "report -o a hard link of it": (["report", "--db", db, "-o", tmp / "hard.html"], db),
        "report -o inside the dataset": (["report", "--db", dataset, "-o", dataset / "r.html"], dataset),
        "report --png the dataset": (["report", "--db", dataset, "-o", tmp / "r.html", "--png", dataset], dataset),
        "export into a folder holding the database": (["export", "--db", tmp / "holds-db" / "runs.duckdb",
                                                        "--parquet", tmp / "holds-db"], db),
        "export onto an ingest dataset": (["export", "--db", db, "--parquet", dataset], dataset),
        "ingest --db a trace": (["ingest", run / "rank0.json", "--db", run / "rank0.json"], run),
        "run -o onto a trace": (["run", run, "-o", tmp / "out"], run),
    }


CASES = ["report -o the database", "report -o a symlink to it", "report -o a hard link of it",
         "report -o inside the dataset", "report --png the dataset", "export into a folder holding the database",
         "export onto an ingest dataset", "ingest --db a trace", "run -o onto a trace"]


@pytest.mark.parametrize("case", CASES)
def test_no_command_writes_its_output_onto_an_input(stored, tmp_path, case):
    """`report --db runs.duckdb -o runs.duckdb` wrote HTML over the database and exited 0: now every
    verb refuses, in one line naming both paths, before anything is written."""
    run, db, dataset = stored
    args, victim = _cases(run, db, dataset, tmp_path)[case]
    before = {p: _tree_digest(p) for p in (run, db, dataset)}
    result = CliRunner().invoke(main, [str(a) for a in args])
    line = _one_line(result)
    assert "would be written onto an input" in line or "ingest dataset" in line, line
    assert {p: _tree_digest(p) for p in (run, db, dataset)} == before, f"{victim} was touched"


def test_the_report_api_refuses_to_write_onto_its_database(stored):
    from scaletrace.pipeline.common.paths import OverwriteError

    _run, db, dataset = stored
    before = _tree_digest(db), _tree_digest(dataset)
    with pytest.raises(OverwriteError, match="would be written onto an input"):
        scaletrace.build_report(db, db)
    with pytest.raises(OverwriteError, match="inside the Parquet dataset"):
        scaletrace.build_report(dataset, dataset / "report.html")
    assert (_tree_digest(db), _tree_digest(dataset)) == before


# --- one run per directory -------------------------------------------------------------------------

def _claimant(root: Path, tokens: int) -> Path:
    """A copy of run r2 under another directory whose run.json claims the same run_id (other
    tokens_per_step), with a step log of its own."""
    run = write_run(root, SynthRun("r2", ranks=2, steps=2, tokens_per_step=tokens))
    claimant = root / "elsewhere"
    run.rename(claimant)
    (claimant / "rank0.steps.jsonl").write_text(json.dumps({"step": 0, "start_ns": 10, "dur_ns": 1000,
                                                            "tokens": tokens}) + "\n")
    return claimant


def _state(target: Path) -> tuple:
    rows = query(target, "run_summary").select("run_id", "tokens_per_step").rows()
    sql = ("SELECT (SELECT list(source_dir) FROM runs), (SELECT count(*) FROM step_log), "
           "(SELECT list(path ORDER BY path) FROM traces)")
    with scaletrace.connect(target) as database:
        return rows, database.sql(sql).rows()


@pytest.mark.parametrize("kind", ["duckdb", "parquet"])
def test_a_second_directory_claiming_a_stored_run_id_changes_nothing(stored, tmp_path, kind):
    """Its traces were refused as duplicate ranks, yet its run.json and step log replaced the
    stored run's row (tokens/s 100,000 -> 4,999,950): now the run is refused whole, one line
    naming both directories, and the stored run reads as before."""
    import shutil

    run, db, dataset = stored
    target = tmp_path / ("t.duckdb" if kind == "duckdb" else "ds")
    shutil.copy(db, target) if kind == "duckdb" else shutil.copytree(dataset, target)
    stored_tokens = SynthRun("r2").tokens_per_step
    claimant = _claimant(tmp_path / "other", tokens=stored_tokens * 50)
    before = _state(target)
    assert before[0] == [("r2", stored_tokens)]
    args = ["--db", target] if kind == "duckdb" else ["--parquet", target]
    result = CliRunner().invoke(main, ["ingest", str(claimant), *map(str, args), "-q"])
    assert result.exit_code == 1, (result.output, result.exc_info)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{claimant}: run 'r2'") and str(run) in lines[0], lines
    assert _state(target) == before


def test_two_directories_of_one_run_id_in_one_ingest_keep_the_first(tmp_path):
    first = write_run(tmp_path / "a", SynthRun("same", ranks=2, steps=2))
    second = write_run(tmp_path / "b", SynthRun("same", ranks=2, steps=2, tokens_per_step=7))
    report = scaletrace.ingest([tmp_path], db=tmp_path / "t.duckdb", workers=1)
    assert [(o.path, o.status) for o in report.errors] == [(str(second), "error")]
    assert str(first) in report.errors[0].message
    rows = query(tmp_path / "t.duckdb", "run_summary").select("run_id", "tokens_per_step").rows()
    assert rows == [("same", SynthRun("same").tokens_per_step)]


# --- glob characters -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def two_and_four(tmp_path_factory):
    """Runs of 2 and 4 ranks (2 steps each), each ingested into a DuckDB file of its own."""
    root = tmp_path_factory.mktemp("globs")
    runs = [write_run(root / "t", SynthRun(name, ranks=n, steps=2)) for name, n in (("two", 2), ("four", 4))]
    for run in runs:
        assert not scaletrace.ingest([run], db=root / f"{run.name}.duckdb", workers=1).errors
    return runs


@pytest.mark.parametrize("names", [("runs*", "runs1"), ("runs?", "runsX"), ("ex[1]", "ex1")])
def test_glob_characters_in_a_directory_name_read_that_directory_only(tmp_path, two_and_four, names):
    """A dataset named `runs*` beside `runs1` read both (every row twice) and the next ingest into
    it failed on a primary key: DuckDB reads every path as a glob pattern."""
    odd, plain = (tmp_path / n for n in names)
    two, four = two_and_four
    assert not scaletrace.ingest_parquet([four], plain, workers=1).errors
    assert not scaletrace.ingest_parquet([two, four], odd, workers=1).errors
    assert not scaletrace.ingest_parquet([two, four], odd, workers=1).errors  # the rerun: no primary key error
    with scaletrace.connect(odd) as database:
        assert database.sql("SELECT run_id, count(*) FROM traces GROUP BY 1 ORDER BY 1").rows() == [("four", 4),
                                                                                                  ("two", 2)]
        ranks = database.sql("SELECT run_id, count(DISTINCT rank), count(*) FROM steps GROUP BY 1 ORDER BY 1").rows()
        assert ranks == [("four", 4, 4 * 2), ("two", 2, 2 * 2)]  # a row per rank and step, once
    for run, name in ((four, names[1]), (two, names[0])):  # an export of each run, the odd name last
        scaletrace.export_parquet(run.parent.parent / f"{run.name}.duckdb", tmp_path / f"export-{name}")
    with scaletrace.connect(tmp_path / f"export-{names[0]}") as database:
        assert database.sql("SELECT run_id, count(*) FROM traces GROUP BY 1").rows() == [("two", 2)]
        assert database.sql("SELECT count(*) FROM steps").rows() == [(2 * 2,)]


# --- exports whole or absent -----------------------------------------------------------------------

def test_an_export_that_fails_midway_leaves_nothing_half_written(stored, tmp_path, monkeypatch):
    """A failed export left a half directory (meta.parquet and some tables) that readers took as
    whole: now it is written beside and renamed into place."""
    from scaletrace.pipeline.store import export

    _run, db, _dataset = stored
    old = tmp_path / "old"
    export.export_parquet(db, old)
    old_digest = _tree_digest(old)
    monkeypatch.setattr(export, "TABLES", (*export.TABLES, "no_such_table"))  # fails after every real table
    for out in (tmp_path / "new", old):
        with pytest.raises(Exception, match="no_such_table"):
            export.export_parquet(db, out)
    assert not (tmp_path / "new").exists()
    assert _tree_digest(old) == old_digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old"]  # no hidden half export left beside


def test_an_export_replaces_an_older_export_whole(stored, tmp_path):
    """Exporting again into an export replaces it: no folder of the older export's runs is left."""
    _run, db, _dataset = stored
    four = write_run(tmp_path / "t", SynthRun("four", ranks=4, steps=2))
    assert not scaletrace.ingest([four], db=tmp_path / "four.duckdb", workers=1).errors
    out = tmp_path / "pq"
    scaletrace.export_parquet(tmp_path / "four.duckdb", out)
    assert scaletrace.export_parquet(db, out)["traces"] == 2  # run r2's 2 ranks
    assert not list(out.rglob("run_id=four"))
    with scaletrace.connect(out) as database:
        assert database.sql("SELECT run_id, count(*) FROM traces GROUP BY 1").rows() == [("r2", 2)]


# --- one path is one path --------------------------------------------------------------------------

@pytest.mark.parametrize("as_path", [str, Path])
def test_ingest_takes_a_str_or_a_path_as_one_path(tmp_path, monkeypatch, as_path):
    """`scaletrace.ingest("my.run")` iterated the string: the paths m, y, ., r, u, n, and `.` the
    whole current directory."""
    monkeypatch.chdir(tmp_path)
    write_run(tmp_path, SynthRun("my.run", ranks=2, steps=2))
    write_run(tmp_path, SynthRun("unrelated", ranks=2, steps=2))
    report = scaletrace.ingest(as_path("my.run"), db="t.duckdb", workers=1)
    assert not report.errors and {o.run_id for o in report.outcomes} == {"my.run"}
    report = scaletrace.ingest_parquet(as_path("my.run"), "ds", workers=1)
    assert not report.errors and {o.run_id for o in report.outcomes} == {"my.run"}


# --- long names ------------------------------------------------------------------------------------

def test_a_long_non_ascii_run_id_is_stored_in_a_dataset_and_an_export(tmp_path):
    """Its partition folder (`run_id=` and 3 characters a byte) passed the 255 bytes a file name
    holds: "File name too long" for every trace."""
    run_id = "訓練" * 60  # 120 characters, 360 bytes of UTF-8, 1,080 percent-encoded
    run = write_run(tmp_path / "t", SynthRun("short", ranks=2, steps=2))
    manifest = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**manifest, "run_id": run_id}))
    db, dataset, exported = tmp_path / "t.duckdb", tmp_path / "ds", tmp_path / "ex"
    assert not scaletrace.ingest([run], db=db, workers=1).errors
    assert not scaletrace.ingest_parquet([run], dataset, workers=1).errors
    assert not scaletrace.ingest_parquet([run], dataset, workers=1).errors  # unchanged on a rerun
    scaletrace.export_parquet(db, exported)
    answers = []
    for target in (db, dataset, exported):
        with scaletrace.connect(target) as database:
            answers.append(database.sql("SELECT run_id, rank, count(*) FROM device_events GROUP BY 1, 2 "
                                        "UNION ALL SELECT run_id, -1, count(*) FROM steps GROUP BY 1 ORDER BY 2").rows())
    assert answers[0] == answers[1] == answers[2] and answers[0][0][0] == run_id
    assert [rank for _, rank, _ in answers[0]] == [-1, 0, 1]


def test_a_file_line_with_a_long_path_is_cut_and_keeps_its_reason(tmp_path):
    """A run directory 8 folders of 80 non-ASCII characters deep: its file's line was the whole
    path (700 characters) and then the reason; now at most 500 characters and the cut marks."""
    folder = tmp_path.joinpath(*["訓" * 80] * 8)
    folder.mkdir(parents=True)
    (folder / "rank0.json").write_text('{"traceEvents": [')
    result = CliRunner().invoke(main, ["ingest", str(folder), "--db", str(tmp_path / "t.duckdb"), "-q"])
    lines = [line for line in result.stderr.splitlines() if "rank0.json" in line]
    assert result.exit_code == 1 and len(lines) == 1, result.stderr
    assert len(lines[0]) <= MAX_MESSAGE_CHARS + CUT_MARK and "truncated" in lines[0], lines[0]


# --- files named like traces ------------------------------------------------------------------------

def test_files_named_like_traces_that_are_not_files_are_one_line_each(tmp_path):
    """A symlinked run directory, a FIFO, a socket, a /dev/zero link and dangling or looping links
    named rankN.json were skipped without a word (a named one: "broken symlink")."""
    real = write_run(tmp_path / "data", SynthRun("real", ranks=2, steps=2))
    runs = tmp_path / "runs"
    plain = write_run(runs, SynthRun("plain", ranks=2, steps=2))
    (runs / "linked").symlink_to(real, target_is_directory=True)
    (runs / "loop").symlink_to(runs, target_is_directory=True)  # walked once
    os.mkfifo(plain / "rank5.json")
    (plain / "rank6.json").symlink_to("/dev/zero")
    (plain / "rank7.json").symlink_to(plain / "nowhere.json")
    (plain / "rank9.json").symlink_to(plain / "rank9.json")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(plain / "rank8.json"))
    try:
        result = subprocess.run([sys.executable, "-m", "scaletrace.cli", "ingest", str(runs), "--db",
                                 str(tmp_path / "t.duckdb"), "-q"], capture_output=True, text=True, timeout=120)
    finally:
        sock.close()
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        f"{plain / 'rank5.json'}: not a regular file or a directory: a FIFO; not ingested",
        f"{plain / 'rank6.json'}: not a regular file or a directory: a character device (a symlink to /dev/zero); "
        "not ingested",
        f"{plain / 'rank7.json'}: a broken symlink: its target {plain / 'nowhere.json'} does not exist",
        f"{plain / 'rank8.json'}: not a regular file or a directory: a socket; not ingested",
        f"{plain / 'rank9.json'}: a symlink loop (the link leads back to itself)"]
    rows = query(tmp_path / "t.duckdb", "run_summary").select("run_id").rows()
    assert sorted(rows) == [("plain",), ("real",)]


# --- profiling windows -----------------------------------------------------------------------------

def test_two_profiling_windows_into_one_directory_are_two_runs(tmp_path, monkeypatch):
    """A job that trains twice (two processes, or two sessions in one) wrote two rank-0 traces
    into one directory, and `scaletrace ingest DIR` failed: "duplicate rank 0"."""
    torch = pytest.importorskip("torch")
    from scaletrace.collectors import ProfileConfig, Session

    monkeypatch.delenv("RANK", raising=False)
    out = tmp_path / "job"

    def train():
        model = torch.nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with Session(out, config=ProfileConfig(wait=1, warmup=1, active=2)) as s:
            for _ in range(5):
                model(torch.randn(4, 8)).sum().backward()
                opt.step()
                opt.zero_grad()
                s.step(tokens=4)

    train()
    pid = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: pid + 1)  # the second window: as another process's
    with pytest.warns(RuntimeWarning, match="earlier profiling window"):
        train()
    monkeypatch.setattr(os, "getpid", lambda: pid)
    report = scaletrace.ingest(out, db=tmp_path / "t.duckdb", workers=1)
    assert not report.errors, [o.line() for o in report.errors]
    rows = query(tmp_path / "t.duckdb", "run_summary").select("run_id", "ranks_traced").rows()
    assert sorted(rows) == [("job", 1), ("job-window-2", 1)]


def test_a_window_whose_start_failed_keeps_its_log_out_of_the_earlier_windows(tmp_path, monkeypatch):
    """A session whose start failed (before choosing its directory) still writes its step log at
    close: into a window of its own, never over the earlier window's."""
    pytest.importorskip("torch")
    from scaletrace.collectors import ProfileConfig, Session, environment

    monkeypatch.delenv("RANK", raising=False)
    out = tmp_path / "job"
    out.mkdir()
    earlier = json.dumps({"step": 0, "start_ns": 1, "dur_ns": 5, "tokens": 4}) + "\n"
    (out / "rank0.steps.jsonl").write_text(earlier)

    def broken():
        raise RuntimeError("no process group")

    monkeypatch.setattr(environment, "rank_and_world", broken)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Session(out, config=ProfileConfig(wait=1, warmup=1, active=2)) as s:
            for _ in range(3):
                s.step(tokens=4)
    said = " ".join(str(w.message) for w in caught)
    assert "no process group" in said and "earlier profiling window" in said, said
    assert (out / "rank0.steps.jsonl").read_text() == earlier
    assert len((out / "window-2" / "rank0.steps.jsonl").read_text().splitlines()) == 3
