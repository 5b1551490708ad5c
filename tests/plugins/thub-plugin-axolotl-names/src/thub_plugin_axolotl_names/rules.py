"""The dialect's rules (``DialectSpec.rules``): imported only when a run holds one of its names."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from thub.backend import UsageError

RENAMES = {"base_model": "model_path", "sequence_len": "max_seq_len"}
REFUSED = {"adapter": "LoRA is its own algorithm in thub: thub train lora_sft"}

Layer = dict[str, tuple[Any, str]]


def accepted_names(algorithm: str, infos: Mapping[str, Any]) -> Iterable[str]:
    """Its names, for an algorithm that has the parameters they become."""
    return [name for name, target in RENAMES.items() if target in infos] + list(REFUSED)


def translate_layers(algorithm: str, layers: list[Layer], infos: Mapping[str, Any]) -> tuple[list[Layer], list[str]]:
    """Each layer with its names renamed to thub's (the source says so); a refused name, or a name
    and thub's own for the same parameter in one layer, is a UsageError naming the source."""
    out: list[Layer] = []
    refused: list[str] = []
    for layer in layers:
        new = {key: item for key, item in layer.items() if key in infos}
        for key, (value, source) in layer.items():
            if key in infos:
                continue
            if key in REFUSED:
                refused.append(f"{source}: axolotl's {key} is not supported by thub: {REFUSED[key]}")
                continue
            target = RENAMES[key]
            if target in new:
                refused.append(f"{source}: {key} and {target} both set {target} in the same place: set one")
                continue
            new[target] = (value, f"{source}, axolotl name {key} → {target}")
        out.append(new)
    if refused:
        raise UsageError("\n".join(refused))
    return out, []
