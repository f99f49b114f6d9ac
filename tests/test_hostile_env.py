"""Hostile environments and values: non-finite numbers of seconds, a closed or full stdout, a Latin-1
locale, a small memory or file limit, Ctrl-C at the first instant. Each is one line, never a traceback."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from scaletrace.cli import main


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e999"])
@pytest.mark.parametrize("args", [["sql", "SELECT 1", "--timeout"], ["query", "run_summary", "--timeout"],
                                  ["ingest", str(FIXTURES / "micro-2rank"), "--wait"]], ids=["sql", "query", "ingest"])
def test_a_number_of_seconds_must_be_finite(tmp_path, args, value):
    """nan compared with anything is false, so a range check let it through: --wait nan waited for
    ever and --timeout nan meant no limit. Refused before anything is opened: a usage error, exit 2."""
    db = tmp_path / "t.duckdb"
    result = CliRunner().invoke(main, [*args, value, "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert "--timeout" in result.output or "--wait" in result.output
    assert not db.exists()


@pytest.mark.parametrize("fact", ["world_size=abc", "parallel.tp=two", "scaling=sideways", "tp=2"])
def test_collect_checks_its_facts_before_the_job_starts(tmp_path, fact):
    """A bad --meta fact was found only when rank 0 wrote run.json after training, and then every fact
    was lost: it is one line and exit 1 before the command runs (the job's marker file never appears)."""
    import sys

    marker = tmp_path / "ran"
    result = CliRunner().invoke(main, ["collect", "--out", str(tmp_path / "run"), "--meta", "workload=w",
                                       "--meta", fact, "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"error: --meta {fact.split('=')[0]}") and result.output.count("\n") == 1
    assert not marker.exists() and not (tmp_path / "run").exists()


SCALETRACE = [__import__("sys").executable, "-m", "scaletrace.cli"]
NON_ASCII_RUN = "运行-ü-☃"  # not spelled by ISO-8859-1 (but ü)


@pytest.fixture(scope="module")
def non_ascii_db(tmp_path_factory):
    """fixtures/micro-2rank as a run whose run_id and workload need more than Latin-1."""
    import json
    import shutil

    from scaletrace.pipeline import ingest

    root = tmp_path_factory.mktemp("nonascii")
    run = root / "runs" / NON_ASCII_RUN
    shutil.copytree(FIXTURES / "micro-2rank", run)
    manifest = json.loads((run / "run.json").read_text()) if (run / "run.json").exists() else {}
    (run / "run.json").write_text(json.dumps({**manifest, "run_id": NON_ASCII_RUN, "workload": "模型"}))
    assert not ingest([root / "runs"], db=root / "t.duckdb", workers=1).errors
    return root / "t.duckdb"


COMMANDS = {  # what writes to stdout: help, a query in each format, an ad-hoc statement, the sentences
    "help": ["--help"],
    "query": ["query", "run_summary", "--columns", "run_id,workload"],
    "query-csv": ["query", "run_summary", "--format", "csv"],
    "query-line": ["query", "run_summary", "--format", "line"],
    "sql": ["sql", "SELECT run_id FROM runs"],
    "explain": ["explain"],
}


def _run(args, db, **kwargs):
    import subprocess

    if args != ["--help"]:
        args = [*args, "--db", str(db)]
    return subprocess.run([*SCALETRACE, *args], stderr=subprocess.PIPE, timeout=120,
                          encoding="latin-1" if "env" in kwargs else "utf-8", **kwargs)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_full_stdout_is_one_line_and_exit_1(non_ascii_db, name):
    with open("/dev/full", "w") as full:
        result = _run(COMMANDS[name], non_ascii_db, stdout=full)
    assert result.returncode == 1, result.stderr
    assert result.stderr == "error: cannot write to standard output: No space left on device\n"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_closed_stdout_is_one_line_and_exit_1(non_ascii_db, name):
    import os

    result = _run(COMMANDS[name], non_ascii_db, preexec_fn=lambda: os.close(1))
    assert result.returncode == 1, result.stderr
    assert result.stderr == "error: cannot write to standard output: standard output is closed\n"


@pytest.mark.parametrize("name", sorted(set(COMMANDS) - {"help"}))
def test_a_latin1_locale_escapes_what_it_cannot_spell(non_ascii_db, name):
    """An ISO-8859-1 terminal (PYTHONIOENCODING stands for the locale's codeset) cannot spell the run's
    Chinese name: it is written as backslash escapes, never a UnicodeEncodeError."""
    import os
    import subprocess

    result = _run(COMMANDS[name], non_ascii_db, stdout=subprocess.PIPE,
                  env={**os.environ, "PYTHONIOENCODING": "latin-1"})
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "\\u8fd0\\u884c" in result.stdout or "\\u6a21\\u578b" in result.stdout  # 运行 or 模型, escaped


def _under_address_limit(args, cache, limit_bytes=8 << 30):
    """``scaletrace ARGS`` with its address space capped (``ulimit -v``) and its own cache directory."""
    import os
    import resource
    import subprocess

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    return subprocess.run([*SCALETRACE, *map(str, args)], capture_output=True, text=True, timeout=300,
                          preexec_fn=cap, env={**os.environ, "SCALETRACE_CACHE_DIR": str(cache)})


def test_a_report_under_a_small_address_limit_is_one_line_not_a_crash(non_ascii_db, tmp_path):
    """V8 (vl-convert's engine) reserves ~64 GiB of address space at start and, under `ulimit -v 8G`,
    aborted the process (SIGTRAP, exit -5) instead of raising. Asked first: with nothing cached, one
    line and exit 1, nothing written; once the Vega bundle is cached (built without the cap) the page
    is written without its static images, and --png (which needs V8) is one line again."""
    from scaletrace.reports.engine import V8_ADDRESS_SPACE

    assert V8_ADDRESS_SPACE > 8 << 30  # the cap below is under what V8 needs
    cache = tmp_path / "cache"
    out = tmp_path / "r.html"
    first = _under_address_limit(["report", "--db", non_ascii_db, "-o", out], cache)
    assert first.returncode == 1, first.stderr
    assert first.stderr.startswith("error: the charts are drawn by vl-convert") and first.stderr.count("\n") == 1
    assert not out.exists()

    import os
    import subprocess

    built = subprocess.run([*SCALETRACE, "report", "--db", str(non_ascii_db), "-o", str(tmp_path / "once.html")],
                           capture_output=True, text=True, timeout=300,
                           env={**os.environ, "SCALETRACE_CACHE_DIR": str(cache)})
    assert built.returncode == 0, built.stderr
    second = _under_address_limit(["report", "--db", non_ascii_db, "-o", out], cache)
    assert second.returncode == 0, second.stderr
    assert out.exists() and "No static images in this page" in out.read_text()
    png = _under_address_limit(["report", "--db", non_ascii_db, "-o", tmp_path / "p.html", "--png",
                                tmp_path / "png"], cache)
    assert png.returncode == 1 and png.stderr.startswith("error: the charts are drawn by vl-convert"), png.stderr
    assert not (tmp_path / "png").exists()


def _with_open_files(args, soft, hard):
    import resource
    import subprocess

    return subprocess.run([*SCALETRACE, *map(str, args)], capture_output=True, text=True, timeout=300,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)))


@pytest.mark.parametrize("command", ["ingest", "report", "query"])
def test_too_few_open_files_is_one_line_before_any_work(non_ascii_db, tmp_path, command):
    """`ulimit -n 12`: ingest died with OSError from the worker pool, report with a Rust panic shown as
    a traceback. Under MIN_OPEN_FILES (soft and hard) it is one line naming the limit, exit 1."""
    from scaletrace.pipeline.common.openfiles import MIN_OPEN_FILES

    args = {"ingest": ["ingest", FIXTURES / "micro-2rank", "--db", tmp_path / "t.duckdb"],
            "report": ["report", "--db", non_ascii_db, "-o", tmp_path / "r.html"],
            "query": ["query", "run_summary", "--db", non_ascii_db]}[command]
    limit = 12
    assert limit < MIN_OPEN_FILES
    result = _with_open_files(args, limit, limit)
    assert result.returncode == 1, result.stderr
    assert result.stderr == (f"error: this process may open only {limit} files (ulimit -n) and scaletrace needs "
                             f"at least {MIN_OPEN_FILES}: raise the limit (ulimit -n 1024)\n")
    assert not (tmp_path / "t.duckdb").exists() and not (tmp_path / "r.html").exists()


def test_a_small_soft_limit_is_raised_to_the_hard_one(tmp_path):
    """Only the soft limit small (`ulimit -S -n 12`): raised to the hard limit, and the ingest runs."""
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    result = _with_open_files(["ingest", FIXTURES / "micro-2rank", "--db", tmp_path / "t.duckdb", "--workers", "2"],
                              12, hard)
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("2 ingested")


@pytest.mark.parametrize("error", ["oserror", "panic"])
def test_running_out_of_files_midway_is_one_line(monkeypatch, non_ascii_db, error):
    """Out of descriptors in the middle of a command: Python's OSError(EMFILE), or the Rust panic a
    compiled library raises instead (pyo3's PanicException is a BaseException), is one line."""
    import errno

    import scaletrace.cli as cli

    class PanicException(BaseException):  # pyo3's name; what vl-convert raised
        pass

    def out_of_files(*args, **kwargs):
        if error == "oserror":
            raise OSError(errno.EMFILE, "Too many open files")
        raise PanicException('called `Result::unwrap()` on an `Err` value: Os { code: 24, kind: Uncategorized, '
                             'message: "Too many open files" }')

    monkeypatch.setattr(cli, "connect", out_of_files)
    result = CliRunner().invoke(main, ["query", "run_summary", "--db", str(non_ascii_db)])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("error: this process may open only ") and result.output.count("\n") == 1


SIGNALS_PTH = "00-scaletrace-signals.pth"


@pytest.mark.parametrize("argv0, expected", [("/venv/bin/scaletrace", (130, "interrupted\n")),
                                              ("/venv/bin/other-tool", (None, "KeyboardInterrupt"))])
def test_ctrl_c_while_python_starts_is_one_line_in_scaletrace_only(tmp_path, argv0, expected):
    """Ctrl-C in the console script's first milliseconds, while `site` reads site-packages (an editable
    install's finder imports pathlib there), was Python's KeyboardInterrupt traceback. The .pth file
    that setup.py installs is read before every other: from there Ctrl-C is one line and 130, in the
    `scaletrace` command only. Made deterministic: a .pth read after it sends SIGINT to its own process."""
    import shutil
    import subprocess
    import sys

    from conftest import ROOT

    site_dir = tmp_path / "site"
    site_dir.mkdir()
    shutil.copy(ROOT / "pipeline" / "common" / SIGNALS_PTH, site_dir)
    (site_dir / "zz-ctrl-c.pth").write_text("import os, signal; os.kill(os.getpid(), signal.SIGINT)\n")
    code = f"import sys, site; sys.argv[0] = {argv0!r}; site.addsitedir({str(site_dir)!r}); print('not reached')"
    result = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60)
    status, said = expected
    if status is None:  # any other program: Python's own handling, untouched
        assert result.returncode != 0 and said in result.stderr
    else:
        assert (result.returncode, result.stderr, result.stdout) == (status, said, "")


def test_the_signal_file_is_read_first_and_installed_with_the_package():
    """It sorts before every other .pth name site reads here (site reads them in sorted order); setup.py
    installs it with a wheel, and `make setup` copies it for the editable install (which places no data files)."""
    import site

    from conftest import ROOT

    assert f'"pipeline/common/{SIGNALS_PTH}"' in (ROOT / "setup.py").read_text()
    assert f"shutil.copy('pipeline/common/{SIGNALS_PTH}'" in (ROOT / "Makefile").read_text()
    names = sorted(p.name for d in site.getsitepackages() for p in __import__("pathlib").Path(d).glob("*.pth"))
    assert names and names[0] == SIGNALS_PTH, names
