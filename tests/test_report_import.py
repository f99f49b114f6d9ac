"""Importing the reports costs no grammar compile: jsonschema's IRI format checker is skipped.

Where jupyterlab's extras installed ``rfc3987_syntax``, jsonschema compiles that package's grammar
when Altair imports it (2.4 s of CPU on this machine, in every ``scaletrace report``).  The
Vega-Lite schema has no ``iri`` format, so ``reports/_altair.py`` imports Altair with the package
hidden, then un-hides it.  Each case runs in a fresh interpreter: an import happens once.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

HAS_RFC3987_SYNTAX = importlib.util.find_spec("rfc3987_syntax") is not None


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.skipif(not HAS_RFC3987_SYNTAX, reason="rfc3987_syntax is not installed: nothing to skip")
def test_reports_import_altair_without_the_iri_grammar_and_leave_the_package_importable():
    got = _run("import sys, scaletrace.reports, altair\n"
               "print('rfc3987_syntax' in sys.modules)\n"
               "import rfc3987_syntax\n"
               "print(rfc3987_syntax.is_valid_syntax('iri', 'https://example.org/ä'))")
    assert got.splitlines() == ["False", "True"]


def test_altairs_vega_lite_schema_has_no_format_the_skipped_checker_checks():
    import json
    from pathlib import Path

    import altair

    schema = Path(altair.__file__).parent / "vegalite" / "v6" / "schema" / "vega-lite-schema.json"
    formats = set()

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("format"), str):
                formats.add(node["format"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(schema.read_text()))
    assert formats and not formats & {"iri", "iri-reference"}, formats
