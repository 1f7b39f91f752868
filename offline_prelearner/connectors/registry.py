"""Connectors by name, each loaded on first use, and building connectors from specs.

The registry maps a name to a small function that imports its connector class and returns it
(Minari's storage registry, ``"hdf5": get_hdf5_storage``): :mod:`.base` never imports an
implementation, the implementations import only :mod:`.base`, and no import closes a cycle.
:func:`available_connectors` lists the names without loading anything;
:func:`register_connector` adds one.

:func:`build_connector` builds a connector from a spec -- an instance, a registered name
(``"returns_to_go"``), ``{"name": ..., **kwargs}``, ``{"class": "pkg.mod:Name", **kwargs}`` or
the string ``"pkg.mod:Name"``. A spec dict may carry ``"as"`` to rename the built connector (two
connectors of one kind in one pipeline); an instance a spec names is shared, never renamed or
copied, so ``"as"`` is refused there. :func:`build_pipeline` builds a list of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from ..errors import ConfigError
from ..plugins import import_object
from .base import Connector, ConnectorPipeline

__all__ = [
    "ConnectorSpec",
    "available_connectors",
    "build_connector",
    "build_pipeline",
    "register_connector",
]

#: What :func:`build_connector` accepts.
ConnectorSpec = Any  # Connector | str | Mapping[str, Any]
C = TypeVar("C", bound=type[Connector])


def _normalize_obs() -> type[Connector]:
    from .builtin import NormalizeObservations

    return NormalizeObservations


def _flatten_obs() -> type[Connector]:
    from .builtin import FlattenObservations

    return FlattenObservations


def _one_hot_actions() -> type[Connector]:
    from .builtin import OneHotActions

    return OneHotActions


def _cast() -> type[Connector]:
    from .builtin import CastDtypes

    return CastDtypes


def _returns_to_go() -> type[Connector]:
    from .returns import DiscountedReturns

    return DiscountedReturns


def _gae() -> type[Connector]:
    from .returns import GAE

    return GAE


def _decode_video_frames() -> type[Connector]:
    from .video_frames import DecodeVideoFrames

    return DecodeVideoFrames


_REGISTRY: dict[str, Callable[[], type[Connector]]] = {
    "returns_to_go": _returns_to_go,  # episodes: discounted returns-to-go
    "gae": _gae,  # episodes: advantages and value targets
    "normalize_obs": _normalize_obs,  # batches: running mean/std normalisation
    "flatten_obs": _flatten_obs,  # batches: [B, ...] -> [B, n]
    "one_hot_actions": _one_hot_actions,  # batches
    "cast": _cast,  # batches: dtypes
    "decode_video_frames": _decode_video_frames,  # batches: LeRobot frame references -> frames
}


def register_connector(name: str) -> Callable[[C], C]:
    """Class decorator: ``@register_connector("my_thing")`` makes the spec ``"my_thing"`` build
    that class; the class's default ``name`` becomes ``name`` unless it sets its own. A name
    registered again is replaced.

    Args:
        name: The spec name that builds the class.

    Returns:
        The decorator, which registers the class and returns it.
    """

    def deco(cls: C) -> C:
        if not (isinstance(cls, type) and issubclass(cls, Connector)):
            raise ConfigError(f"register_connector({name!r}) needs a Connector subclass")
        _REGISTRY[name] = lambda: cls
        if not cls.__dict__.get("name"):
            cls.name = name
        return cls

    return deco


def available_connectors() -> list[str]:
    """Registered connector names (nothing is imported to list them)."""
    return sorted(_REGISTRY)


def build_connector(spec: ConnectorSpec) -> Connector:
    """A connector from a spec; see the module docstring.

    Args:
        spec: A :class:`Connector` instance (returned as is, not copied); a registered name
            (``"returns_to_go"``) or ``"package.module:Name"`` (a class is built with no
            arguments, an instance it names is returned as is); or a
            dict with exactly one of ``"name"`` (registered name) or ``"class"``
            (``"package.module:Name"``), the other keys passed to the constructor as keyword
            arguments, and an optional ``"as"`` that renames the built connector. ``"as"`` is
            refused on a ``"class"`` naming an instance: that object is shared by every spec
            naming it (and by the pipelines built from them), so renaming it would rename it
            everywhere, and a copy would no longer share its state; name its class with
            arguments instead, or give the instance the name wanted.

    Returns:
        The connector.

    Raises:
        ConfigError: The spec is of another type, names nothing registered or importable,
            names something that is not a connector, gives both or neither of ``"name"`` and
            ``"class"``, gives ``"as"`` that is not a non-empty string or with an instance, or
            its arguments do not fit the constructor; the message names the spec.
    """
    if isinstance(spec, Connector):
        return spec
    if isinstance(spec, str):
        return _instantiate(_resolve(spec), {}, spec)
    if isinstance(spec, Mapping):
        kwargs = dict(spec)
        alias = kwargs.pop("as", None)
        has_name, has_class = "name" in kwargs, "class" in kwargs
        if has_name == has_class:
            raise ConfigError(
                f"connector spec {spec!r} needs exactly one of 'name' (a registered connector) or "
                f"'class' ('package.module:Name')"
            )
        target = kwargs.pop("name") if has_name else kwargs.pop("class")
        if not isinstance(target, str):
            raise ConfigError(f"connector spec {spec!r}: {target!r} must be a string")
        if has_name and ":" in target:
            raise ConfigError(f"connector spec {spec!r}: use 'class' for an import path")
        if has_class and ":" not in target:
            raise ConfigError(f"connector spec {spec!r}: 'class' must be 'package.module:Name'")
        if alias is not None and (not isinstance(alias, str) or not alias):
            raise ConfigError(f"connector spec {spec!r}: 'as' must be a non-empty string")
        obj = _resolve(target)
        if alias is not None and isinstance(obj, Connector):
            raise ConfigError(
                f"connector spec {spec!r}: 'as' renames a connector the spec builds, but "
                f"{target!r} is a shared instance (named {obj.name!r}); name its class instead"
            )
        built = _instantiate(obj, kwargs, spec)
        if alias is not None:
            built.name = alias
        return built
    raise ConfigError(
        f"connector spec must be a Connector, a name, 'package.module:Name' or a dict, found "
        f"{spec!r} ({type(spec).__name__})"
    )


def build_pipeline(specs: ConnectorPipeline | Iterable[ConnectorSpec] | None) -> ConnectorPipeline:
    """A pipeline from a list of specs (``None``: empty); a pipeline is returned as is.

    Args:
        specs: A :class:`ConnectorPipeline`, an iterable of connector specs (a registered
            name, ``{"name": ..., **kwargs}``, ``"package.module:Class"`` or a connector), or
            None.

    Returns:
        The pipeline, its connectors in the order of ``specs``.

    Raises:
        ConfigError: ``specs`` is one spec rather than a list, a spec names no connector, or
            two connectors share a name.
    """
    if specs is None:
        return ConnectorPipeline()
    if isinstance(specs, ConnectorPipeline):
        return specs
    if isinstance(specs, (str, Mapping, Connector)):
        raise ConfigError(f"connectors must be a list of specs, found a single spec {specs!r}")
    return ConnectorPipeline(build_connector(s) for s in specs)


def _resolve(target: str) -> Any:
    """A registered name or ``"package.module:Name"`` -> the object it names."""
    if ":" not in target:
        load = _REGISTRY.get(target)
        if load is None:
            raise ConfigError(
                f"unknown connector {target!r}; registered: {sorted(_REGISTRY)} (or give "
                f"'package.module:Name')"
            )
        return load()
    return import_object(target, f"connector {target!r}")


def _instantiate(obj: Any, kwargs: dict[str, Any], spec: Any) -> Connector:
    if isinstance(obj, Connector):
        if kwargs:
            raise ConfigError(
                f"connector spec {spec!r} names an instance; it takes no arguments, found "
                f"{sorted(kwargs)}"
            )
        return obj
    if not (isinstance(obj, type) and issubclass(obj, Connector)):
        raise ConfigError(
            f"connector spec {spec!r} names {obj!r}, which is not a Connector subclass or instance"
        )
    try:
        return obj(**kwargs)
    except ConfigError as e:
        raise ConfigError(f"connector spec {spec!r}: {e}") from None
    except TypeError as e:
        raise ConfigError(
            f"connector spec {spec!r}: bad arguments for {obj.__name__}: {e}"
        ) from None
