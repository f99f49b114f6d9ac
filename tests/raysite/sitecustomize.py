"""Imported at start-up by every process of the suite's Ray clusters: tests/raycluster.py puts this
folder first on their PYTHONPATH.

Ray imports jsonschema in each of its processes (the node's agents, its monitor, each worker), and
jsonschema, where ``rfc3987_syntax`` is installed (by jupyterlab's extras: HTA's, a dev dependency),
compiles that package's IRI grammar on import: 2.4 s of CPU in every such process.  Marked absent
here, as it is where jupyterlab is not installed, jsonschema leaves its ``iri`` format check out;
neither Ray nor scaletrace checks the format of an IRI.  (scaletrace's own imports of Ray and Altair
do the same: pipeline/common/imports.py.)"""

import sys

sys.modules.setdefault("rfc3987_syntax", None)
