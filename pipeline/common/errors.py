"""The errors the command line turns into one line each, in a module that imports nothing, so that
``scaletrace --help`` and the CLI's start-up do not pay for DuckDB or Ray to name them."""


class DatabaseError(RuntimeError):
    """A database file that cannot be opened or used."""


class DatasetError(RuntimeError):
    """A directory that cannot be used as a scaletrace Parquet dataset."""


class EngineError(RuntimeError):
    """An engine that cannot run (Ray not installed, no cluster at the address)."""


class DiskFull(DatabaseError, DatasetError):
    """A write that found no room (a full disk, a quota), of a DuckDB file or a Parquet dataset:
    one line naming the path, the space left and the mount point (``pipeline/common/diskfull.py``).
    Both kinds, so that every command that reports either reports this one."""
