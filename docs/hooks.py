"""MkDocs hooks: the reference pages that are generated from the code, so they cannot drift.

``<!-- cli-reference -->`` in a page becomes every ``scaletrace`` command's ``--help`` (click's own
text, with its examples); ``<!-- query-reference -->`` becomes every query file's header
(definition, grain, parameters, units), as ``scaletrace query NAME --show`` prints it.
"""

from __future__ import annotations

import click


def _commands():
    from scaletrace.cli import main

    ctx = click.Context(main, info_name="scaletrace")
    yield "scaletrace", main.get_help(ctx)
    for name in sorted(main.list_commands(ctx)):
        command = main.get_command(ctx, name)
        sub = click.Context(command, info_name=name, parent=ctx)
        yield f"scaletrace {name}", command.get_help(sub)


def cli_reference() -> str:
    parts = []
    for title, text in _commands():
        parts.append(f"## `{title}`\n\n```text\n{text}\n```\n")
    return "\n".join(parts)


def query_reference() -> str:
    from scaletrace import queries

    parts = []
    for name in queries.names():
        query = queries.load(name)
        header = query.header  # the file's leading comment block, without the `--` markers
        parts.append(f"## `{name}`\n\n{query.description}\n\n```text\n{header}\n```\n")
    return "\n".join(parts)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 - MkDocs' signature
    if "<!-- cli-reference -->" in markdown:
        markdown = markdown.replace("<!-- cli-reference -->", cli_reference())
    if "<!-- query-reference -->" in markdown:
        markdown = markdown.replace("<!-- query-reference -->", query_reference())
    return markdown
