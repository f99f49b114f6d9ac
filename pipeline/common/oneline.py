"""Errors as one line: the first line of a message, cut to a length, with the first error of
a chain (README, "Robustness": one line per bad input, never a traceback)."""

from __future__ import annotations

MAX_MESSAGE_CHARS = 500  # an error line quotes at most this much of the input


def one_line(text: str, max_chars: int = MAX_MESSAGE_CHARS) -> str:
    """The first line of an error message, cut to ``max_chars`` (a trace's 1 GB name must not
    become a 1 GB message)."""
    text = str(text)
    lines = text[:max_chars * 4].strip().splitlines()  # never a copy of the whole text
    line = lines[0] if lines else ""
    return line if len(line) <= max_chars else line[:max_chars] + "… (cut)"


PATH_KEEP_CHARS = 120  # of a path too long for its line: the end (the file's name) and a little of the start


def file_line(path: str, message: str, max_chars: int = MAX_MESSAGE_CHARS) -> str:
    """``PATH: message`` in at most ``max_chars`` characters (and the cut marks): the message cut
    first to what the path leaves, down to half the line; a longer path keeps its start and end
    (``/data/very…/rank0.json``), so that a 4,000-character directory name leaves the reason whole."""
    path = one_line(path, len(path))  # one line: a path may hold a newline
    room = max_chars - len(path) - 2
    if room < max_chars // 2 and len(path) > PATH_KEEP_CHARS:
        head = PATH_KEEP_CHARS // 3
        path = f"{path[:head]}…{path[-(PATH_KEEP_CHARS - head):]}"
        room = max_chars - len(path) - 3
    return f"{path}: {one_line(message, max(room, max_chars // 2))}"


def describe(exc: BaseException) -> str:
    """An unexpected exception as one line with its type: ``ValueError: ...``."""
    message = one_line(str(exc))
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def first_error(exc: BaseException) -> BaseException:
    """The error that started it: when a COMMIT (or an INSERT) fails, the ROLLBACK that follows
    may fail too ("no transaction is active") and replace it; the original is its context."""
    while exc.__context__ is not None and _is_rollback_noise(exc):
        exc = exc.__context__
    return exc


def _is_rollback_noise(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "rollback" in text or "no transaction is active" in text


def message(exc: BaseException) -> str:
    """The first error of ``exc``'s chain as one line (DuckDB's messages have a caret line and
    a hint after the first)."""
    return one_line(str(first_error(exc))) or type(exc).__name__


# C0 controls, DEL and C1 controls: a trace's names and paths could carry terminal escape
# sequences (ESC [ ..., OSC) that recolour, retitle or rewrite the user's terminal.
_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]}
_CONTROL.update({ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r"})


def printable(text: str) -> str:
    """``text`` for a terminal: control characters shown as escapes (``\\x1b``), nothing else changed."""
    return text.translate(_CONTROL)
