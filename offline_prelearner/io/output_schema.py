"""The JSON Schemas of what a job writes beside its data: ``stats.json`` and ``_manifest.json``.

The schemas (JSON Schema draft 2020-12) ship with the package as data files in
``offline_prelearner/io/json_schemas/``, one per kind of document:

* ``process-stats``: the ``stats.json`` of ``process`` (:func:`~offline_prelearner.run_pipeline`);
* ``convert-stats``: the ``stats.json`` of ``convert`` (its three writers: file by file, a whole
  dataset, a rows -> rows layout change);
* ``manifest``: the ``_manifest.json`` of either, the commit point (``content`` tells them apart).

Each property is described there; docs/OUTPUTS.md says the same in prose. Validate a document
with any JSON Schema validator, e.g. the ``jsonschema`` package (not a dependency of this one)::

    import json, jsonschema
    from offline_prelearner.io.output_schema import output_schema

    jsonschema.validate(json.load(open("out/_manifest.json")), output_schema("manifest"))
"""

from __future__ import annotations

import importlib.resources
import json
from typing import Any, Literal, get_args

__all__ = ["OUTPUT_KINDS", "OutputKind", "output_schema"]

#: The kinds of document a job writes beside its data (one schema file each).
OutputKind = Literal["process-stats", "convert-stats", "manifest"]
OUTPUT_KINDS: tuple[OutputKind, ...] = get_args(OutputKind)

#: The package-data folder (inside ``offline_prelearner.io``) that holds the schema files.
_FOLDER = "json_schemas"


def output_schema(kind: OutputKind) -> dict[str, Any]:
    """The JSON Schema of one kind of job output document, read from the package data.

    Args:
        kind: ``"process-stats"``, ``"convert-stats"`` or ``"manifest"`` (:data:`OUTPUT_KINDS`).

    Returns:
        The schema as a new dict (``<kind>.schema.json``); changing it changes no later call's.

    Raises:
        ValueError: ``kind`` is not one of :data:`OUTPUT_KINDS`.
    """
    if kind not in OUTPUT_KINDS:
        raise ValueError(
            f"kind must be one of {', '.join(map(repr, OUTPUT_KINDS))}, found {kind!r}"
        )
    resource = importlib.resources.files(__package__) / _FOLDER / f"{kind}.schema.json"
    schema: dict[str, Any] = json.loads(resource.read_text(encoding="utf-8"))
    return schema
