"""Ingest benchmark: scaletrace vs HTA's TraceAnalysis load vs the decode floor, in one run.

Not a test (pytest does not collect tests/bench).  Usage:

    .venv/bin/python tests/bench/ingest.py [--copies 4] [--traces ../shared/traces]

Builds a trace set from the real traces HTA can load (each run folder copied
``--copies`` times as separate runs), then times, on the same files:

* HTA: ``TraceAnalysis(trace_dir=...)`` for every run folder (its own parse);
* floor: gunzip + msgspec decode of the fields scaletrace uses, nothing else,
  over the same process pool size scaletrace uses;
* the physical floor: gunzip + simdjson's own parse of the same bytes (pysimdjson,
  a dev dependency), the floor for this design's compiled extractor;
* scaletrace: ``scaletrace ingest`` into a fresh database (a subprocess, so its
  peak RSS, the largest of the main process and each worker, is measured).

Prints MB/s (uncompressed JSON), the ratios, and peak RSS against the largest
single file, for 1 copy and ``--copies`` copies: RSS should not grow with the
number of files.

Then the fixed costs, each a whole ``scaletrace ingest -q`` process (interpreter start
included): a no-op re-ingest of the unchanged set (three in a row); each small run of
``SMALL_RUNS`` ingested alone, into a new database and into the set's, against HTA's load of
that run (``TraceAnalysis`` alone, as above, and HTA as a script runs it: a fresh interpreter,
its import, the load); and ``--small-copies`` copies of those runs ingested in one command
against HTA loading each of them in one process.

A new database is a copy of a template kept in a cache directory (docs/ingest.md): the benchmark
uses a cache of its own, the template set up before any timing, as on a machine where scaletrace
has ingested before; the small run into a new database is also timed with an empty cache (the
first ingest on a machine, which sets the template up).

Every scaletrace figure is given for both extractors (README, "The compiled
extractor"): the compiled scanner and the reference (``SCALETRACE_EXTRACTOR=python``).
Then one large trace (``--big-mb``, default 170 MB of JSON: a real GPU trace's
events replicated with shifted timestamps, correlations and step numbers):

* ingested as a user would, a whole ``scaletrace ingest`` process with every core
  (its scan split across them: docs/ingest.md, "One large file"), ``--big-runs`` times,
  against 177 MB/s (Perfetto's C++ importer on one core) and a peak RSS of 2 x the file
  + 300 MB; with ``--baseline DIR`` (another checkout of scaletrace, built: the folder
  that holds its ``pipeline/``), that version is timed in the same run, interleaved;
* against the floors in the same run: read + msgspec's typed decode, and read +
  simdjson's own parse (pysimdjson), each on one core;
* ingested by a single worker per extractor, with the time of each stage of the
  worker's parse (the sha256 runs in a thread beside the gunzip and the scan, as in
  the ingest: shown apart, not in the sum).

``--only-big`` skips everything before the large trace (the set, HTA, the fixed costs).
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from typing import Optional, Union  # noqa: E402

import msgspec  # noqa: E402

from scaletrace.pipeline.read.decode import Event  # noqa: E402  the exact typed event struct ingest decodes

EXTRACTORS = {"compiled": "compiled", "python": "python"}  # label -> SCALETRACE_EXTRACTOR
BIG_SOURCE = "hta-a100-2rank/rank0.json.gz"  # fractional-µs stamps, NCCL args, memcpy: a typical GPU trace


class FloorDoc(msgspec.Struct):
    traceEvents: Optional[list[Event]] = None


FLOOR = msgspec.json.Decoder(Union[FloorDoc, list[Event]])

SMALL_RUNS = ["hta-triton", "hta-mi250-rocm"]  # one trace each, 17 kB and 67 kB of JSON: fixed costs dominate
HTA_LOADABLE = ["hta-a100-2rank", "hta-mi250-rocm", "hta-ns-resolution", "hta-triton",
                "hta-ws128-sampled", "param-dlrm-8rank", "tracelens-b200"]


def build_set(src: Path, dest: Path, copies: int) -> list[Path]:
    runs = []
    for copy in range(copies):
        for name in HTA_LOADABLE:
            run = dest / f"{name}-copy{copy}"
            shutil.copytree(src / name, run)
            runs.append(run)
    return runs


def json_bytes(files: list[Path]) -> int:
    return sum(len(gzip.decompress(f.read_bytes())) for f in files)


def floor_one(path: str) -> int:
    data = gzip.decompress(Path(path).read_bytes())
    doc = FLOOR.decode(data)  # every event's fields, typed, in one call: nothing else
    return len(doc.traceEvents if isinstance(doc, FloorDoc) else doc)


def physical_one(path: str) -> int:
    """The physical floor of this design: gunzip (ISA-L where installed, as ingest uses) and
    simdjson's own parse of the same bytes (pysimdjson: stage 1 and the tape; nothing read out)."""
    import simdjson

    from scaletrace.pipeline.common import limits

    inflate = limits._FAST_ZLIB or zlib
    data = inflate.decompress(Path(path).read_bytes(), 16 + zlib.MAX_WBITS)
    simdjson.Parser().parse(data)
    return len(data)


