"""The cache directory (pipeline/common/cachefiles.py) as the report's JavaScript bundle uses it
(reports/html.py): built once per vl-convert version, then read; a damaged copy is never used;
an unusable cache only means the bundle is built each time.  The template's use of the same
directory is tests/test_template.py's."""

from __future__ import annotations

import os

import pytest
import vl_convert

from scaletrace.pipeline.common import cachefiles
from scaletrace.reports import html


@pytest.fixture
def builds(monkeypatch, tmp_path):
    """vl-convert's bundle builder, counted (a stand-in bundle: what is cached, not what it holds,
    is under test), with an empty cache directory of the test's own."""
    monkeypatch.setenv("SCALETRACE_CACHE_DIR", str(tmp_path / "cache"))
    calls = []
    monkeypatch.setattr(vl_convert, "javascript_bundle", lambda: calls.append(1) or f"bundle #{len(calls)}")
    return calls


def bundle() -> str:
    return html.vega_bundle.__wrapped__()  # without the process's own lru_cache


def test_the_bundle_is_built_once_then_read(builds, tmp_path):
    assert bundle() == "bundle #1" and builds == [1]
    assert bundle() == "bundle #1" and builds == [1]  # read from the cache, not built again
    (kept,) = (tmp_path / "cache").iterdir()
    assert kept.name.startswith(f"{html.BUNDLE}.") and kept.suffix == ".js"
    assert cachefiles.digest(kept.read_bytes()) == kept.name.rsplit(".", 2)[-2]


def test_a_new_vl_convert_version_builds_its_own(builds, monkeypatch):
    bundle()
    monkeypatch.setattr(vl_convert, "__version__", "0.0.0-other", raising=False)
    assert bundle() == "bundle #2" and len(builds) == 2


def test_a_damaged_bundle_is_built_again(builds, tmp_path):
    bundle()
    (kept,) = (tmp_path / "cache").iterdir()
    kept.write_text("bundle #1 -- edited")
    assert bundle() == "bundle #2"  # not the edited bytes
    (rebuilt,) = (tmp_path / "cache").iterdir()
    assert rebuilt.read_text() == "bundle #2"


def test_an_unusable_cache_builds_every_time(builds, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("where the cache folder would be")
    monkeypatch.setenv("SCALETRACE_CACHE_DIR", str(blocker))
    assert bundle() == "bundle #1" and bundle() == "bundle #2"


def test_the_newest_of_a_kind_are_kept_and_other_kinds_left(tmp_path):
    folder = tmp_path / "cache"
    folder.mkdir()
    other = folder / "template.k.0.duckdb"
    other.write_bytes(b"another kind")
    for age in range(cachefiles.KEEP + 2):
        old = folder / f"kind.{age:04d}.{'0' * 32}.js"
        old.write_bytes(b"older")
        os.utime(old, (1_000_000 + age, 1_000_000 + age))
    new = cachefiles.write(folder, "kind", "new", "js", b"newest")
    kept = sorted(p.name for p in folder.glob("kind.*.js"))
    assert len(kept) == cachefiles.KEEP and new.name in kept
    assert f"kind.{cachefiles.KEEP + 1:04d}.{'0' * 32}.js" in kept and f"kind.{0:04d}.{'0' * 32}.js" not in kept
    assert other.exists() and not list(folder.glob(".*"))  # nothing staged left
