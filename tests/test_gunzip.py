"""The fast gunzip (ISA-L, where installed) gives the standard library's bytes, and its errors."""

from __future__ import annotations

import gzip
import random
import zlib

import pytest

from conftest import FIXTURES, SHARED_TRACES
from scaletrace.pipeline.common import limits

isal = pytest.importorskip("isal", reason="isal is not installed (pip install 'scaletrace[fast]'; make setup does)")


def _both(monkeypatch, raw: bytes, max_bytes: int = 1 << 30):
    """(result or error text) with ISA-L, then with the standard library alone."""
    out = []
    for fast in (limits._FAST_ZLIB, None):
        monkeypatch.setattr(limits, "_FAST_ZLIB", fast)
        try:
            out.append(limits.gunzip(raw, max_bytes, "the limit"))
        except (EOFError, zlib.error, limits.LimitError) as exc:
            out.append(f"{type(exc).__name__}: {exc}")
    return out


def test_isal_is_the_decoder_here():
    assert limits.GZIP_DECODER.startswith("isal")


def test_same_bytes_on_every_gzip_trace(monkeypatch):
    files = sorted(FIXTURES.rglob("*.json.gz")) + sorted(SHARED_TRACES.rglob("*.json.gz"))
    assert files
    for path in files:
        fast, slow = _both(monkeypatch, path.read_bytes())
        assert fast == slow == gzip.decompress(path.read_bytes()), path


def test_same_errors_on_broken_streams(monkeypatch):
    rng = random.Random(7)
    body = bytes(rng.getrandbits(8) for _ in range(50_000)) + b"{}" * 100_000
    good = gzip.compress(body) + gzip.compress(b"[1]")
    cases = [good[:len(good) // 2], good + b"trailing", good[:40] + b"\x00" * 64 + good[104:],
             gzip.compress(b" " * 5_000_000)]
    for _ in range(20):  # random byte flips
        flipped = bytearray(good)
        for _ in range(3):
            flipped[rng.randrange(10, len(flipped))] ^= 1 << rng.randrange(8)
        cases.append(bytes(flipped))
    for raw in cases:
        fast, slow = _both(monkeypatch, raw, max_bytes=4_000_000)
        assert fast == slow


def test_padded_reads_give_the_same_bytes(tmp_path, monkeypatch):
    """read_regular / gunzip with ``pad``: the same bytes, then ``pad`` spaces in the buffer (the
    compiled scanner reads it in place); with and without ISA-L."""
    body = b'{"traceEvents": [' + b'{"ph": "X"},' * 10_000 + b'{}]}'
    plain, packed = tmp_path / "t.json", tmp_path / "t.json.gz"
    plain.write_bytes(body)
    packed.write_bytes(gzip.compress(body[:5000]) + gzip.compress(body[5000:]))
    got = limits.read_regular(plain, 1 << 30, pad=64)
    assert bytes(got) == body and bytes(got.obj) == body + b" " * 64
    for fast in (limits._FAST_ZLIB, None):
        monkeypatch.setattr(limits, "_FAST_ZLIB", fast)
        out = limits.gunzip(limits.read_regular(packed, 1 << 30, pad=64), 1 << 30, pad=64)
        assert bytes(out) == body and bytes(out.obj) == body + b" " * 64
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    assert bytes(limits.read_regular(empty, 1 << 30, pad=64)) == b""
