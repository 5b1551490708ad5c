"""thub's version, in a module of its own: importing it imports nothing else (the package's face,
``thub/__init__.py``, re-exports it; modules that only need the version import it from here, so they
are not tied into the package's lazy API)."""

__version__ = "0.1.0"
