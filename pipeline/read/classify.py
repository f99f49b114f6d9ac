"""Classification of device activity: the one rule table.

Every GPU event (and, on CPU-only traces, every kept CPU event) gets one
``kind``: ``comm``, ``memory``, ``sync``, ``compute`` or ``other``.  The rules
are data: an ordered list of :class:`Rule`, first match wins.  Override them
with ``scaletrace ingest --rules FILE.json`` (a JSON list of objects with the
same fields) or by passing ``rules=`` to :func:`pipeline.execute.ingest`.

One decision needs more than an event's category and name, so it is taken where the launch link is
known (``pipeline/read/extract.py``, ``_comm_by_launch``): a compute kernel launched directly by a
collective call (:func:`is_collective_call` of its launching op) is communication.

Differences from HTA 0.5.0 (``hta/utils/utils.py``), documented in the README:

* HTA calls a kernel communication only when it matches ``^nccl.*Kernel``;
  we also accept ``rccl`` anywhere and ``hccl`` prefixes, any case.
* HTA calls ``Stream Wait Event`` and anything containing ``Sync`` "other";
  we call them ``sync``.
* HTA's ``hta_temporal_breakdown`` / ``hta_comm_comp_overlap`` queries keep
  HTA's own rules, so those two queries reproduce HTA exactly.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from scaletrace.pipeline.read import vocabulary as vocab
from scaletrace.pipeline.read.families import function_name
from scaletrace.pipeline.read.vocabulary import KINDS


def field_text(field: str, cat: str, name: str) -> str:
    """What a rule of ``field`` looks at: the name, its function name, or the category."""
    return name if field == "name" else function_name(name) if field == "function" else cat


@dataclass(frozen=True)
class Rule:
    """One classification rule.

    side: ``gpu`` (device events) or ``cpu`` (CPU events on CPU-only traces).
    field: ``name``, ``function`` (the name's qualified function name, without return type, template
    arguments or parameter lists: ``pipeline/families.function_name``) or ``cat`` (the event's
    category, lower-cased).
    match: ``contains`` / ``prefix`` / ``exact`` / ``regex`` (``re.search``); comparisons ignore case.
    pattern: the text to look for.
    kind: the kind given on a match.

    A gpu-side ``cat`` rule with ``exact`` match also makes its category device activity
    (:func:`device_categories`): that is how a rules file adds a category.
    """

    side: str
    field: str
    match: str
    pattern: str
    kind: str

    def matches(self, cat: str, name: str) -> bool:
        text = field_text(self.field, cat, name)
        if self.match == "regex":  # the pattern is not lower-cased: that would turn \W into \w
            return re.search(self.pattern, text, re.IGNORECASE) is not None
        text, pattern = text.lower(), self.pattern.lower()
        if self.match == "contains":
            return pattern in text
        if self.match == "prefix":
            return text.startswith(pattern)
        return text == pattern


DEFAULT_RULES: tuple[Rule, ...] = (
    *(Rule("gpu", "cat", "exact", cat, "comm") for cat in vocab.COMM_CATS),
    Rule("gpu", "name", "contains", "nccl", "comm"),
    Rule("gpu", "name", "contains", "rccl", "comm"),
    Rule("gpu", "name", "prefix", "hccl", "comm"),
    *(Rule("gpu", "function", "regex", pattern, "comm") for pattern, _ in vocab.COMM_KERNELS),
    *(Rule("gpu", "cat", "exact", cat, "memory") for cat in vocab.MEMORY_CATS),  # 2021 schema: "Memcpy"
    Rule("gpu", "name", "prefix", "memcpy", "memory"),
    Rule("gpu", "name", "prefix", "memset", "memory"),
    Rule("gpu", "name", "prefix", "hipmemcpy", "memory"),
    Rule("gpu", "name", "prefix", "hipmemset", "memory"),
    Rule("gpu", "name", "prefix", "dma", "memory"),
    *(Rule("gpu", "cat", "exact", cat, "sync") for cat in vocab.SYNC_CATS),
    Rule("gpu", "name", "exact", "stream wait event", "sync"),
    Rule("gpu", "name", "exact", "event sync", "sync"),
    Rule("gpu", "name", "exact", "context sync", "sync"),
    Rule("gpu", "name", "exact", "stream sync", "sync"),
    *(Rule("gpu", "cat", "exact", cat, "compute") for cat in vocab.KERNEL_CATS),
    # every other device event (a category the vocabulary does not know, found by its stream or device
    # arg: vocabulary.unknown_category) is compute, as HTA counts any event on a stream
    Rule("gpu", "cat", "regex", "", "compute"),
    *(Rule("cpu", "name", "prefix", prefix, "comm") for prefix in vocab.CPU_COMM_PREFIXES),
    Rule("cpu", "name", "regex", vocab.COLLECTIVE_ISSUE_PATTERN, "comm"),  # TorchRec's All2All_Pooled_Req
    Rule("cpu", "name", "regex", vocab.WAIT_PATTERN, "sync"),  # the training thread blocked on a collective
    Rule("cpu", "cat", "exact", vocab.CPU_OP_CAT, "compute"),
)


_ISSUES = re.compile(vocab.COLLECTIVE_ISSUE_PATTERN, re.IGNORECASE)


def is_collective_call(name: str) -> bool:
    """A CPU op that is a collective call (vocabulary.COLLECTIVE_CALL_PREFIXES), or a collective
    Function that issues one (vocabulary.COLLECTIVE_ISSUE_PATTERN: TorchRec's `All2All_Pooled_Req`)."""
    return name.startswith(vocab.COLLECTIVE_CALL_PREFIXES) or issues_collective(name)


def issues_collective(name: str) -> bool:
    """A collective Function that issues its collective on the caller's thread (`All2All_Pooled_Req`)."""
    return _ISSUES.search(name) is not None


def device_categories(rules: tuple[Rule, ...]) -> frozenset[str]:
    """The categories whose events are device activity: the vocabulary's, and every category a
    gpu-side rule names exactly (so a rules file can add one).  Lower case, as extract compares."""
    named = {r.pattern.lower() for r in rules if r.side == "gpu" and r.field == "cat" and r.match == "exact"}
    return vocab.DEVICE_CATS | named


def category_notes(found: dict, unplaced: dict, has_device: bool) -> tuple[str, ...]:
    """What the ingest log says about events of categories the vocabulary does not know (counts by
    category: ``found`` kept as device events for their stream / device arg, ``unplaced`` not): the
    first are said, and a trace stored CPU-only with the second names the largest and the ``--rules``
    that would make it device activity, so that no accelerator's trace is silently taken for CPU work.
    Each note fits a log line (oneline.MAX_MESSAGE_CHARS with the path): names are cut to 40 chars."""
    def short(cat: str) -> str:
        return cat if len(cat) <= 40 else cat[:40] + "…"

    notes = [f"{n} events of category '{short(cat)}' have a stream or device arg: device activity (compute unless "
             "named comm, memory or sync)" for cat, n in sorted(found.items())[:3]]
    if unplaced and not has_device:
        cat = max(sorted(unplaced), key=lambda c: unplaced[c])
        why = f" ({vocab.NOT_TIMELINE_CATS[cat]})" if cat in vocab.NOT_TIMELINE_CATS else ""
        others = f" and {len(unplaced) - 1} other categories" if len(unplaced) > 1 else ""
        rule = json.dumps({"side": "gpu", "field": "cat", "match": "exact", "pattern": cat, "kind": "compute"})
        notes.append(f"stored CPU-only: {unplaced[cat]} events of '{short(cat)}'{why}{others} have no stream or "
                     f"device arg; if device activity, ingest with --rules FILE: [{rule}, then the default rules]")
    return tuple(notes)


class RulesError(ValueError):
    """A rules file that cannot be used."""


def load_rules(path: str | Path) -> tuple[Rule, ...]:
    """Read a JSON list of rules; each object has the fields of :class:`Rule`."""
    try:
        items = json.loads(Path(path).read_text())
        rules = tuple(Rule(**item) for item in items)
    except (OSError, ValueError, TypeError) as exc:
        raise RulesError(f"{path}: not a JSON list of rules ({exc})") from None
    for rule in rules:
        if not all(isinstance(getattr(rule, name), str) for name in Rule.__dataclass_fields__):
            raise RulesError(f"{path}: bad rule {rule}: every field is a string")
        if rule.kind not in KINDS or rule.side not in ("gpu", "cpu"):
            raise RulesError(f"{path}: bad rule {rule}: kind must be one of {KINDS}, side gpu|cpu")
        if rule.field not in ("name", "function", "cat") or rule.match not in ("contains", "prefix", "exact", "regex"):
            raise RulesError(f"{path}: bad rule {rule}: field name|function|cat, match contains|prefix|exact|regex")
        if rule.match == "regex":
            try:
                re.compile(rule.pattern)
            except (re.error, TypeError) as exc:
                raise RulesError(f"{path}: bad rule {rule}: pattern is not a regular expression ({exc})") from None
    return rules


class Classifier:
    """Applies a rule table, caching by (side, cat, name): names repeat a lot.

    ``device_categories``: the categories extract keeps as device events under this table;
    ``device_scan``: the byte regex that finds one of them in a file (ingest's pre-scan)."""

    def __init__(self, rules: tuple[Rule, ...] = DEFAULT_RULES):
        self.rules = rules
        self.steps = _merged(rules)
        self.device_categories = device_categories(rules)
        self.device_scan = vocab.category_scan(self.device_categories)
        self.classify = lru_cache(maxsize=65536)(self._classify)

    def _classify(self, side: str, cat: str, name: str) -> str:
        for rule in self.steps:
            if rule.side == side and rule.matches(cat, name):
                return rule.kind
        return "other"


@dataclass(frozen=True)
class _RegexRun:
    """Consecutive regex rules of one side, field and kind, searched as one alternation: the
    first rule that matches gives the kind, and every rule of the run gives the same one, so
    "some pattern matches" decides as the rules one by one would (one search per name, not one
    per rule)."""

    side: str
    field: str
    kind: str
    regex: re.Pattern

    def matches(self, cat: str, name: str) -> bool:
        return self.regex.search(field_text(self.field, cat, name)) is not None


# what an alternation would change the meaning of: a back-reference (group numbers shift) or a
# global inline flag (allowed only at the start of the whole pattern)
_UNMERGEABLE = re.compile(r"\\[1-9]|\(\?P=|\(\?[aiLmsux]+\)")


def _merged(rules: tuple[Rule, ...]) -> tuple:
    """``rules`` with each run of consecutive regex rules of one side, field and kind (whose
    patterns may be joined) as one :class:`_RegexRun`."""
    steps: list = []
    run: list[Rule] = []

    def close() -> None:
        if len(run) > 1:
            first = run[0]
            steps.append(_RegexRun(first.side, first.field, first.kind,
                                   re.compile("|".join(f"(?:{r.pattern})" for r in run), re.IGNORECASE)))
        else:
            steps.extend(run)
        run.clear()

    for rule in rules:
        joinable = rule.match == "regex" and not _UNMERGEABLE.search(rule.pattern)
        if run and not (joinable and (rule.side, rule.field, rule.kind) == (run[0].side, run[0].field, run[0].kind)):
            close()
        if joinable:
            run.append(rule)
        else:
            steps.append(rule)
    close()
    return tuple(steps)