def time_floor(files: list[Path], workers: int, one=floor_one) -> float:
    start = time.perf_counter()
    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(one, [str(f) for f in files]))
    return time.perf_counter() - start


def time_physical(files: list[Path], workers: int) -> float | None:
    """The gunzip + simdjson floor over the pool, or None where pysimdjson is not installed."""
    try:
        import simdjson  # noqa: F401
    except ImportError:
        return None
    return time_floor(files, workers, physical_one)


def time_hta(runs: list[Path]) -> float:
    from hta.trace_analysis import TraceAnalysis
    logging.disable(logging.WARNING)
    start = time.perf_counter()
    for run in runs:
        TraceAnalysis(trace_dir=str(run))
    return time.perf_counter() - start


def time_scaletrace(paths: list[Path], db: Path, extractor: str = "compiled",
                    workers: int | None = None, version: Path | None = None) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of the largest process of one ingest; ``version``: the
    scaletrace checkout to run (default: this one)."""
    code = ("import resource, sys; from scaletrace import ingest; "
            f"r = ingest(sys.argv[1:-1], db=sys.argv[-1], workers={workers!r}); "
            "assert not r.errors, [o.line() for o in r.errors]; "
            # VmHWM, not RUSAGE_SELF: Linux keeps ru_maxrss across exec, so it would report this
            # benchmark's own size at the fork (it holds the large trace's events while building it)
            "hwm = int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1]); "
            "print(max(hwm, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))")
    env = {**os.environ, "SCALETRACE_EXTRACTOR": EXTRACTORS[extractor],
           **({"PYTHONPATH": str(package_root(version))} if version else {})}
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code, *map(str, paths), str(db)], cwd=version or ROOT,
                         capture_output=True, text=True, check=True, env=env)
    return time.perf_counter() - start, int(out.stdout.strip().splitlines()[-1]) / 1024


def package_root(checkout: Path) -> Path:
    """A folder from which ``import scaletrace`` loads ``checkout`` (a link named scaletrace to it)."""
    root = Path(tempfile.mkdtemp(prefix="scaletrace-baseline-"))
    (root / "scaletrace").symlink_to(checkout.resolve())
    return root


def time_cli(paths: list[Path], db: Path, cache: Path | None = None) -> float:
    """Wall seconds of one ``scaletrace ingest -q`` process (the console script beside this Python);
    ``cache``: its SCALETRACE_CACHE_DIR (where a new database's template is kept)."""
    script = Path(sys.executable).with_name("scaletrace")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "scaletrace.cli"]
    start = time.perf_counter()
    env = {**os.environ, **({"SCALETRACE_CACHE_DIR": str(cache)} if cache else {})}
    subprocess.run([*command, "ingest", *map(str, paths), "--db", str(db), "-q"], cwd=ROOT, check=True,
                   capture_output=True, env=env)
    return time.perf_counter() - start


