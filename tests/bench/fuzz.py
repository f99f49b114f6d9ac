"""Long fuzzing run of the trace parser (a script; the test suite runs a short budget).

    .venv/bin/python tests/bench/fuzz.py [--examples 5000]

Mutates the project's micro traces (and hta-triton when ../shared is present)
by truncation, byte flips, insertions and number replacements, gzipped or
not, and checks that parsing never raises: every file yields rows or one
error line.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import test_robustness as fuzz  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=5000)
    args = parser.parse_args()
    counts = {"rows": 0, "errors": 0}
    tmp = Path(tempfile.mkdtemp())

    @settings(max_examples=args.examples, deadline=None, database=None)
    @given(seed=st.sampled_from(range(len(fuzz.SEEDS))), ops=st.lists(fuzz.mutation, min_size=1, max_size=6),
           gz=st.booleans())
    def run(seed, ops, gz):
        fuzz.test_fuzzed_traces_never_raise.hypothesis.inner_test(seed=seed, ops=ops, gz=gz, tmp_path=tmp)
        counts["rows" if _parsed(tmp / "rank0.json") else "errors"] += 1

    start = time.perf_counter()
    run()
    print(f"{args.examples} mutated traces in {time.perf_counter() - start:.0f} s: no exception; "
          f"{counts['rows']} parsed, {counts['errors']} rejected with one line")


def _parsed(path: Path) -> bool:
    from scaletrace.pipeline.classify import DEFAULT_RULES
    from scaletrace.pipeline.ingest import parse_file

    return parse_file(str(path), None, DEFAULT_RULES, False).extracted is not None


if __name__ == "__main__":
    main()
