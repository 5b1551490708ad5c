"""Test kit for thub and its plugins: pytest fixtures and the backend contract.

Installed as a pytest plugin (entry point ``pytest11``), so any plugin's test suite gets the
fixtures ``thub_registry``, ``thub_cli`` and ``thub_plugin`` without configuration, and can
subclass :class:`thub.testing.contract.BackendContract`.
"""

from thub.testing.contract import HEAVY_MODULES, BackendContract, imported_heavy_modules

__all__ = ["HEAVY_MODULES", "BackendContract", "imported_heavy_modules"]