HTA_SCRIPT = ("import logging, sys; logging.disable(logging.WARNING); "
              "from hta.trace_analysis import TraceAnalysis; [TraceAnalysis(trace_dir=d) for d in sys.argv[1:]]")


def time_hta_process(runs: list[Path]) -> float:
    """HTA as a script loads ``runs``: a fresh interpreter, HTA's import, then each run's TraceAnalysis."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", HTA_SCRIPT, *map(str, runs)], check=True, capture_output=True)
    return time.perf_counter() - start


def fixed_costs(traces: Path, tmp: Path, set_runs: list[Path], set_db: Path, copies: int) -> None:
    """The no-op re-ingest, a small run alone, and many small runs in one command (module docstring)."""
    print(f"\nfixed costs (whole `scaletrace ingest -q` processes):")
    noop = [time_cli(set_runs, set_db) for _ in range(3)]
    print(f"  no-op re-ingest of the {sum(len(list(r.iterdir())) for r in set_runs)} unchanged traces: "
          + " / ".join(f"{t:.2f}" for t in noop) + " s  (target well under 0.3 s)")
    for name in SMALL_RUNS:
        run = tmp / "small" / f"{name}-alone"
        shutil.copytree(traces / name, run)
        t_hta, t_hta_process = time_hta([run]), time_hta_process([run])
        t_new = time_cli([run], tmp / f"alone-{name}.duckdb")
        t_first = time_cli([run], tmp / f"first-{name}.duckdb", cache=tmp / f"empty-cache-{name}")
        shutil.copytree(traces / name, tmp / "small" / f"{name}-into-set")
        t_into = time_cli([tmp / "small" / f"{name}-into-set"], set_db)
        print(f"  {name} alone ({json_bytes(list(run.iterdir())) / 1e3:.0f} kB JSON): HTA load {t_hta:.2f} s, "
              f"HTA script {t_hta_process:.2f} s; scaletrace into a new database {t_new:.2f} s "
              f"({t_hta / t_new:.2f} x / {t_hta_process / t_new:.1f} x HTA; the first on a machine, "
              f"its template set up, {t_first:.2f} s), into the set's {t_into:.2f} s "
              f"({t_hta / t_into:.2f} x / {t_hta_process / t_into:.1f} x HTA)  (target >= 5 x)")
    many = []
    for copy in range(copies):
        for name in SMALL_RUNS:
            many.append(tmp / "many" / f"{name}-{copy}")
            shutil.copytree(traces / name, many[-1])
    t_hta, t_hta_process = time_hta(many), time_hta_process(many)
    t_ours = time_cli([tmp / "many"], tmp / "many.duckdb")
    print(f"  {len(many)} small runs in one command: HTA load {t_hta:.2f} s, HTA script {t_hta_process:.2f} s; "
          f"scaletrace {t_ours:.2f} s ({t_hta / t_ours:.1f} x / {t_hta_process / t_ours:.1f} x HTA)  (target >= 10 x)")


def build_big(src: Path, dest: Path, min_bytes: int) -> int:
    """A trace of at least ``min_bytes`` of JSON: ``src``'s events copied with timestamps shifted
    past the previous copy, correlations and External ids moved apart, step numbers renumbered.
    Numbers keep their digits (Decimal), so fractional-µs stamps stay as written."""
    import msgspec
    from decimal import Decimal
    doc = json.loads(gzip.decompress(src.read_bytes()), parse_float=Decimal)
    events = doc["traceEvents"]
    ends = [e["ts"] + e.get("dur", 0) for e in events if isinstance(e.get("ts"), (int, Decimal))]
    span = max(ends) - min(ends) + 1000
    encoder = msgspec.json.Encoder(decimal_format="number")
    copies = -(-min_bytes // len(encoder.encode(doc)))
    out = []
    for k in range(copies):
        for e in events:
            e = dict(e)
            if isinstance(e.get("ts"), (int, Decimal)):
                e["ts"] = e["ts"] + k * span
            if isinstance(e.get("args"), dict):
                e["args"] = {key: v + k * 10_000_000 if key in ("correlation", "External id") and isinstance(v, int)
                             else v for key, v in e["args"].items()}
            if isinstance(e.get("name"), str) and e["name"].startswith("ProfilerStep#"):
                e["name"] = f"ProfilerStep#{int(e['name'][13:]) + 100 * k}"
            out.append(e)
    doc["traceEvents"] = out
    data = encoder.encode(doc)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)
    return len(data)


STAGES = r"""
import json, sys, time, resource, hashlib, os
from scaletrace.pipeline.read import columns
from scaletrace.pipeline.common import limits
from scaletrace.pipeline.read.classify import Classifier
from scaletrace.pipeline.read.decode import decode, unpack
from scaletrace.pipeline.read.extract import build, read, scan_or_decode
from scaletrace.pipeline.execute.ingest import prescans
t = {}
def lap(name, start):
    t[name] = time.perf_counter() - start
    return time.perf_counter()
