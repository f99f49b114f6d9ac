"""Importing a package that imports jsonschema (Altair, Ray) without jsonschema's IRI grammar.

Where jupyterlab's extras installed ``rfc3987_syntax`` (HTA's, a dev dependency), jsonschema compiles
that package's Lark grammar when it is imported: 2.4 s of CPU, for its ``iri`` format check, which
neither the Vega-Lite schema Altair validates against nor Ray's schemas use.  Marked absent while the
package imports (an ImportError to jsonschema, as where jupyterlab is not installed), the check is left
out; a later ``import rfc3987_syntax`` elsewhere works as usual.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def without_iri_grammar() -> Iterator[None]:
    """Inside: ``rfc3987_syntax`` is absent to an import (unless it was imported already)."""
    absent = "rfc3987_syntax" not in sys.modules
    if absent:
        sys.modules["rfc3987_syntax"] = None
    try:
        yield
    finally:
        if absent and sys.modules.get("rfc3987_syntax", 0) is None:
            del sys.modules["rfc3987_syntax"]
