"""The package's version, where every layer can read it (server metadata, build files)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
