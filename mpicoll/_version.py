"""The version, in one place (setup.cfg and the provenance of results read it)."""

__version__ = "0.1.0"
