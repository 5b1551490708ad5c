"""Parameter dialects (``thub_register_dialects``): another tool's names in a run's layers.

A dialect (:class:`thub.specs.DialectSpec`) is consulted only when a value came from it: a name
given in a config file, a flag or API keyword or ``--set`` that is not the algorithm's own
parameter, or one of thub's names the dialect converts (``DialectSpec.converts``). A resolve with
thub's own names only imports no dialect's module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from thub.errors import ThubError
from thub.specs import DialectSpec, load_object

Layer = dict[str, tuple[Any, str]]


@dataclass
class Dialects:
    """The dialects one resolve consults: each loaded dialect's extra names (the names it accepts
    that are not thub's) and the rules object it names."""

    algorithm: str
    infos: Mapping[str, Any]
    loaded: list[tuple[DialectSpec, Any, dict[str, Any]]] = field(default_factory=list)

    def names(self) -> dict[str, Any]:
        """thub's parameters plus every loaded dialect's names: what a config file, flag or
        ``--set`` may hold (and what "did you mean" offers)."""
        names = dict(self.infos)
        for _spec, _rules, extra in self.loaded:
            names.update({key: info for key, info in extra.items() if key not in names})
        return names

    def translate(self, registry: Any, layers: list[Layer]) -> tuple[list[Layer], list[str]]:
        """``layers`` with each dialect's names rewritten into thub's, and the dialects' notes.

        A dialect runs when a layer holds one of its extra names or a name it converts (the
        latter loads it now, if the layer's names did not); it keeps the names of the other
        dialects that run (passed to it as parameters), which translate them in turn.
        """
        keys = {key for layer in layers for key in layer}
        if keys & {name for spec in registry.dialects.values() for name in spec.converts}:
            self._load(registry)
        active = [(spec, rules, extra) for spec, rules, extra in self.loaded
                  if keys & set(extra) or keys & spec.converts]
        notes: list[str] = []
        for spec, rules, _extra in active:
            others = {key: info for other, _r, extra in active if other is not spec for key, info in extra.items()}
            layers, found = rules.translate_layers(self.algorithm, layers, {**others, **self.infos})
            notes.extend(found)
        left = sorted({key for layer in layers for key in layer} - set(self.infos))
        if left:  # a dialect's bug, said as such: pydantic would call it an unknown field of the user's
            by = ", ".join(f"{spec.name} ({spec.provenance.describe()})" for spec, _r, _e in active)
            raise ThubError(f"parameter dialect {by} left {', '.join(map(repr, left))} untranslated: its rules "
                            "must turn every name of theirs into thub's parameters (docs/hooks.md, "
                            "thub_register_dialects)")
        return layers, notes

    def _load(self, registry: Any) -> None:
        if self.loaded:
            return
        for spec in registry.dialects.values():
            from thub.config.fields import ParamInfo

            try:
                rules = load_object(spec.rules)
            except Exception as exc:  # noqa: BLE001 - a broken plugin is named, never a traceback
                raise ThubError(f"parameter dialect {spec.name!r} ({spec.provenance.describe()}): its rules "
                                f"{spec.rules} could not be loaded: {type(exc).__name__}: {exc}") from None
            # untyped: a dialect's value is checked by its rules, then by thub's field it becomes
            extra = {key: ParamInfo(name=key, annotation=Any, default=None, required=False, help=f"{spec.name} name",
                                    group=spec.name)
                     for key in rules.accepted_names(self.algorithm, self.infos) if key not in self.infos}
            self.loaded.append((spec, rules, extra))


def dialects_for(registry: Any, algorithm: str, infos: Mapping[str, Any], keys: Iterable[str],
                 ignore: Iterable[str] = ()) -> Dialects:
    """The dialects a resolve of ``algorithm`` may need: loaded when one of ``keys`` (the names a
    config file, flags and ``--set`` give) is not a parameter of ``infos`` nor in ``ignore``."""
    dialects = Dialects(algorithm, infos)
    if any(key not in infos and key not in set(ignore) for key in keys):
        dialects._load(registry)
    return dialects
