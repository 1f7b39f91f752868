"""Plug-ins named by import path: ``"package.module:Name"`` -> the object.

One resolver for every place a user names their own code (connectors, prelearner subclasses,
agent-to-module functions), so the errors read the same everywhere.
"""

from __future__ import annotations

import importlib
from typing import Any

from .errors import ConfigError

__all__ = ["import_object"]


def import_object(spec: str, what: str | None = None) -> Any:
    """The object ``"package.module:Name"`` (``Name`` may be dotted) names.

    Args:
        spec: ``"package.module:Name"``; the module is imported, then each dotted part of
            ``Name`` is looked up as an attribute.
        what: What the object is for, as error messages begin (``"connector 'x'"``); default:
            the spec's ``repr``.

    Returns:
        The object, as it is (a class, a function, an instance).

    Raises:
        ConfigError: A spec without ``:``, a module that does not import, a missing attribute.
    """
    label = what or repr(spec)
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"{label} is not of the form 'package.module:Name'")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"{label}: cannot import module {module_name!r}: {e}") from e
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(
                f"{label}: module {module_name!r} has no attribute {attr!r}"
            ) from None
    return obj
