"""The configuration reference, generated from the config classes when the site is built.

A MkDocs hook (``hooks:`` in ``mkdocs.yml``). The page that holds the marker
``<!-- config-reference -->`` gets, in its place, one table per section of
:class:`~offline_prelearner.config.PreLearnerConfig` (``read``, ``validate``, ``buffer``, ...) and
per nested section (``read.limits``, ``buffer.prioritized``, ...): each field's path, type (a
``Literal``'s choices spelled out), default (the value a default ``PreLearnerConfig()`` holds) and
meaning, which is the field's entry under ``Attributes:`` in its class's Google-style docstring.
A field with no entry there fails the build, so a new field cannot reach the site undocumented.
A page's ``<!-- cli-help: NAME -->`` becomes the ``--help`` of that sub-command, so the jobs' pages
show every option as the CLI defines it.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import typing
from typing import Any

from griffe import Docstring

MARKER = "<!-- config-reference -->"
#: A Sphinx role the older docstrings use (``:class:`~pkg.mod.Name```), as mkdocstrings renders it.
ROLE = re.compile(
    r":(?:class|meth|func|mod|data|attr|exc|obj):<code>(~?)(\.*)([\w.]+)(?:\s*&lt;([\w.]+)&gt;)?</code>"
)
#: ``<!-- cli-help: process -->``: that sub-command's ``--help``, as the installed CLI prints it.
CLI_HELP = re.compile(r"<!-- cli-help: (\w+) -->")


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Put the generated reference where the page holds :data:`MARKER`.

    Args:
        markdown: The page's Markdown source.
        **kwargs: What MkDocs passes besides (the page, the config, the files); unused.

    Returns:
        The page's Markdown, the marker replaced by the reference.
    """
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, config_reference())
    return CLI_HELP.sub(lambda m: cli_help(m.group(1)), markdown)


def on_page_content(html: str, **kwargs: Any) -> str:
    """Render the Sphinx roles of docstrings as code that links where the name is documented.

    Args:
        html: The page's HTML, API sections rendered.
        **kwargs: What MkDocs passes besides; unused.

    Returns:
        The HTML, each ``:class:`x``` a ``<code>`` inside an optional cross-reference (a name
        the site does not document, or a relative one, stays plain code).
    """
    return ROLE.sub(_role, html)


def _role(m: re.Match[str]) -> str:
    tilde, dots, name, target = m.groups()
    shown = name.rsplit(".", 1)[-1] if tilde or dots else name
    if target:  # :func:`title <target>`
        name = target
    if dots or not name.startswith("offline_prelearner."):
        return f"<code>{shown}</code>"
    return f'<autoref identifier="{name}" optional><code>{shown}</code></autoref>'


def cli_help(command: str) -> str:
    """One sub-command's ``--help`` as a fenced block, 100 columns wide.

    Args:
        command: The sub-command (``process``, ``convert``, ...).

    Returns:
        A ``text`` code block holding the help, examples included.
    """
    import argparse
    import os

    from offline_prelearner.cli.app import build_parser

    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal's width, read from here
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    text = sub.choices[command].format_help().rstrip()
    return f"```text\n$ offline-prelearner {command} --help\n{text}\n```"


def config_reference() -> str:
    """The Markdown of every section of the default :class:`PreLearnerConfig`.

    Returns:
        One ``##`` heading and table per section, the top-level fields first.
    """
    from offline_prelearner.config import PreLearnerConfig

    default = PreLearnerConfig()
    top = [f for f in dataclasses.fields(default) if not dataclasses.is_dataclass(_nested(f))]
    parts = [_table("Top level", PreLearnerConfig, default, "", top)]
    for f in dataclasses.fields(default):
        if dataclasses.is_dataclass(_nested(f)):
            parts.extend(_section(f.name, getattr(default, f.name)))
    return "\n\n".join(parts) + "\n"


