"""Imports go down the layers only: queries (the SQL and its loader) <- pipeline (reading and storing
traces) <- collectors, reports (neither imports the other) <- the CLI.  A module that imported from
its own layer's neighbour or from above would tie the layers into a knot."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"queries": 0, "pipeline": 1, "collectors": 2, "reports": 2, "cli": 3}


def violations(root: Path) -> list[str]:
    """Every ``scaletrace.X`` import from a folder whose layer is not above X's."""
    found = []
    for folder in ("queries", "pipeline", "collectors", "reports"):
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    modules = [node.module]
                elif isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                else:
                    continue
                for module in modules:
                    parts = module.split(".")
                    target = parts[1] if parts[0] == "scaletrace" and len(parts) > 1 else None
                    if target in LAYERS and target != folder and LAYERS[target] >= LAYERS[folder]:
                        found.append(f"{path.relative_to(root)}:{node.lineno} imports {module}")
    return found


def test_imports_go_down_the_layers():
    assert violations(ROOT) == []


def test_the_check_sees_an_import_from_above(tmp_path):
    for folder in LAYERS:
        (tmp_path / folder).mkdir()
    (tmp_path / "reports" / "bad.py").write_text("from scaletrace.collectors import session\nimport scaletrace.cli\n")
    (tmp_path / "pipeline" / "ok.py").write_text("from scaletrace.queries import definitions\n")
    assert violations(tmp_path) == ["reports/bad.py:1 imports scaletrace.collectors",
                                    "reports/bad.py:2 imports scaletrace.cli"]
