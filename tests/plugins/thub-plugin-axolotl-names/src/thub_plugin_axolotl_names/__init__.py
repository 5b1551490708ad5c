"""A tiny parameter dialect: two axolotl-style YAML keys renamed to thub's, one refused."""

from __future__ import annotations

from collections.abc import Callable

from thub import hookimpl
from thub.specs import DialectSpec


@hookimpl
def thub_register_dialects(register: Callable[[DialectSpec], None]) -> None:
    register(DialectSpec(name="axolotl-names", summary="axolotl's YAML keys base_model and sequence_len",
                         rules="thub_plugin_axolotl_names.rules"))
