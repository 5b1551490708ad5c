"""``memory://BUCKET/PREFIX``: fsspec's in-memory filesystem as a thub storage scheme (a test plugin).

Registered through ``thub_register_storage`` only: ``thub checkpoint push --to memory://...`` and
``checkpoint_storage: memory://...`` use thub's generic fsspec push and mirror (no ``push`` import
string: the spec names none). Registering imports nothing: fsspec is checked by name
(``packages``) and imported only when a push or an upload runs.
"""

from __future__ import annotations

from collections.abc import Callable

from thub import hookimpl
from thub.specs import StorageSpec


@hookimpl
def thub_register_storage(register: Callable[[StorageSpec], None]) -> None:
    """The ``memory`` scheme: push and mirror, through fsspec's ``memory`` filesystem."""
    register(StorageSpec(name="memory", summary="fsspec's in-memory filesystem (holds files for one process)",
                         uri="memory://BUCKET/PREFIX", supports=frozenset({"push", "mirror"}),
                         packages=("fsspec",)))
