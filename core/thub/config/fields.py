"""Introspection of parameter models: the single source for CLI options, schema and docs."""

from __future__ import annotations

import json
import types
import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin

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
    path: bool = False  # a file-system path (param(path=True)): its `~` is expanded at validation
    bounds: str = ""  # the field's numeric constraints as text (">= 1", "0 <= x < 1"): bounds_text()
    core_applied: bool = False  # param(core_applied=True): core applies it for every backend

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
    def is_path(self) -> bool:
        return self.path

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
    annotation = _plain(annotation)
    origin = get_origin(annotation)
    if origin is Literal:
        return "|".join(map(str, get_args(annotation)))
    if origin in (typing.Union, types.UnionType):
        return "|".join(_label(a) for a in get_args(annotation))
    if origin is not None:
        return f"{origin.__name__}[{', '.join(_label(a) for a in get_args(annotation))}]"
    return getattr(annotation, "__name__", str(annotation))


def _plain(annotation: Any) -> Any:
    """``annotation`` without its constraints (``Annotated[int, Field(ge=1)]`` -> ``int``)."""
    return get_args(annotation)[0] if get_origin(annotation) is typing.Annotated else annotation


def _union_members(annotation: Any) -> tuple[Any, ...]:
    annotation = _plain(annotation)
    if get_origin(annotation) in (typing.Union, types.UnionType):
        return tuple(_plain(a) for a in get_args(annotation))
    return (annotation,)


def param_infos(model: type[BaseModel]) -> dict[str, ParamInfo]:
    """Every parameter of ``model`` in declaration order."""
    from pydantic_core import PydanticUndefined  # here: keep `thub --help` free of pydantic

    infos = {}
    for name, field in model.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        required = field.default is PydanticUndefined and field.default_factory is None
        flag = extra.get("flag")
        infos[name] = ParamInfo(
            name=name,
            annotation=field.annotation,
            default=None if required else field.get_default(call_default_factory=True),
            required=required,
            help=field.description or "",
            group=str(extra.get("group", "other")),
            flag=flag if isinstance(flag, str) else None,  # param() takes a str
            split=bool(extra.get("split", True)),
            path=bool(extra.get("path", False)),
            bounds=bounds_text([*field.metadata, *_annotated_metadata(field.annotation)]),
            core_applied=_marked_core_applied(model, name),
        )
    return infos


def _marked_core_applied(model: type[BaseModel], name: str) -> bool:
    """Whether ``model``'s field ``name``, or the field of that name in a parameter model it
    extends, is declared ``param(core_applied=True)``: a subclass that redeclares a field for its
    own help text (GRPO's ``data_path``) keeps what core does with it."""
    for cls in model.__mro__:
        field = getattr(cls, "__pydantic_fields__", {}).get(name)
        extra = getattr(field, "json_schema_extra", None)
        if isinstance(extra, dict) and extra.get("core_applied"):
            return True
    return False


def core_applied(model: type[BaseModel]) -> frozenset[str]:
    """The parameters of ``model`` thub's core applies itself for every backend (declared on their
    fields with ``param(core_applied=True)``: where the model, data and run live, the data's
    format, mixing and document column, the divergence stop, the built-data check). Every backend
    honours them without listing them; no backend may refuse them."""
    return frozenset(name for name, info in param_infos(model).items() if info.core_applied)


def _annotated_metadata(annotation: Any) -> list[Any]:
    """Constraints declared inside the type (``Annotated[int, Field(ge=1)] | Literal[...]``,
    ``list[Annotated[float, Field(ge=0)]]``): each ``Field``'s own metadata, flattened."""
    found: list[Any] = []
    if get_origin(annotation) is typing.Annotated:
        for item in get_args(annotation)[1:]:
            found.extend(getattr(item, "metadata", None) or [item])
        annotation = get_args(annotation)[0]
    for member in get_args(annotation):
        found.extend(_annotated_metadata(member))
    return found


