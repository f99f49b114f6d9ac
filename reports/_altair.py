"""Altair, imported once for every chart module (``reports/__init__.py`` imports this first)."""

from __future__ import annotations

import sys


def import_altair() -> None:
    """Import Altair without jsonschema's IRI format checks.  Where jupyterlab's extras installed
    ``rfc3987_syntax``, jsonschema compiles its grammar when it is imported (2.4 s of CPU, every
    ``report``); the Vega-Lite schema Altair validates against has no ``iri`` format, the only one
    that package checks.  A later ``import rfc3987_syntax`` elsewhere works as usual."""
    absent = "rfc3987_syntax" not in sys.modules
    if absent:
        sys.modules["rfc3987_syntax"] = None  # an ImportError to jsonschema, which then skips the check
    try:
        import altair  # noqa: F401
    finally:
        if absent and sys.modules.get("rfc3987_syntax", 0) is None:
            del sys.modules["rfc3987_syntax"]


import_altair()
