"""The run manifest, ``run.json`` (docs: "The run manifest"): the one type that reads and writes it.

Every key is optional.  Unknown keys are kept (in ``runs.manifest``) and
warned about; a key of the wrong type is a one-line error naming the key.
The collector (``collectors/session.py``) and the generator
(``pipeline/synth.py``) write through :func:`write_manifest`; ingest reads
through :func:`read_manifest`.

The ``runs`` table's columns are the manifest's scalar fields, flattened
(:data:`COLUMNS`): a nested field keeps its own name (``parallel.dp`` -> ``dp``,
``device.peak_flops`` -> ``peak_flops``) except ``name``, which takes its
parent's (``model.name`` -> ``model_name``).  Fields that hold lists or
dicts (``software``, ``hosts``, ``labels``, ...) stay in ``runs.manifest``.
The collector's ``RunInfo`` uses the same column names.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Optional

import msgspec

from scaletrace.pipeline.common import limits
from scaletrace.pipeline.common.oneline import describe

MANIFEST_NAME = "run.json"
TRACE_SUFFIXES = (".json", ".json.gz")


class ManifestError(ValueError):
    """A run.json that cannot be used."""


# Every number the metrics divide by or multiply with has a range: a zero
# world size, peak or tokens per step is a division by zero in the report, a 1e-320 peak or a
# 1e308 FLOPs per token an infinite MFU, 2^63 - 1 an overflow in SQL.  Outside it, run.json (or
# --meta) is refused with one line naming the key; the bounds are far beyond any real run.
Count = Annotated[int, msgspec.Meta(ge=1, le=limits.INT32_MAX)]  # ranks, nodes, degrees, batch, layers
Tokens = Annotated[int, msgspec.Meta(ge=1, le=2**53)]  # tokens per step
Params = Annotated[float, msgspec.Meta(ge=1, le=1e16)]
FlopsPerToken = Annotated[float, msgspec.Meta(ge=1, le=1e18)]
PeakFlops = Annotated[float, msgspec.Meta(ge=1e6, le=1e19)]  # FLOP/s per device: a MFLOP/s to 10 EFLOP/s


class Parallel(msgspec.Struct, forbid_unknown_fields=False):
    dp: Optional[Count] = None
    tp: Optional[Count] = None
    pp: Optional[Count] = None
    cp: Optional[Count] = None


class Model(msgspec.Struct):
    name: Optional[str] = None
    num_params: Optional[Params] = None
    num_layers: Optional[Count] = None
    hidden_size: Optional[Count] = None
    flops_per_token: Optional[FlopsPerToken] = None


class Device(msgspec.Struct):
    name: Optional[str] = None
    peak_flops: Optional[PeakFlops] = None
    peak_flops_source: Optional[str] = None


class Manifest(msgspec.Struct):
    run_id: Optional[str] = None
    workload: Optional[str] = None
    scaling: Optional[str] = None
    world_size: Optional[Count] = None
    num_nodes: Optional[Count] = None
    gpus_per_node: Optional[Count] = None
    cpu_cores: Optional[Count] = None  # CPU cores the job could use on each host (the collector records it)
    dtype: Optional[str] = None  # compute dtype of the matmuls: bf16, fp16, tf32 or fp32 (picks the peak)
    parallel: Parallel = msgspec.field(default_factory=Parallel)
    global_batch_size: Optional[Count] = None
    seq_len: Optional[Count] = None
    tokens_per_step: Optional[Tokens] = None
    model: Model = msgspec.field(default_factory=Model)
    device: Device = msgspec.field(default_factory=Device)
    software: Optional[dict[str, Optional[str]]] = None
    hosts: Optional[list[str]] = None
    labels: Optional[dict] = None
    ranks: Optional[dict[str, int]] = None  # trace file name -> rank, for traces without one
    power: Optional[dict] = None  # written by the collector: power sampling source or why none
    collector: Optional[dict] = None  # written by the collector: version, schedule, problems

    @classmethod
    def from_columns(cls, columns: dict, **fields) -> "Manifest":
        """A manifest from ``runs`` column names (``{"dp": 8, "model_name": "llama"}``) and
        top-level ``fields`` (``labels=...``); validates the types.  KeyError: not a column."""
        data: dict = dict(fields)
        for column, value in columns.items():
            if column not in COLUMNS:
                raise KeyError(f"{column!r} is not a run.json column (one of {', '.join(COLUMNS)})")
            *parents, key = COLUMNS[column]
            node = data
            for parent in parents:
                node = node.setdefault(parent, {})
            node[key] = value
        return msgspec.convert(data, cls)

    def columns(self) -> dict:
        """The manifest's values by ``runs`` column name (see :data:`COLUMNS`)."""
        values = {}
        for column, path in COLUMNS.items():
            value = self
            for key in path:
                value = getattr(value, key)
            values[column] = value
        return values