def bounds_text(metadata: list[Any]) -> str:
    """``x >= 1``, ``0 <= x < 1``, ... from pydantic's ``ge``/``gt``/``le``/``lt`` constraints
    (the one definition of a bound: the CLI help and ``thub config init`` show it from here)."""
    low: tuple[str, str] | None = None
    high: tuple[str, str] | None = None
    for item in metadata:
        for name, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            value = getattr(item, name, None)
            if value is not None and type(item).__name__.lower() == name:
                text = f"{value:g}" if isinstance(value, float) else str(value)
                if name in ("ge", "gt"):
                    low = (sign, text)
                else:
                    high = (sign, text)
    if low and high:  # 0 <= x < 1
        return f"{low[1]} {low[0].replace('>', '<')} x {high[0]} {high[1]}"
    one = low or high
    return f"x {one[0]} {one[1]}" if one else ""


def _is_text(annotation: Any) -> bool:
    """Whether a type holds only strings (``str``, or a ``Literal`` of strings)."""
    if annotation is str:
        return True
    return get_origin(annotation) is Literal and all(isinstance(v, str) for v in get_args(annotation))


def _item_types(info: ParamInfo) -> tuple[Any, ...]:
    """The element types of a list parameter (``list[str | dict]`` -> ``(str, dict)``)."""
    items: list[Any] = []
    for member in info.base_types:
        if get_origin(member) is list:
            items.extend(_union_members(get_args(member)[0]) if get_args(member) else (Any,))
    return tuple(items)


def _flow_sequence_texts(text: str) -> list[str] | None:
    """The raw text of each item of a YAML flow sequence (``[a, 0x1F]`` -> ``["a", "0x1F"]``)."""
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    if not isinstance(node, yaml.SequenceNode) or not all(isinstance(n, yaml.ScalarNode) for n in node.value):
        return None
    return [n.value for n in node.value]


_LOADER: Any = None


def _yaml_value(text: str) -> Any:
    """``text`` read as YAML, without dates (``2024-01-01`` stays text for pydantic to judge)."""
    global _LOADER
    import yaml

    if _LOADER is None:
        class _NoDates(yaml.SafeLoader):
            pass

        _NoDates.yaml_implicit_resolvers = {
            first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
            for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
        }
        _LOADER = _NoDates
    try:
        return yaml.load(text, Loader=_LOADER) if text.strip() else text  # noqa: S506 - a SafeLoader
    except yaml.YAMLError:
        return text


def parse_text(info: ParamInfo, text: str) -> Any:
    """Turn text from the environment, ``--set`` or a flag into a value pydantic will validate.

    The field's type decides: a string field (``str``, a ``Literal`` of strings) takes the text
    exactly as given, so ``/x/run #2``, ``null`` and ``2024-01-01`` stay strings. Other fields
    read it as YAML (``true``, ``4``, ``{k: 1}``); a list parameter takes ``a,b`` or a flow list
    ``[a, b]`` (its items raw when they are strings). Pydantic checks the types afterwards.
    """
    if info.is_list:
        items = _item_types(info)
        if all(_is_text(t) for t in items):
            if text.lstrip().startswith("["):
                flow = _flow_sequence_texts(text)
                if flow is not None:
                    return flow
            if not info.split:
                return [text]
            return [part.strip() for part in text.split(",") if part.strip()]
        value = _yaml_value(text)
        if isinstance(value, list):
            return value
        if not info.split:
            return [text if str in items and not isinstance(value, dict) else value]
        return [part.strip() for part in text.split(",") if part.strip()]
    if info.base_types and all(_is_text(t) for t in info.base_types):
        return text
    value = _yaml_value(text)
    if str in info.base_types and not isinstance(value, (list, dict)) and not {int, float} & set(info.base_types):
        return text  # a field that also takes a string: "123", "/x #2" stay text
    return value


def format_value(value: Any) -> str:
    """Render a value for tables (JSON for collections, plain otherwise)."""
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    if value is None:
        return "-"
    return str(value)
