"""Imports go down the layers only.  From the bottom:

0. ``queries``: the SQL files, their loader and ``queries.analysis``, the models built on them
   (these take an open Database; its type is imported only under ``TYPE_CHECKING``);
1. ``pipeline.common``: one-line errors, limits, Ctrl-C, the SQL sandbox;
2. ``pipeline.read``: traces and side files into columns (no database);
3. ``pipeline.store``: DuckDB, the schema, Parquet export;
4. ``pipeline.execute``: finding files, worker processes, Ray, the ingest itself;
5. ``pipeline.synth``, ``collectors``, ``reports``: what writes traces and what presents results
   (none imports another of this layer);
6. the CLI and the top-level API (``cli.py``, ``__init__.py``).

Imports under ``if TYPE_CHECKING:`` are annotations only and are not counted.

A module that imported from its own layer's neighbour or from above would tie the layers into a
knot; within one package (``pipeline.read``, ``reports`` …) modules import each other freely."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"queries": 0, "pipeline.common": 1, "pipeline.read": 2, "pipeline.store": 3, "pipeline.execute": 4,
          "pipeline.synth": 5, "collectors": 5, "reports": 5, "cli": 6}


def layer_of(module: str) -> str | None:
    """The longest key of LAYERS that ``module`` (dotted, without ``scaletrace.``) is or is inside."""
    found = [key for key in LAYERS if module == key or module.startswith(key + ".")]
    return max(found, key=len) if found else None


def _module(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _typing_only(tree: ast.AST) -> set[int]:
    """ids of the nodes inside ``if TYPE_CHECKING:`` blocks."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            inside |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return inside


def violations(root: Path) -> list[str]:
    """Every ``scaletrace.X`` import from a module whose layer is not above X's (nor X's own package)."""
    found = []
    for folder in ("queries", "pipeline", "collectors", "reports"):
        for path in sorted((root / folder).rglob("*.py")):
            here = layer_of(_module(root, path))
            if here is None:  # pipeline/__init__.py: the package's lazy API, above its subpackages
                continue
            tree = ast.parse(path.read_text(), str(path))
            skip = _typing_only(tree)
            for node in ast.walk(tree):
                if id(node) in skip:
                    continue
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                elif isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                else:
                    continue
                for module in modules:
                    if not module.startswith("scaletrace."):
                        continue
                    target = layer_of(module.removeprefix("scaletrace."))
                    if target is None or target == here:
                        continue
                    if LAYERS[target] >= LAYERS[here] and not here.startswith(target + "."):
                        found.append(f"{path.relative_to(root)}:{node.lineno} imports {module}")
    return sorted(set(found))


def test_imports_go_down_the_layers():
    assert violations(ROOT) == []


def test_the_check_sees_an_import_from_above(tmp_path):
    for folder in ("queries/analysis", "pipeline/read", "pipeline/store", "collectors", "reports"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "reports" / "bad.py").write_text("from scaletrace.collectors import session\nimport scaletrace.cli\n")
    (tmp_path / "pipeline" / "read" / "bad.py").write_text("from scaletrace.pipeline.store import db\n")
    (tmp_path / "pipeline" / "store" / "ok.py").write_text("from scaletrace.pipeline.read import extract\n"
                                                           "from scaletrace.queries import definitions\n")
    (tmp_path / "queries" / "analysis" / "bad.py").write_text("from scaletrace.pipeline.store.db import connect\n")
    (tmp_path / "queries" / "analysis" / "ok.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                                             "    from scaletrace.pipeline.store.db import Database\n")
    assert violations(tmp_path) == ["pipeline/read/bad.py:1 imports scaletrace.pipeline.store",
                                    "pipeline/read/bad.py:1 imports scaletrace.pipeline.store.db",
                                    "queries/analysis/bad.py:1 imports scaletrace.pipeline.store.db",
                                    "queries/analysis/bad.py:1 imports scaletrace.pipeline.store.db.connect",
                                    "reports/bad.py:1 imports scaletrace.collectors",
                                    "reports/bad.py:1 imports scaletrace.collectors.session",
                                    "reports/bad.py:2 imports scaletrace.cli"]
