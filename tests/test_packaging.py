"""The distribution installs one import package, `scaletrace`, and works from a built wheel."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT

TRAIN = textwrap.dedent("""
    import torch
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(5):
        model(torch.randn(4, 8)).pow(2).mean().backward()
        opt.step(); opt.zero_grad()
""")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "-w", str(out), str(ROOT)], capture_output=True, text=True, timeout=300,
                           env={**os.environ, "PIP_NO_INPUT": "1"})
    assert build.returncode == 0, build.stderr[-3000:]
    (path,) = out.glob("scaletrace-*.whl")
    return path


def test_only_top_level_name_is_scaletrace(wheel):
    with zipfile.ZipFile(wheel) as z:
        top = {name.split("/")[0] for name in z.namelist()}
        names = z.namelist()
    # name-version.dist-info (a wheel is name-version-python-abi-platform: pure, or with the compiled extractor),
    # and name-version.data holding only the start-up signal file for site-packages (setup.py)
    stem = '-'.join(wheel.name.split('-')[:2])
    assert top == {"scaletrace", f"{stem}.dist-info", f"{stem}.data"}
    assert [n for n in names if n.startswith(f"{stem}.data/")] == [
        f"{stem}.data/data/lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages/"
        "00-scaletrace-signals.pth"]
    # what the package reads at run time ships with it
    for needed in ("scaletrace/cli.py", "scaletrace/collectors/_boot/sitecustomize.py",
                   "scaletrace/queries/run_summary.sql", "scaletrace/pipeline/store/schema.sql",
                   "scaletrace/collectors/demo_sweep.toml"):
        assert needed in names
    # every definition file (one per macro / reference table) registered on each connection
    for folder in ("macros", "reference"):
        files = sorted((ROOT / "queries" / folder).glob("*.sql"))
        assert files and all(f"scaletrace/queries/{folder}/{f.name}" in names for f in files)


def test_installed_wheel_imports_and_collects(wheel, tmp_path):
    """Installed (not editable) into a fresh directory: the API imports from there and nothing
    generic is imported; the zero-code collector's sitecustomize profiles an unmodified script."""
    target = tmp_path / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                              str(wheel)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr[-3000:]
    env = {**os.environ, "PYTHONPATH": str(target)}
    work = tmp_path / "work"  # not the source tree: nothing importable by accident
    work.mkdir()
    check = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import sys, scaletrace
        from scaletrace import ingest, connect, build_report, profile, RunInfo
        import scaletrace.cli, scaletrace.reports, scaletrace.collectors.wrapper
        print(scaletrace.__file__)
        print(sorted({m.split('.')[0] for m in sys.modules} & {'pipeline', 'queries', 'reports', 'collectors'}))
    """)], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stderr[-3000:]
    where, generic = check.stdout.splitlines()
    assert Path(where).is_relative_to(target) and generic == "[]"

    (work / "train.py").write_text(TRAIN)
    out = work / "run"
    collect = subprocess.run([sys.executable, "-m", "scaletrace.cli", "collect", "--out", str(out), "--steps",
                              "1,1,2", "--", sys.executable, "train.py"], cwd=work, env=env,
                             capture_output=True, text=True, timeout=300)
    assert collect.returncode == 0, collect.stderr[-3000:]
    assert "collector not installed" not in collect.stderr
    assert len(list(out.glob("rank0.*.pt.trace.json.gz"))) == 1 and (out / "run.json").is_file()
