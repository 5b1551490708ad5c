"""``--launcher``: a click choice of the registered launchers (``thub_register_launchers``).

The choices are read from the registry when click needs them (help, completion, a value to
check), so a launcher a plugin registers is offered with no core edit, and a name that is not
registered is refused (exit 2) with the registered ones listed, as click does for any choice.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from thub.launch.options import DEFAULT_LAUNCHER

__all__ = ["DEFAULT_LAUNCHER", "LauncherChoice"]


class LauncherChoice(click.Choice):  # type: ignore[type-arg]
    """The registered launchers' names; ``pushes``: only those that can run ``thub checkpoint push``
    as a job (``LauncherSpec.push_job``), and the default one, which pushes from here."""

    def __init__(self, pushes: bool = False) -> None:
        # no super().__init__: it would store a fixed tuple; the registry is asked each time
        self.case_sensitive = True
        self.pushes = pushes

    @property
    def choices(self) -> Sequence[Any]:  # type: ignore[override]
        from thub.manager import get_registry

        return tuple(name for name, spec in get_registry().launchers.items()
                     if not self.pushes or name == DEFAULT_LAUNCHER or spec.push_job is not None)

    @staticmethod
    def describe() -> str:
        """One line for ``--help``: every registered launcher with its summary."""
        from thub.manager import get_registry

        return "; ".join(f"{name}: {spec.summary}" for name, spec in get_registry().launchers.items()) + "."
