"""The documentation: the site builds strictly, its reference pages follow the code, and nothing a user
reads cites what they cannot see (files outside the repository, the project's planning notes)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))

import hooks  # noqa: E402  docs/hooks.py: the generated reference pages

# What a user can open: the package's code, SQL and help, the README and the docs.
USER_FACING = [*ROOT.glob("*.py"), *ROOT.glob("README.md"), *ROOT.glob("docs/**/*.md"),
               *(p for folder in ("pipeline", "collectors", "queries", "reports")
                 for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".sql", ".toml", ".cpp"))]
UNFOLLOWABLE = re.compile(r"DESIGN\.md|STYLE\.md|DEVELOPERS\.md|\bissues? #?\d+\b|\.\./shared/(?!traces)",
                          re.IGNORECASE)


def test_nothing_cites_what_a_user_cannot_open():
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()[:100]}"
             for p in USER_FACING for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
             if UNFOLLOWABLE.search(line)]
    assert not found, "\n".join(found)


def test_cli_reference_is_every_commands_help():
    from click.testing import CliRunner

    from scaletrace.cli import main

    text = hooks.cli_reference()
    for name in main.commands:
        help_text = CliRunner().invoke(main, [name, "--help"], terminal_width=80).output
        assert f"## `scaletrace {name}`" in text
        assert help_text.splitlines()[0].split("Usage: ")[-1].split()[-1] in text  # its usage line


def test_query_reference_holds_every_query():
    from scaletrace import queries

    text = hooks.query_reference()
    for name in queries.names():
        assert f"## `{name}`" in text and queries.load(name).description in text


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="mkdocs is not installed (dev extra)")
def test_site_builds_strictly(tmp_path):
    # --strict: a broken link, a page missing from the nav or a nav entry with no page fails the build
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(tmp_path)],
                            cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})  # mkdocs-material's banner
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "index.html").exists() and (tmp_path / "reference" / "cli" / "index.html").exists()


def _tour_commands() -> list[str]:
    """The `scaletrace ...` lines of the README's five-minute tour, continuation lines joined."""
    readme = (ROOT / "README.md").read_text()
    tour = readme.split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    block = tour.split("```bash", 1)[1].split("```", 1)[0]
    block = re.sub(r"\\\n\s*", " ", block)
    return [line.strip() for line in block.splitlines() if line.strip().startswith("scaletrace ")]


def test_the_tour_runs_as_printed(tmp_path, monkeypatch):
    import shlex

    from click.testing import CliRunner

    from scaletrace.cli import main

    (tmp_path / "fixtures").symlink_to(ROOT / "fixtures")
    monkeypatch.chdir(tmp_path)
    commands = _tour_commands()
    assert len(commands) >= 5 and {"ingest", "query", "explain", "report"} <= {c.split()[1] for c in commands}
    for line in commands:
        result = CliRunner().invoke(main, shlex.split(line)[1:])
        assert result.exit_code == 0, (line, result.output[-2000:])
        assert result.stdout.strip() or result.stderr.strip(), line
    assert (tmp_path / "tour-report.html").stat().st_size > 100_000
