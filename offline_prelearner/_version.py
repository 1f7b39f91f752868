"""The package version (one place; the jobs write it into manifests)."""

__version__ = "0.1.0"