def _section(path: str, value: Any) -> list[str]:
    """The table of one section (``value`` a dataclass instance), then its nested sections."""
    cls = type(value)
    own = [f for f in dataclasses.fields(cls) if _nested(f) is None]
    out = [_table(f"`{path}`", cls, value, f"{path}.", own)]
    for f in dataclasses.fields(cls):
        nested = _nested(f)
        if nested is None:
            continue
        child = getattr(value, f.name)
        if child is None:  # a kind's own section, present once that kind is chosen
            child = nested()
        out.extend(_section(f"{path}.{f.name}", child))
    return out


def _nested(f: dataclasses.Field[Any]) -> type | None:
    """The config dataclass a field holds (``X`` or ``X | None``), else None."""
    hint = f.type
    if isinstance(hint, str):
        return _nested_classes().get(hint.replace(" | None", ""))
    return None


def _table(
    title: str, cls: type, value: Any, prefix: str, fields: list[dataclasses.Field[Any]]
) -> str:
    """A heading, the class's summary and one row per field."""
    doc = Docstring(_clean(cls.__doc__ or ""), lineno=1).parse("google")
    summary = next((s.value for s in doc if s.kind.value == "text"), "")
    meaning = {a.name: a.description for s in doc if s.kind.value == "attributes" for a in s.value}
    hints = _hints(cls)
    rows = ["| field | type | default | meaning |", "| --- | --- | --- | --- |"]
    for f in fields:
        if f.name not in meaning:
            raise ValueError(
                f"{cls.__name__}.{f.name} has no entry under 'Attributes:' in its docstring"
            )
        typ = _type_text(f, hints.get(f.name))
        text = " ".join(meaning[f.name].split()).replace("|", "\\|")
        rows.append(f"| `{prefix}{f.name}` | {typ} | `{_shown(getattr(value, f.name))}` | {text} |")
    head = " ".join(summary.split()).split(". ")[0].rstrip(".")
    return f"## {title}\n\n{head} (`{cls.__module__}.{cls.__name__}`).\n\n" + "\n".join(rows)


def _hints(cls: type) -> dict[str, Any]:
    """The class's resolved annotations; {} where one names a type only a checker sees."""
    try:
        return typing.get_type_hints(cls)
    except NameError:
        return {}


def _type_text(f: dataclasses.Field[Any], hint: Any) -> str:
    """The annotation as written, with a ``Literal``'s choices."""
    text = f"`{f.type}`".replace("|", "\\|")
    choices = [
        a
        for arg in _flat(hint)
        if typing.get_origin(arg) is typing.Literal
        for a in typing.get_args(arg)
    ]
    if choices:
        text += ": " + ", ".join(f"`{c!r}`" for c in choices)
    return text


def _flat(hint: Any) -> list[Any]:
    """A union's members (nested unions flattened), or ``[hint]``."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is typing.Literal or not args:
        return [hint]
    return [m for a in args for m in _flat(a)]


def _shown(value: Any) -> str:
    """A default as a config file spells it."""
    if isinstance(value, tuple):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, float) and value >= 1e4 and value.is_integer():
        return f"{int(value):_}"
    if isinstance(value, int) and value >= 1e4:
        return f"{value:_}"
    return repr(value) if isinstance(value, str) else str(value)


def _clean(doc: str) -> str:
    """A docstring's reST (double backticks, ``:class:`` roles) as Markdown text."""
    doc = inspect.cleandoc(doc)
    doc = re.sub(r":\w+:`~?(?:[\w.]*\.)?([\w]+)`", r"`\1`", doc)
    return doc.replace("``", "`")


@functools.cache
def _nested_classes() -> dict[str, type]:
    """The config dataclasses by name (``ReadConfig``, ``DecodeLimits``, ...)."""
    from offline_prelearner.config import sections

    return {
        name: obj
        for name, obj in vars(sections).items()
        if isinstance(obj, type) and dataclasses.is_dataclass(obj)
    }
