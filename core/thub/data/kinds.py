"""The registered data kinds and formats (``thub_register_data_kinds``): detection, normalisation, the gate.

Core knows no kind or format by name: every one, thub's own included, is a
:class:`thub.specs.DataKindSpec` a plugin registered (``thub_builtins.data_kinds``). This module
asks the plugin registry for them and dispatches to their functions, each imported once, on
first use (registering imports nothing).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from thub.data.formats import DatasetSource, RowCheck, describe
from thub.data.problems import Problems
from thub.errors import UsageError

if TYPE_CHECKING:
    from thub.manager import Registry
    from thub.specs import AlgorithmSpec, DataFormatSpec, DataKindSpec

#: a format's normaliser: (row, check, source) -> canonical row | None
Normaliser = Callable[[dict[str, Any], RowCheck, DatasetSource], "dict[str, Any] | None"]


@functools.cache
def loaded(import_string: str) -> Any:
    """The object an import string names, imported once (a detector runs on every row)."""
    from thub.specs import load_object

    return load_object(import_string)


class Formats:
    """The formats of one plugin registry, in detection order, with their functions loaded lazily."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.order: list[tuple[DataFormatSpec, DataKindSpec]] = registry.data_formats()
        self.by_name = {fmt.name: (fmt, kind) for fmt, kind in self.order}
        self._detectors: list[tuple[str, Callable[[dict[str, Any]], bool]]] | None = None

    def names(self) -> list[str]:
        """Every format name, in registration order (how ``--format`` lists them)."""
        return [fmt.name for kind in self.registry.data_kinds.values() for fmt in kind.formats]

    def get(self, name: str) -> tuple[DataFormatSpec, DataKindSpec]:
        """Format ``name`` and its kind; a UsageError naming the registered ones otherwise."""
        return self.registry.data_format(name)

    def detect(self, row: Any) -> str | None:
        """The name of the first format (detection order) whose detector accepts ``row``; None: none."""
        if not isinstance(row, dict):
            return None
        if self._detectors is None:
            self._detectors = [(fmt.name, detect) for fmt, kind in self.order
                               if (detect := _detector(fmt, kind)) is not None]
        for name, detect in self._detectors:
            if detect(row):
                return name
        return None

    def unknown_row(self) -> str:
        """What a row of a known format holds, for the error on one that is none of them."""
        shapes = [fmt.summary or fmt.name for kind in self.registry.data_kinds.values() for fmt in kind.formats]
        return "expected a row of a known format (" + ", ".join(shapes) + ")"

    def kind_of(self, name: str) -> str:
        """The kind format ``name`` yields ("" for ``auto`` or an unknown name)."""
        found = self.by_name.get(name)
        return found[1].name if found else ""

    def normalise(self, row: Any, name: str, location: str, problems: Problems,
                  source: DatasetSource) -> dict[str, Any] | None:
        """Validate one row in format ``name``: its canonical row, or None (problem recorded)."""
        check = RowCheck(location, problems)
        if not isinstance(row, dict):
            check.error("", "a JSON object per row", describe(row), "row")
            return None
        normaliser: Normaliser = loaded(self.by_name[name][0].normalise)
        out = normaliser(row, check, source)
        return out if check.ok else None


def _detector(fmt: DataFormatSpec, kind: DataKindSpec) -> Callable[[dict[str, Any]], bool] | None:
    """A format's detector, or None (said once) when its plugin's import string does not import:
    one broken plugin must not stop every other format from being recognised."""
    import sys

    try:
        return loaded(fmt.detect)  # type: ignore[no-any-return]
    except Exception as exc:  # noqa: BLE001 - any import-time failure of a plugin's module
        print(f"thub: data format {fmt.name!r} of {kind.provenance.describe()} is left out: {fmt.detect} does not "
              f"import ({type(exc).__name__}: {exc})", file=sys.stderr)
        return None


_current: Formats | None = None


def formats() -> Formats:
    """The formats of the process's plugin registry (:func:`thub.manager.get_registry`)."""
    global _current
    from thub.manager import get_registry

    registry = get_registry()
    if _current is None or _current.registry is not registry:
        _current = Formats(registry)
    return _current


def format_names() -> list[str]:
    """Every registered format name (``--format`` choices, ``data_format`` values besides ``auto``)."""
    return formats().names()


def detect_format(row: Any) -> str:
    """The format of one row: a registered format's name, or ``"unknown"`` when none matches."""
    return formats().detect(row) or "unknown"


def kind_spec(name: str) -> DataKindSpec:
    """The registered data kind ``name``."""
    return formats().registry.data_kind(name)


def accepted_kinds(algorithm: AlgorithmSpec) -> list[str]:
    """The data kinds ``algorithm`` trains on; a format name (the old ``data_formats``) counts as
    its kind. Empty: any kind."""
    known = formats()
    kinds: list[str] = []
    for name in algorithm.data_kinds:
        kind = name if name in known.registry.data_kinds else known.kind_of(name) or name
        if kind not in kinds:
            kinds.append(kind)
    return kinds


def _either(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def check_kind(algorithm: AlgorithmSpec, kind: str, fmt: str, location: str) -> None:
    """The data gate: a UsageError (exit 2) when rows of ``kind`` (read in format ``fmt``, the
    first at ``location``) are not a kind ``algorithm`` trains on."""
    kinds = accepted_kinds(algorithm)
    if not kinds or kind in kinds:
        return
    registered = formats().registry.data_kinds
    what = f" ({registered[kind].summary})" if kind in registered and registered[kind].summary else ""
    read_as = f", read as {fmt}" if fmt and fmt != kind else ""
    raise UsageError(f"{algorithm.name} expects {_either(kinds)} rows; `{location}` is a {kind} row{what}{read_as}"
                     f" (algorithms for {kind} rows: {_either(trainers(kind)) if trainers(kind) else 'none'})")


def trainers(kind: str) -> list[str]:
    """The algorithms that train on rows of ``kind``."""
    registry = formats().registry
    return [name for name, spec in registry.algorithms.items() if kind in accepted_kinds(spec) or not spec.data_kinds]


def uses_chat_template(kinds: Iterable[str]) -> bool:
    """Whether rows of any of ``kinds`` are rendered with the model's chat template."""
    registered = formats().registry.data_kinds
    return any(registered[k].chat_template for k in kinds if k in registered)
