"""Altair, imported once for every chart module (``reports/__init__.py`` imports this first).

Two of the speed-ups below replace private Altair functions (``_FromDict``'s table, ``_deep_copy``)
with equivalents that do less work; they are installed only on the Altair versions they were checked
against (``PATCHED_FOR``; tests/test_altair_copies.py), so another version draws the same charts,
only slower.  They apply to every chart built in the process, the caller's too.
"""

from __future__ import annotations

from scaletrace.pipeline.common.imports import without_iri_grammar

PATCHED_FOR = ("6.3.",)  # Altair versions whose private functions the speed-ups were written against


def _patchable() -> bool:
    import altair

    return altair.__version__.startswith(PATCHED_FOR)


def import_altair() -> None:
    """Import Altair without jsonschema's IRI grammar (2.4 s of CPU, every ``report``, where
    jupyterlab's extras installed ``rfc3987_syntax``: pipeline/common/imports.py)."""
    with without_iri_grammar():
        import altair  # noqa: F401


def share_class_table() -> None:
    """Build Altair's schema -> class table once per process, not once per shorthand.  ``encode(x="a:Q")``
    wraps each string through ``SchemaBase.from_dict``, whose ``_FromDict`` hashes the JSON of all ~570
    schema classes every time (15 ms a channel; 3 s of a report's charts); the table depends only on the
    classes, so one per set of classes gives the same objects.  Skipped where Altair has no ``_FromDict``."""
    from altair.utils import schemapi

    if not _patchable():
        return
    converter = getattr(schemapi, "_FromDict", None)
    if converter is None or getattr(converter, "_scaletrace_tables", None) is not None:
        return
    build = converter.__init__
    tables: dict[tuple, dict] = {}

    def __init__(self, wrapper_classes, /) -> None:
        classes = tuple(wrapper_classes)
        if classes not in tables:
            build(self, classes)
            tables[classes] = self.class_dict
        self.class_dict = tables[classes]

    converter.__init__ = __init__
    converter._scaletrace_tables = tables


def skip_undefined_in_copies() -> None:
    """Altair's deep copy of a chart (every layer, each time a layered chart is built: ``+``,
    ``.properties()``, ``to_dict()``) recurses into every property of every schema object, most of
    them ``Undefined`` (580,000 of 660,000 calls in one report, 1.5 s); this one returns those
    without the call and copies the rest as Altair does.  Skipped where Altair has no ``_deep_copy``."""
    from altair.utils import schemapi

    if not _patchable():
        return

    original = getattr(schemapi, "_deep_copy", None)
    undefined = getattr(schemapi, "Undefined", None)
    if original is None or undefined is None or getattr(original, "_scaletrace", False):
        return

    def _deep_copy(obj, by_ref):
        if isinstance(obj, schemapi.SchemaBase):
            if copier := getattr(obj, "__deepcopy__", None):
                with schemapi.debug_mode(False):
                    return copier(obj)
            args = [_deep_copy(arg, by_ref) for arg in obj._args]
            kwds = {k: v if v is undefined or k in by_ref else _deep_copy(v, by_ref) for k, v in obj._kwds.items()}
            with schemapi.debug_mode(False):
                return obj.__class__(*args, **kwds)
        if isinstance(obj, list):
            return [_deep_copy(v, by_ref) for v in obj]
        if isinstance(obj, dict):
            return {k: v if k in by_ref else _deep_copy(v, by_ref) for k, v in obj.items()}
        return obj

    _deep_copy._scaletrace = True
    schemapi._deep_copy = _deep_copy


import_altair()
share_class_table()
skip_undefined_in_copies()