def _scalar_columns(struct: type, parent: str | None = None) -> dict[str, tuple[str, ...]]:
    """column name -> path of the field in the manifest, for every scalar field (see the module doc)."""
    columns = {}
    for field in msgspec.inspect.type_info(struct).fields:
        kind = field.type
        if isinstance(kind, msgspec.inspect.StructType):
            columns.update({c: (field.name, *path) for c, path in _scalar_columns(kind.cls, field.name).items()})
            continue
        members = kind.types if isinstance(kind, msgspec.inspect.UnionType) else (kind,)
        if all(isinstance(t, (msgspec.inspect.IntType, msgspec.inspect.FloatType, msgspec.inspect.StrType,
                              msgspec.inspect.NoneType)) for t in members):
            column = f"{parent}_{field.name}" if parent and field.name == "name" else field.name
            assert column not in columns, f"two manifest fields flatten to the column {column}"
            columns[column] = (field.name,)
    return columns


COLUMNS: dict[str, tuple[str, ...]] = _scalar_columns(Manifest)  # runs column -> path in run.json
KNOWN_KEYS = set(Manifest.__struct_fields__)


def read_manifest(run_dir: Path) -> tuple[Manifest, str | None, list[str]]:
    """The manifest of a run directory, its raw JSON text and warnings (empty when absent).

    Every way a run.json can be unusable is a ManifestError, never another exception: not a
    regular file, unreadable, too large, nested too deep, an integer too long to convert."""
    path = run_dir / MANIFEST_NAME
    if not os.path.lexists(path):
        return Manifest(), None, []
    try:
        raw = limits.read_regular(path, limits.MAX_MANIFEST_BYTES, "the run.json size limit")
    except (OSError, limits.LimitError) as exc:
        raise ManifestError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        manifest = msgspec.json.decode(raw, type=Manifest)
        keys = msgspec.json.decode(raw, type=dict[str, msgspec.Raw])  # keys only: no value is converted
    except msgspec.ValidationError as exc:
        raise ManifestError(f"{path}: {_key_message(exc)}") from None
    except msgspec.DecodeError as exc:
        raise ManifestError(f"{path}: not valid JSON ({exc})") from None
    except RecursionError:
        raise ManifestError(f"{path}: nested too deeply to read") from None
    except Exception as exc:  # the backstop: one line for the run, never the whole ingest's traceback
        raise ManifestError(f"{path}: cannot be read ({describe(exc)})") from None
    if manifest.scaling not in (None, "strong", "weak"):
        raise ManifestError(f"{path}: key 'scaling' must be \"strong\" or \"weak\", got {manifest.scaling!r}")
    unknown = sorted(set(keys) - KNOWN_KEYS)
    warnings = [f"{path}: unknown key '{k}' kept in runs.manifest" for k in unknown]
    return manifest, raw.decode("utf-8", "replace"), warnings


def write_manifest(run_dir: Path, manifest: Manifest) -> Path:
    """Write ``run_dir/run.json`` (every key, nulls included, so a reader sees what can be filled)."""
    path = Path(run_dir) / MANIFEST_NAME
    path.write_bytes(msgspec.json.format(msgspec.json.encode(manifest), indent=2) + b"\n")
    return path


def _key_message(exc: msgspec.ValidationError) -> str:
    text = str(exc)
    if " - at `$." in text:
        reason, key = text.rsplit(" - at `$.", 1)
        return f"key '{key.rstrip('`')}': {reason}"
    return text


def run_row(run_id: str, source_dir: str, m: Manifest, raw: str | None, meta_keys: tuple[str, ...] = ()) -> dict:
    """The ``runs`` table row for a manifest: its columns, the resolved ``run_id``, the source
    directory, the raw JSON and the keys ``--meta`` gave (``apply_meta``; NULL when none);
    ``tokens_per_step`` defaults to batch × seq."""
    row = m.columns()
    if row["tokens_per_step"] is None and m.global_batch_size is not None and m.seq_len is not None:
        row["tokens_per_step"] = m.global_batch_size * m.seq_len
    return {**row, "run_id": run_id, "source_dir": source_dir, "manifest": raw,
            "meta_keys": sorted(meta_keys) or None}


# -- KEY=VALUE facts: `scaletrace collect --meta` and `scaletrace ingest --meta` -------------------

class MetaError(ValueError):
    """A ``--meta`` fact (or an ``ingest(meta=...)`` entry) that is not a run.json key of its type."""


def _field_types() -> dict[str, msgspec.inspect.Type]:
    """Every run.json key (dotted below ``parallel``, ``model``, ``device``) -> its type."""
    types = {}
    for f in msgspec.inspect.type_info(Manifest).fields:
        types[f.name] = f.type
        if isinstance(f.type, msgspec.inspect.StructType):
            types.update({f"{f.name}.{sub.name}": sub.type for sub in f.type.fields})
    return types


FIELD_TYPES = _field_types()
# what --meta may set: every run.json key but run_id, objects by their keys (parallel.dp)
META_KEYS = tuple(k for k, t in FIELD_TYPES.items()
                  if k not in ("run_id", "collector", "power") and not isinstance(t, msgspec.inspect.StructType))
COLUMN_PATHS = {column: ".".join(path) for column, path in COLUMNS.items()}  # dp -> parallel.dp


