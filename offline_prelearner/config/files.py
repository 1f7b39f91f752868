"""Config files: JSON or YAML read with bounded cost, and written back.

A config file comes from the user, and sometimes from elsewhere: it is read only up to
:data:`MAX_CONFIG_BYTES`, must be UTF-8, and YAML aliases may expand to at most
:data:`MAX_ALIAS_NODES` values (the "billion laughs" bomb is refused while composing, before any
Python object is built).
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..errors import ConfigError, shown

__all__ = ["MAX_ALIAS_NODES", "MAX_CONFIG_BYTES", "dump_text", "parse_mapping", "read_mapping"]


def read_mapping(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The mapping a JSON or YAML (``.yaml``/``.yml``) config file holds.

    Args:
        path: The file.

    Returns:
        The mapping.

    Raises:
        ConfigError: The file is too large, not UTF-8, does not parse, or holds no mapping.
    """
    p = os.fspath(path)
    with open(p, "rb") as fh:
        raw = fh.read(MAX_CONFIG_BYTES + 1)  # a config is a few KiB: never read a huge file
    return parse_mapping(raw, p)


def parse_mapping(raw: bytes | str, p: str) -> dict[str, Any]:
    """The mapping a config file's bytes hold (read by the caller, from a disk or a store; at
    most ``MAX_CONFIG_BYTES + 1`` of them), ``p`` its name: JSON, or YAML where it ends in
    ``.yaml``/``.yml``.

    Args:
        raw: The file's bytes (or text).
        p: The file's name, for the format and the errors.

    Returns:
        The mapping.

    Raises:
        ConfigError: As :func:`read_mapping`.
    """
    if isinstance(raw, str):
        raw = raw.encode("utf-8")
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"config file {shown(p)} is larger than {MAX_CONFIG_BYTES} bytes (1 MiB); "
            "a config is a few KiB"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"cannot parse config file {shown(p)}: not UTF-8 (byte {e.start})"
        ) from None
    if p.endswith((".yaml", ".yml")):
        import yaml

        try:
            data = _load_yaml(text)
        except yaml.YAMLError as e:
            raise ConfigError(f"cannot parse config file {p!r}: {_yaml_error(e)}") from None
        except RecursionError:
            raise ConfigError(f"cannot parse config file {p!r}: nested too deeply") from None
    else:
        try:
            data = json.loads(text)
        except ValueError as e:
            raise ConfigError(f"cannot parse config file {p!r}: {e}") from None
        except RecursionError:
            raise ConfigError(f"cannot parse config file {p!r}: nested too deeply") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p!r} must hold a mapping, found {type(data).__name__}")
    return data


def dump_text(d: dict[str, Any], path: str) -> str:
    """``d`` as the text of a config file: YAML when ``path`` ends in .yaml/.yml, else JSON.

    Args:
        d: The mapping (JSON-able, as :meth:`PreLearnerConfig.to_dict` returns).
        path: The file it is for.

    Returns:
        The text.
    """
    if path.endswith((".yaml", ".yml")):
        import yaml

        return str(yaml.safe_dump(d, sort_keys=False))
    return json.dumps(d, indent=2) + "\n"


#: The largest config file read (bytes): a real one is a few KiB.
MAX_CONFIG_BYTES = 1 << 20
#: The most YAML nodes that aliases may expand to in one config file (a real config shares a
#: value or two; the "billion laughs" bomb expands 9 aliases per level to 9**9 nodes).
MAX_ALIAS_NODES = 10_000


def _load_yaml(text: str) -> Any:
    """``yaml.safe_load`` that counts what aliases expand to: an alias adds the size of the node
    it repeats; past :data:`MAX_ALIAS_NODES`, or an alias inside the node it names (a cycle), is
    a ``yaml.YAMLError`` at the alias's line and column. Checked while composing, before any
    Python object is built, so a bomb costs what its text does."""
    import yaml
    from yaml.composer import ComposerError
    from yaml.events import AliasEvent, CollectionStartEvent

    class Loader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no type hints
        expanded = 0
        sizes: dict[int, int]
        open_anchors: list[str]

        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.peek_event()
            if isinstance(event, AliasEvent):
                if event.anchor in self.open_anchors:
                    raise ComposerError(
                        None, None, f"alias *{event.anchor} repeats itself", event.start_mark
                    )
                if event.anchor in self.anchors:
                    self.expanded += self._size(self.anchors[event.anchor])
                if self.expanded > MAX_ALIAS_NODES:
                    raise ComposerError(
                        None,
                        None,
                        f"aliases expand to more than {MAX_ALIAS_NODES} values (an alias "
                        "bomb?); write the values out",
                        event.start_mark,
                    )
                return super().compose_node(parent, index)
            anchor = event.anchor if isinstance(event, CollectionStartEvent) else None
            if anchor is not None:
                self.open_anchors.append(anchor)
            try:
                return super().compose_node(parent, index)
            finally:
                if anchor is not None:
                    self.open_anchors.pop()

        def _size(self, node: Any) -> int:
            """Nodes in ``node`` with every alias expanded (memoized: a DAG, walked once)."""
            got = self.sizes.get(id(node))
            if got is None:
                if isinstance(node, yaml.SequenceNode):
                    got = 1 + sum(self._size(n) for n in node.value)
                elif isinstance(node, yaml.MappingNode):
                    got = 1 + sum(self._size(k) + self._size(v) for k, v in node.value)
                else:
                    got = 1
                self.sizes[id(node)] = got
            return got

    loader = Loader(text)
    loader.sizes, loader.open_anchors = {}, []
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _yaml_error(e: Exception) -> str:
    """A YAML parse error on one line: ``line L, column C: <problem>``."""
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    if mark is None:
        return " ".join(str(e).split())
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
