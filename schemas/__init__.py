"""Column-schema presets (JSON), shipped as the package data ``offline_prelearner.schemas``.

``pyproject.toml`` maps this folder to that package; this file makes it importable under that
name in an editable install too. Read the presets with ``offline_prelearner.io.schema``'s
``available_schemas()`` and ``load_schema(name)``.
"""