now = time.perf_counter()
import threading
raw = limits.read_regular(sys.argv[1], 1 << 40); now = lap("read", now)
beside = {}
def digest(data=raw):  # as parse_file: a new file's sha256 in a thread beside the gunzip and the scan
    start = time.perf_counter(); hashlib.sha256(data).hexdigest(); beside["sha256"] = time.perf_counter() - start
hashing = threading.Thread(target=digest); hashing.start()
data = unpack(raw, check_utf8=False); del raw; now = lap("gunzip", now)  # as parse_file
classifier = Classifier()
doc = scan_or_decode(data, utf8_checked=False, device_categories=classifier.device_categories); hashing.join()
now = lap("scan (simdjson, validates UTF-8; answers the pre-scans)" if isinstance(doc, columns.Scanned)
          else "UTF-8 check + decode (msgspec, raw events)", now)
fractional, gpu = prescans(doc, data, classifier); del data  # as parse_file
if not isinstance(doc, columns.Scanned):
    now = lap("byte regex pre-scans", now)
kept = read(doc, classifier, False, gpu)
now = lap("stage 1: keep/drop per distinct value" if isinstance(doc, columns.Scanned)
          else "stage 1: msgspec Event per event + Python filter", now)
ext = build(kept, classifier, fractional); now = lap("stage 2: tables (numpy / Arrow)", now)
print(json.dumps({"extractor": columns.active_extractor(), "stages": t, "beside": beside,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def time_stages(path: Path, extractor: str) -> dict:
    """Seconds per stage of one worker's parse of ``path`` (a fresh process, as a worker is)."""
    env = {**os.environ, "SCALETRACE_EXTRACTOR": EXTRACTORS[extractor]}
    out = subprocess.run([sys.executable, "-c", STAGES, str(path)], cwd=ROOT, capture_output=True, text=True,
                         check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def floor_big(path: Path) -> float:
    start = time.perf_counter()
    doc = FLOOR.decode(path.read_bytes())
    assert doc.traceEvents
    return time.perf_counter() - start


def physical_big(path: Path) -> float | None:
    """Read + simdjson's own parse of the file on one core, or None without pysimdjson."""
    try:
        import simdjson
    except ImportError:
        return None
    start = time.perf_counter()
    simdjson.Parser().parse(path.read_bytes())
    return time.perf_counter() - start


PERFETTO_MB_S = 177  # Perfetto's C++ JSON importer, one core (the design brief's target)


def whole_big(path: Path, tmp: Path, mb: float, runs: int, baseline: Path | None, small_run: Path) -> None:
    """The large trace ingested as a user would (every core), this version and ``baseline``
    interleaved, with both floors measured between them.  Each version first ingests ``small_run``
    untimed: its template for new databases is then set up, as for the other figures."""
    versions = {"this version": None, **({f"baseline ({baseline})": baseline} if baseline else {})}
    for version in versions.values():
        time_scaletrace([small_run], tmp / f"warm-{version is None}.duckdb", version=version)
    times: dict[str, list[float]] = {v: [] for v in versions}
    rss: dict[str, list[float]] = {v: [] for v in versions}
    floors: dict[str, list[float]] = {"read + msgspec typed decode": [], "read + simdjson parse": []}
    cpu: dict[str, list[float]] = {v: [] for v in versions}  # user + system seconds of all its processes
    for k in range(runs):
        for label, version in versions.items():
            db = tmp / f"whole-{k}-{len(times[label])}-{version is None}.duckdb"
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t, r = time_scaletrace([path.parent], db, version=version)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[label].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            times[label].append(t)
            rss[label].append(r)
            db.unlink()
        floors["read + msgspec typed decode"].append(floor_big(path))
        physical = physical_big(path)
        if physical is not None:
            floors["read + simdjson parse"].append(physical)
    budget = 2 * mb + 300
    print(f"  whole `scaletrace ingest` process, every core ({len(os.sched_getaffinity(0))}), {runs} runs interleaved "
          f"(target {PERFETTO_MB_S} MB/s, peak RSS <= {budget:.0f} MB):")
    for label in versions:
        ts = sorted(times[label])
        median = ts[len(ts) // 2]
        print(f"    {label:40s} " + " / ".join(f"{t:.2f}" for t in times[label])
              + f" s; median {median:.2f} s {mb / median:6.1f} MB/s ({mb / median / PERFETTO_MB_S:.2f} x the target); "
              f"peak RSS {min(rss[label]):.0f}-{max(rss[label]):.0f} MB; CPU "
              + " / ".join(f"{c:.2f}" for c in cpu[label]) + " s")
    if baseline:
        ratios = [b / t for t, b in zip(times["this version"], times[f"baseline ({baseline})"])]
        print("    baseline / this version, run by run: " + " / ".join(f"{r:.2f}" for r in ratios))
    for label, ts in floors.items():
        if ts:
            print(f"    floor, {label + ' (one core)':38s} " + " / ".join(f"{t:.2f}" for t in ts)
                  + f" s; best {mb / min(ts):6.1f} MB/s")


def big_trace(traces: Path, tmp: Path, min_mb: int, runs: int = 3, baseline: Path | None = None) -> None:
    """One large trace: whole processes on every core (against the baseline and the floors), then a
    single worker per extractor with its parse's stages."""
    path = tmp / "big" / "rank0.json"
    mb = build_big(traces / BIG_SOURCE, path, min_mb * 1_000_000) / 1e6
    print(f"\nlarge trace: {mb:.1f} MB JSON ({BIG_SOURCE} replicated)")
    whole_big(path, tmp, mb, runs, baseline, traces / SMALL_RUNS[0])
    print("  one worker:")
    t_floor = floor_big(path)
    print(f"  decode floor (msgspec typed events, in process): {t_floor:6.2f} s {mb / t_floor:7.1f} MB/s")
    for extractor in EXTRACTORS:
        t_ingest, rss = time_scaletrace([path.parent], tmp / f"big-{extractor}.duckdb", extractor, workers=1)
        found = time_stages(path, extractor)
        parse = sum(found["stages"].values())
        print(f"  {found['extractor']:28s} ingest {t_ingest:6.2f} s {mb / t_ingest:7.1f} MB/s "
              f"(whole process), parse {parse:5.2f} s {mb / parse:7.1f} MB/s, "
              f"{t_ingest / t_floor:5.2f} x the floor, peak RSS {rss:.0f} MB")
        for stage, seconds in found["stages"].items():
            print(f"      {stage:46s} {seconds:6.2f} s  {100 * seconds / parse:4.0f} %")
        for stage, seconds in found["beside"].items():
            print(f"      {stage + ' (a thread beside gunzip + scan)':46s} {seconds:6.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--traces", type=Path, default=ROOT.parent / "shared" / "traces")
    parser.add_argument("--big-mb", type=int, default=170, help="size of the large trace (0: skip it)")
    parser.add_argument("--big-runs", type=int, default=3, help="whole-process ingests of the large trace")
    parser.add_argument("--baseline", type=Path, help="another scaletrace checkout, timed beside this one on the "
                                                      "large trace")
    parser.add_argument("--only-big", action="store_true", help="the large trace only")
    parser.add_argument("--small-copies", type=int, default=20, help="copies of each small run for the many-runs case")
    args = parser.parse_args()
    workers = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # a cache of the run's own, its template built before any timing, as on a machine where
        # scaletrace has ingested before (fixed_costs times the first ingest on a machine apart)
        os.environ["SCALETRACE_CACHE_DIR"] = str(tmp / "cache")
        from scaletrace.pipeline.store import template
        template.place(tmp / "warm-up.duckdb")
        if args.only_big:
            big_trace(args.traces, tmp, args.big_mb, args.big_runs, args.baseline)
            return
        runs = build_set(args.traces, tmp / "set", args.copies)
        files = sorted(p for r in runs for p in r.iterdir())
        largest = max(len(gzip.decompress(f.read_bytes())) for f in files) / 1e6
        mb = json_bytes(files) / 1e6
        print(f"machine: {os.uname().machine}, {workers} cores; python {sys.version.split()[0]}")
        print(f"set: {len(files)} traces in {len(runs)} runs, {mb:.1f} MB JSON "
              f"(largest file {largest:.1f} MB), {args.copies} copies of {len(HTA_LOADABLE)} real runs")
        t_hta = time_hta(runs)
        t_floor = time_floor(files, workers)
        t_physical = time_physical(files, workers)
        one_copy = [r for r in runs if r.name.endswith("-copy0")]
        print(f"HTA TraceAnalysis load: {t_hta:7.2f} s  {mb / t_hta:7.1f} MB/s")
        print(f"decode floor:           {t_floor:7.2f} s  {mb / t_floor:7.1f} MB/s  ({workers} processes)")
        if t_physical:
            print(f"gunzip + simdjson floor:{t_physical:7.2f} s  {mb / t_physical:7.1f} MB/s  ({workers} processes)")
        for extractor in EXTRACTORS:
            t_ours, rss = time_scaletrace(runs, tmp / f"bench-{extractor}.duckdb", extractor)
            _, rss_one = time_scaletrace(one_copy, tmp / f"one-{extractor}.duckdb", extractor)
            print(f"scaletrace ingest, {extractor} extractor:")
            print(f"  {t_ours:7.2f} s  {mb / t_ours:7.1f} MB/s  (incl. interpreter start)")
            print(f"  speed-up vs HTA:        {t_hta / t_ours:7.1f} x   (target >= 10 x)")
            print(f"  ratio to the floor:     {t_ours / t_floor:7.2f} x   (target <= 2 x)")
            if t_physical:
                print(f"  ratio to gunzip + simdjson: {t_ours / t_physical:5.2f} x")
            print(f"  peak RSS: {rss:.0f} MB with {len(files)} files, {rss_one:.0f} MB with {len(one_copy)} "
                  f"(largest file {largest:.1f} MB JSON)")
        fixed_costs(args.traces, tmp, runs, tmp / "bench-compiled.duckdb", args.small_copies)
        if args.big_mb:
            big_trace(args.traces, tmp, args.big_mb, args.big_runs, args.baseline)

if __name__ == "__main__":
    main()
