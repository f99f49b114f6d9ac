"""Arrow arrays from numpy and Python values without importing pandas.

``pa.array`` (on a list or a numpy array alike) and ``Array.to_numpy`` import pandas on their
first call, to check whether a value is a pandas object: 0.2-0.3 s in every process of an
ingest, for a library the ingest never uses.  These build and read the buffers directly, for
the types the tables hold (int64, int32, strings); tests/test_no_pandas.py keeps the ingest free
of pandas.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

INT32_MAX = 2**31 - 1
_NUMPY = {pa.int64(): np.int64, pa.int32(): np.int32, pa.int8(): np.int8, pa.float64(): np.float64,
          pa.uint8(): np.uint8}
_ARROW = {np.dtype(v): k for k, v in _NUMPY.items()}


def _bitmap(valid: np.ndarray) -> tuple[pa.Buffer | None, int]:
    nulls = len(valid) - int(np.count_nonzero(valid))
    return (pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None), nulls


def numeric(data: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """A primitive array over a numpy array's values (int64, int32, int8, float64, uint8);
    ``valid`` (bool): False marks a null."""
    data = np.ascontiguousarray(data)
    typ = _ARROW[data.dtype]
    bitmap, nulls = _bitmap(valid) if valid is not None else (None, 0)
    return pa.Array.from_buffers(typ, len(data), [bitmap, pa.py_buffer(data)], null_count=nulls)


def int64(data) -> pa.Array:
    """An int64 array from a numpy array, or from Python ints and None (null); OverflowError
    beyond 64 bits, as Arrow's own conversion."""
    if isinstance(data, np.ndarray):
        return numeric(data.astype(np.int64, copy=False))
    if None not in data:  # one C pass each
        return numeric(np.array(data, dtype=np.int64).reshape(-1))
    n = len(data)
    values = np.fromiter((0 if v is None else v for v in data), dtype=np.int64, count=n)
    return numeric(values, np.fromiter((v is not None for v in data), dtype=bool, count=n))


def full(value: int, n: int, typ: pa.DataType = pa.int64()) -> pa.Array:
    """``n`` copies of one int."""
    return numeric(np.full(n, value, dtype=_NUMPY[typ]))


def text(values: list) -> pa.Array:
    """A string array from str values and None (null)."""
    n = len(values)
    encoded = [b"" if v is None else v.encode("utf-8") for v in values]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=n), out=offsets[1:])
    if offsets[-1] > INT32_MAX:
        raise OverflowError(f"a string column of {int(offsets[-1]):,} bytes, beyond 2 GiB")
    bitmap, nulls = _bitmap(np.fromiter((v is not None for v in values), dtype=bool, count=n))
    return pa.Array.from_buffers(pa.string(), n, [bitmap, pa.py_buffer(offsets.astype(np.int32)),
                                                  pa.py_buffer(b"".join(encoded))], null_count=nulls)


def dictionary(codes: np.ndarray, values: list) -> pa.DictionaryArray:
    """A dictionary-encoded string array: int codes into ``values`` (one Python str, or None, per
    distinct value).  4 bytes a row where the decoded strings take their length + 4: DuckDB
    stores it as VARCHAR, Parquet as a dictionary-encoded string column."""
    codes = np.ascontiguousarray(codes, dtype=np.int32)
    missing = [i for i, v in enumerate(values) if v is None]
    if not missing:
        return pa.DictionaryArray.from_arrays(numeric(codes), text(values))
    # a null is a null index, never a null in the dictionary (Parquet's writer refuses those)
    present = ~np.isin(codes, missing) if len(missing) > 1 else codes != missing[0]
    return pa.DictionaryArray.from_arrays(numeric(codes, present), text(["" if v is None else v for v in values]))


def decoded(codes: np.ndarray, values: list) -> pa.Array:
    """A plain string array from int codes into ``values``."""
    return dictionary(codes, values).dictionary_decode()


def encoded(column) -> tuple[np.ndarray, list]:
    """(int codes, distinct values) of a string column, plain or dictionary-encoded; a null is the
    code of a None value."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_encode()
    names = arr.dictionary.to_pylist()
    indices = arr.indices
    codes = values(indices).astype(np.int64)
    if indices.null_count:
        codes = np.where(valid(indices), codes, len(names))
        names = names + [None]
    return codes, names


def array(values, typ: pa.DataType) -> pa.Array:
    """``pa.array(values, typ)`` for int64 and string (dictionary-encoded: see :func:`dictionary`)."""
    if typ == pa.string():
        distinct: dict = {}
        codes = np.fromiter((distinct.setdefault(v, len(distinct)) for v in values), dtype=np.int32,
                            count=len(values))
        return dictionary(codes, list(distinct))
    if typ == pa.int64():
        return int64(values)
    raise TypeError(f"no pandas-free builder for {typ}")


def values(column) -> np.ndarray:
    """The values of a primitive array or one-type chunked array as numpy (a null's slot holds
    whatever its buffer holds: use :func:`valid`)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    dtype = np.dtype(_NUMPY[arr.type])
    buffer = arr.buffers()[1]
    if buffer is None:
        return np.zeros(len(arr), dtype=dtype)
    return np.frombuffer(buffer, dtype=dtype, count=len(arr), offset=arr.offset * dtype.itemsize)


def valid(column) -> np.ndarray:
    """Which slots of an array are not null (bool numpy)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    bitmap = arr.buffers()[0]
    if bitmap is None or arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little")
    return bits[arr.offset:arr.offset + len(arr)].astype(bool)


# A parse worker's tables travel to the writing process as Arrow IPC streams, LZ4-compressed where
# pyarrow has the codec: pickled as they are, each buffer was copied into one growing pickle (~2 × the
# tables in the worker for a moment) and received whole beside the tables it became (~2 × in the
# writing process).  Compressed, a file's tables take ~0.15 × their size on the way (docs: Robustness).
_CODEC = "lz4" if pa.Codec.is_available("lz4") else None


class Packed:
    """A table as one Arrow IPC stream (compressed: ``_CODEC``), with the size of its buffers."""

    __slots__ = ("data", "nbytes")

    def __init__(self, table: pa.Table):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression=_CODEC, use_threads=False)) as writer:
            writer.write_table(table)
        self.data = sink.getvalue().to_pybytes()
        self.nbytes = table.get_total_buffer_size()  # what it takes unpacked

    def __getstate__(self):
        return self.data, self.nbytes

    def __setstate__(self, state):
        self.data, self.nbytes = state

    def unpack(self) -> pa.Table:
        """The table (types, dictionaries and chunks as they were), a new copy each call."""
        return pa.ipc.open_stream(pa.py_buffer(self.data), options=pa.ipc.IpcReadOptions(use_threads=False)).read_all()
