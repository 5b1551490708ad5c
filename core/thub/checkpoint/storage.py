"""Storage URIs: the one parser of ``thub checkpoint push --to`` targets and ``checkpoint_storage`` locations.

Every scheme, thub's own included, is a :class:`thub.specs.StorageSpec` a plugin registers
(``thub_register_storage``; ``hf``, ``mlflow``, ``s3``, ``gs`` and ``file`` come from
``thub_builtins.storage``). :func:`parse_uri` reads ``SCHEME://REST``: the scheme names the spec
(:meth:`thub.manager.Registry.storage_scheme`: an unknown one, or one that does not support the use, is
refused naming the registered shapes), and the spec reads the rest (its own ``parse``, else the generic
fsspec location: ``BUCKET/PREFIX`` or an absolute path). Nothing here imports a driver: packages are
checked by name (:func:`missing_package`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from thub.errors import UsageError
from thub.redact import redact_text

if TYPE_CHECKING:
    from thub.specs import StorageSpec

__all__ = ["Target", "Use", "missing_package", "parse_uri", "shapes", "spec_of", "visible_schemes"]

Use = Literal["push", "mirror"]


@dataclass
class Target:
    """Where a push (or the mirror) goes: ``scheme`` (a registered :class:`~thub.specs.StorageSpec`'s
    name), ``location`` (repo id, model name or fsspec path), ``revision`` (an hf branch), ``options``
    (mlflow's query), ``shown`` (redacted); ``spec``: the scheme's spec (set by :func:`parse_uri`)."""

    scheme: str
    uri: str
    location: str
    revision: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    spec: StorageSpec | None = field(default=None, repr=False, compare=False)

    @property
    def shown(self) -> str:
        return redact_text(self.uri)


def spec_of(scheme: str, use: Use) -> StorageSpec:
    """The registered spec of ``scheme`` for ``use``; UsageError (the message only) otherwise."""
    from thub.manager import get_registry

    return get_registry().storage_scheme(scheme, use)


def parse_uri(uri: str, use: Use) -> Target:
    """``SCHEME://REST`` as a :class:`Target` for ``use``; UsageError saying what is wrong (the caller
    names the URI: ``--to URI: ...``, ``checkpoint_storage: ...``)."""
    from thub.specs import load_object

    scheme, sep, rest = uri.partition("://")
    # a push target with nothing after :// reads as no known shape (thub checkpoint push always said so);
    # the mirror names the missing bucket
    spec = spec_of(scheme if sep and (rest or use == "mirror") else "", use)
    if spec.parse is not None:
        target = load_object(spec.parse)(uri, rest)
    elif spec.location == "path":
        if not rest.startswith("/"):
            raise UsageError(f"a {scheme}:// {'target' if use == 'push' else 'location'} is an absolute path "
                             f"({spec.uri})")
        target = Target(scheme, uri, rest.rstrip("/") or "/")
    else:
        if not rest.strip("/"):
            raise UsageError(f"no bucket ({spec.uri})")
        target = Target(scheme, uri, rest.rstrip("/"))
    return dataclasses.replace(target, spec=spec)


def missing_package(spec: StorageSpec) -> str | None:
    """The first of ``spec.packages`` that is not installed here (checked without importing it)."""
    from importlib.util import find_spec

    for module in spec.packages:
        try:
            if find_spec(module) is None:
                return module
        except (ImportError, ValueError):
            return module
    return None


def shapes(use: Use) -> str:
    """The URI shapes of the registered schemes for ``use``: ``a, b or c`` (help texts)."""
    from thub.manager import get_registry

    found = [spec.uri for spec in get_registry().storage.values() if use in spec.supports]
    return " or ".join(filter(None, [", ".join(found[:-1]), *found[-1:]]))


def visible_schemes() -> str:
    """The schemes whose targets have a visibility (``--public``), as ``hf://`` (``or`` between them)."""
    from thub.manager import get_registry

    return " or ".join(f"{spec.name}://" for spec in get_registry().storage.values() if spec.visibility) or "no"
