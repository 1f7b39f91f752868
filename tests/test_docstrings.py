"""The public API's docstrings say what tools and readers look for (Google style).

Every function in ``offline_prelearner.__all__`` that takes arguments has an ``Args:`` section
naming each of them, and one that returns something a ``Returns:`` (a generator: ``Yields:``).
Every class whose constructor takes arguments names each of them under ``Args:`` (a dataclass may
say ``Attributes:``, as its fields are its arguments), in the docstring of the class that defines
the constructor (an exception subclass shares its base's).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from typing import Any

import pytest

import offline_prelearner as op


def _public() -> list[tuple[str, Any]]:
    return [
        (name, obj)
        for name in op.__all__
        if inspect.isclass(obj := getattr(op, name)) or inspect.isfunction(obj)
    ]


def _documented_names(doc: str, sections: tuple[str, ...]) -> set[str]:
    """Names listed (``name:`` or ``**name:``) under any of ``sections``."""
    names: set[str] = set()
    for block in re.split(r"\n(?=\S)", inspect.cleandoc(doc)):
        head, _, body = block.partition("\n")
        if head.strip() in sections:
            for listed in re.findall(r"^    \**([\w, ]+?)(?: \(.*?\))?:", body, re.M):
                names.update(n.strip() for n in listed.split(","))
    return names


def _constructor_owner(cls: type) -> type:
    """The class in ``cls``'s MRO that defines its constructor (a dataclass defines its own)."""
    for klass in cls.__mro__:
        if dataclasses.is_dataclass(klass) or "__init__" in vars(klass):
            return klass
    return cls


# episodes/validate.py is being cut by another change in flight; Validator's Args: comes with it.
_PENDING: set[str] = set()


def _params(fn: Any) -> list[str]:
    """The documented parameters: not ``self``/``cls``, and not the private ones a framework adds
    (Ray adds ``_ray_trace_ctx`` to an actor class's ``__init__`` once it has made it remote)."""
    return [p for p in inspect.signature(fn).parameters if p not in ("self", "cls") and p[0] != "_"]


@pytest.mark.parametrize(("name", "obj"), _public(), ids=[n for n, _ in _public()])
def test_public_docstring_names_its_arguments(name: str, obj: Any) -> None:
    if name in _PENDING:
        pytest.xfail(f"{name}'s module is being rewritten; its Args: section comes with that")
    if inspect.isclass(obj):
        owner = _constructor_owner(obj)
        if owner.__module__ == "builtins":  # an exception with Exception's (message) constructor
            return
        params = _params(owner)
        sections = ("Args:", "Attributes:") if dataclasses.is_dataclass(owner) else ("Args:",)
        doc = owner.__doc__ or ""
    else:
        params = _params(obj)
        sections = ("Args:",)
        doc = obj.__doc__ or ""
    missing = sorted(set(params) - _documented_names(doc, sections))
    assert not missing, f"{name}: {' / '.join(sections)} lacks {missing}"


@pytest.mark.parametrize(
    ("name", "fn"),
    [(n, f) for n, f in _public() if inspect.isfunction(f)],
    ids=[n for n, f in _public() if inspect.isfunction(f)],
)
def test_public_function_says_what_it_returns(name: str, fn: Any) -> None:
    returns = inspect.signature(fn).return_annotation
    if returns in (None, "None", inspect.Signature.empty):
        return
    section = "Yields:" if inspect.isgeneratorfunction(fn) else "Returns:"
    assert section in (fn.__doc__ or ""), f"{name} returns {returns} but has no {section}"
