"""What the stored rows of a trace were made by, and the rank a file's name gives: all an ingest
needs to decide that a stored trace is current without importing the parser (numpy, pyarrow and
the scanner load only when a file is parsed)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from scaletrace.pipeline.read import families
from scaletrace.pipeline.read.vocabulary import COMM_KERNELS

# What the stored rows of a trace hold, for the same bytes: an ingest parses again a trace stored under
# another version (runsync.known_files).  2: device_events gained launch_op, family, family_basis,
# short_name; 3: wait_stream, wait_event_corr (CUDA sync events); 4: launch_op found by External id too
# (2021 schema), backward nodes read as their forward op (pipeline/read/launchers.py); the digest follows
# the family and communication tables, so a release that changes a rule re-classifies stored traces on their next ingest.
_RULES = (families.OP_FAMILIES, families.NAME_FAMILIES, sorted(families.ABSORBING), COMM_KERNELS,
          [r.pattern for r in (families.OPAQUE_OPS, families.ENGINE_WRAPPER_RE, families.CPP_NODE_RE,
                               families.BACKWARD_NODE_RE, families.FUSED_WITH_GEMM_RE)])
EXTRACT_VERSION = "4-" + hashlib.sha256(repr(_RULES).encode()).hexdigest()[:12]

RANK_RE = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def rank_from_filename(path: Path) -> int | None:
    """The N of ``rank<N>`` (``rank-N``, ``rank_N``, any case) in the file's name, else None."""
    match = RANK_RE.search(path.name)
    return int(match.group(1)) if match else None
