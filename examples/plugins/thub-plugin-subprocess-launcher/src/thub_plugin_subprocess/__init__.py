"""A launcher registered from outside thub: the run starts detached on this machine (its pid recorded)."""

from __future__ import annotations

from collections.abc import Callable

from thub import hookimpl
from thub.specs import LauncherSpec

LAUNCHER = LauncherSpec(
    "subprocess", "a detached process on this machine, its pid the run's job id",
    submit="thub_plugin_subprocess.launcher:submit",
    plan="thub_plugin_subprocess.launcher:plan",
    status="thub_plugin_subprocess.launcher:status",
    cancel="thub_plugin_subprocess.launcher:cancel",
    logs=("subprocess*.out",),
)


@hookimpl
def thub_register_launchers(register: Callable[[LauncherSpec], None]) -> None:
    register(LAUNCHER)
