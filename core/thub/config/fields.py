"""Introspection of parameter models: the single source for CLI options, schema and docs."""

from __future__ import annotations

import json
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import BaseModel


@dataclass(frozen=True)
class ParamInfo:
    """One parameter of an algorithm, as read from its pydantic field."""

    name: str
    annotation: Any
    default: Any
    required: bool
    help: str
    group: str
    flag: str | None = None
    split: bool = True

    @property
    def option(self) -> str:
        return "--" + (self.flag or self.name).replace("_", "-")

    @property
    def env_var(self) -> str:
        return "THUB_" + self.name.upper()

    @property
    def base_types(self) -> tuple[Any, ...]:
        """The annotation's members without None (``int | None`` -> ``(int,)``)."""
        return tuple(t for t in _union_members(self.annotation) if t is not type(None))

    @property
    def is_flag(self) -> bool:
        return self.base_types == (bool,)

    @property
    def is_list(self) -> bool:
        return any(get_origin(t) is list for t in self.base_types)

    @property
    def choices(self) -> tuple[str, ...] | None:
        members = self.base_types
        if len(members) == 1 and get_origin(members[0]) is Literal:
            return tuple(str(v) for v in get_args(members[0]))
        return None

    def type_label(self) -> str:
        """A short human label for the type (``int``, ``list[str]``, ``auto|gpu|int``)."""
        return "|".join(_label(t) for t in self.base_types)


def _label(annotation: Any) -> str:
    origin = get_origin(annotation)
    if origin is Literal:
        return "|".join(map(str, get_args(annotation)))
    if origin in (typing.Union, types.UnionType):
        return "|".join(_label(a) for a in get_args(annotation))
    if origin is not None:
        return f"{origin.__name__}[{', '.join(_label(a) for a in get_args(annotation))}]"
    return getattr(annotation, "__name__", str(annotation))


def _union_members(annotation: Any) -> tuple[Any, ...]:
    if get_origin(annotation) in (typing.Union, types.UnionType):
        return get_args(annotation)
    return (annotation,)


def param_infos(model: type[BaseModel]) -> dict[str, ParamInfo]:
    """Every parameter of ``model`` in declaration order."""
    from pydantic_core import PydanticUndefined  # here: keep `thub --help` free of pydantic

    infos = {}
    for name, field in model.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        required = field.default is PydanticUndefined and field.default_factory is None
        infos[name] = ParamInfo(
            name=name,
            annotation=field.annotation,
            default=None if required else field.get_default(call_default_factory=True),
            required=required,
            help=field.description or "",
            group=str(extra.get("group", "other")),
            flag=extra.get("flag"),
            split=bool(extra.get("split", True)),
        )
    return infos


def parse_text(info: ParamInfo, text: str) -> Any:
    """Turn text from the environment, ``--set`` or a flag into a value pydantic will validate.

    YAML scalars/flow collections are accepted (``[a, b]``, ``{k: 1}``, ``true``); a list
    parameter also accepts ``a,b``. Pydantic does the type checking afterwards.
    """
    import yaml

    try:
        value = yaml.safe_load(text) if text.strip() else text
    except yaml.YAMLError:
        value = text
    if info.is_list and isinstance(value, str):
        if not info.split:
            return [value]
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, (int, float)) and str in info.base_types and not {int, float} & set(info.base_types):
        return text  # "rdzv_id: 123" stays a string
    return value


def format_value(value: Any) -> str:
    """Render a value for tables (JSON for collections, plain otherwise)."""
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    if value is None:
        return "-"
    return str(value)