def _members(kind) -> tuple:
    return kind.types if isinstance(kind, msgspec.inspect.UnionType) else (kind,)


def _key_type(key: str):
    """The type of run.json key ``key`` (a dotted path, or a ``runs`` column name such as ``dp``);
    a key below a mapping (``labels.fabric``) has the mapping's value type; None: not a key."""
    key = key if key in FIELD_TYPES else COLUMN_PATHS.get(key, key)
    if key in FIELD_TYPES:
        return FIELD_TYPES[key]
    parent, _, child = key.partition(".")
    mapping = [t for t in _members(FIELD_TYPES.get(parent, msgspec.inspect.NoneType()))
               if isinstance(t, msgspec.inspect.DictType)]
    return mapping[0].value_type if child and mapping else None


def parse_meta(pairs: list[str]) -> dict:
    """``["workload=llama", "parallel.tp=8"]`` -> ``{"workload": "llama", "parallel.tp": 8}``: the
    value as JSON when it parses (numbers, lists), else as text; a run.json key that holds text
    keeps the text as written (``workload=123`` is the string "123").  ValueError: not KEY=VALUE."""
    meta = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--meta wants KEY=VALUE, got {pair!r}")
        kind = _key_type(key)
        if kind is not None and any(isinstance(t, msgspec.inspect.StrType) for t in _members(kind)):
            meta[key] = value
            continue
        try:
            meta[key] = json.loads(value)
        except json.JSONDecodeError:
            meta[key] = value
    return meta


def _flatten(meta: dict) -> dict:
    """``{"parallel": {"tp": 8}}`` -> ``{"parallel.tp": 8}`` (objects under a key that holds a
    struct or a mapping), so that each key is merged, and reported, on its own."""
    flat = {}
    for key, value in meta.items():
        nested = key in FIELD_TYPES and any(isinstance(t, (msgspec.inspect.StructType, msgspec.inspect.DictType))
                                            for t in _members(FIELD_TYPES[key]))
        if nested and isinstance(value, dict):
            flat.update({f"{key}.{sub}": v for sub, v in value.items()})
        else:
            flat[key] = value
    return flat


def check_meta(meta: dict | None) -> dict:
    """The facts of ``--meta`` / ``ingest(meta=...)`` as dotted run.json keys, checked: each key
    is a run.json key (``parallel.tp``, not ``tp``), ``run_id`` is refused (the facts apply to
    every run of the ingest), and each value has the key's type (the Manifest's validation).
    MetaError: one line naming the key."""
    flat = _flatten(dict(meta or {}))
    for key, value in flat.items():
        if key == "run_id":
            raise MetaError("--meta run_id: the facts apply to every run of the ingest; name a run in its run.json")
        if key not in FIELD_TYPES and _key_type(key) is None or key in COLUMN_PATHS and key not in FIELD_TYPES:
            hint = f" (did you mean {COLUMN_PATHS[key]}?)" if key in COLUMN_PATHS else ""
            raise MetaError(f"--meta {key}: not a run.json key{hint}; keys: {', '.join(META_KEYS)}")
        try:
            msgspec.convert(_nest({key: value}), Manifest)
        except msgspec.ValidationError as exc:
            reason = str(exc).split(" - at `", 1)[0]
            raise MetaError(f"--meta {key}={value!r}: {reason}") from None
        if key == "scaling" and value not in ("strong", "weak"):
            raise MetaError(f"--meta scaling: must be \"strong\" or \"weak\", got {value!r}")
    return flat


def _nest(flat: dict) -> dict:
    data: dict = {}
    for key, value in flat.items():
        *parents, leaf = key.split(".", 1) if "." in key else [key]
        node = data
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = value
    return data


def apply_meta(manifest: Manifest, raw: str | None, meta: dict | None) -> tuple[Manifest, str | None, tuple[str, ...]]:
    """``manifest`` and its JSON text ``raw`` (for ``runs.manifest``) with the checked ``meta``
    facts (``check_meta``) filled in where run.json has no value (run.json wins, key by key),
    and the keys that were filled (sorted)."""
    if not meta:
        return manifest, raw, ()
    data = msgspec.to_builtins(manifest)
    applied = tuple(sorted(key for key, value in meta.items() if _fill(data, key, value)))
    if not applied:
        return manifest, raw, ()
    text = json.loads(raw) if raw else {}
    for key in applied:
        _fill(text, key, meta[key])
    return msgspec.convert(data, Manifest), json.dumps(text), applied


def _fill(data: dict, key: str, value) -> bool:
    """Set dotted ``key`` of ``data`` to ``value`` unless it holds a value already; True if set."""
    *parents, leaf = key.split(".", 1) if "." in key else [key]
    node = data
    for parent in parents:
        if not isinstance(node.get(parent), dict):
            node[parent] = {}
        node = node[parent]
    if node.get(leaf) is not None:
        return False
    node[leaf] = value
    return True


def is_trace_file(path: Path) -> bool:
    """A file a run directory holds as a trace (``*.json``, ``*.json.gz``; not run.json)."""
    return path.name != MANIFEST_NAME and path.name.endswith(TRACE_SUFFIXES)
