"""A sweep file is checked whole against its schema before anything runs: every mistake is one line
naming the file, the key and what it must be; nothing is launched, even under --dry-run."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from conftest import ROOT
from scaletrace.cli import main
from scaletrace.collectors import sweep as sweeps

GOOD = {
    "workload": '"w"',
    "out_dir": '"runs"',
    "command": '["train.py", "--layout", "{layout}"]',
    "launcher": '["python"]',
    "run_id": '"w-{layout}"',
    "timeout_s": "60",
}
# key -> a value of the wrong kind (TOML text): each was taken as it came (a string iterated by character,
# a number formatted as a placeholder string...) or crashed with a traceback
WRONG = {
    "workload": "3",
    "out_dir": "[1, 2]",
    "command": '"train.py"',
    "launcher": '"torchrun"',
    "run_id": "7",
    "timeout_s": '"10"',
}


def sweep_text(values: dict[str, str], matrix: str = 'layout = ["a", "b"]', extra: str = "") -> str:
    return "\n".join(f"{k} = {v}" for k, v in values.items()) + f"\n{extra}\n[matrix]\n{matrix}\n"


def run(tmp_path, text: str, *args):
    (tmp_path / "sweep.toml").write_text(text)
    return CliRunner().invoke(main, ["sweep", str(tmp_path / "sweep.toml"), *args])


def test_the_shipped_demo_sweep_is_valid():
    assert sweeps.problems(__import__("tomllib").loads((ROOT / "collectors" / "demo_sweep.toml").read_text())) == []


@pytest.mark.parametrize("key", sorted(WRONG))
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
def test_a_value_of_the_wrong_kind_is_one_line_and_nothing_runs(tmp_path, key, dry_run):
    result = run(tmp_path, sweep_text({**GOOD, key: WRONG[key]}), *(["--dry-run"] if dry_run else []))
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {tmp_path / 'sweep.toml'}: '{key}' must be "), lines
    assert not (tmp_path / "runs").exists()


def test_every_mistake_is_its_own_line(tmp_path):
    """Three wrong kinds, an unknown key, a matrix entry that is not a list and an exclude naming no
    matrix entry: six mistakes, six lines, in one go."""
    values = {**GOOD, "command": '"train.py"', "timeout_s": "-1", "workload": "true", "timout_s": "5"}
    text = sweep_text(values, matrix='layout = "a"', extra='[[exclude]]\nlaypot = "a"')
    result = run(tmp_path, text, "--dry-run")
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 6, lines
    assert all(line.startswith(f"error: {tmp_path / 'sweep.toml'}: ") for line in lines)
    said = "\n".join(lines)
    for fragment in ("'command' must be", "'timeout_s' must be", "'workload' must be", "unknown key 'timout_s'",
                     "matrix 'layout' must be", "exclude #1 names 'laypot'"):
        assert fragment in said


@pytest.mark.parametrize("timeout", ["nan", "inf", "0"])
def test_a_timeout_must_be_a_finite_positive_number(tmp_path, timeout):
    result = run(tmp_path, sweep_text({**GOOD, "timeout_s": timeout}), "--dry-run")
    assert result.exit_code == 1 and "'timeout_s' must be a positive number" in result.output


def test_a_placeholder_that_cannot_be_filled_is_one_line(tmp_path):
    result = run(tmp_path, sweep_text({**GOOD, "run_id": '"w-{0}"'}), "--dry-run")
    assert result.exit_code == 1 and result.output.startswith("error: a placeholder cannot be filled")


def test_a_valid_file_plans_one_run_per_combination(tmp_path):
    result = run(tmp_path, sweep_text(GOOD, matrix='layout = ["a", "b"]\nworld_size = [1, 2]'), "--dry-run")
    assert result.exit_code == 0, result.output
    assert len(result.output.strip().splitlines()) == 2 * 2  # 2 layouts x 2 world sizes
    assert "train.py --layout a" in result.output
