"""The package version, importable from any floor without importing the package root."""

__version__ = "0.1.0"
