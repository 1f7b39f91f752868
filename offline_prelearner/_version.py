"""The package version, in this one place: pyproject.toml reads it from here
(``[tool.setuptools.dynamic]``), the CLI prints it and the jobs write it into manifests."""

__version__ = "0.1.0"
