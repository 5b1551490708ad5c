"""The chat template and special tokens saved next to a tokenizer, read from the files alone.

One reader for every place that needs them without importing transformers: the model-path check
of ``thub train`` (is there a template at all?), the light tokenizer of ``thub data prepare`` and
the after-run template check of the checkpoints. It reads a local folder the way transformers 5's
``from_pretrained`` does (``tokenization_utils_base``): ``chat_template.jinja`` and
``additional_chat_templates/*.jinja`` take priority over ``tokenizer_config.json``'s
``chat_template`` (a string, or a list of ``{"name", "template"}`` that becomes named templates);
a processor's legacy ``chat_template.json`` is read last. An empty template counts as none.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: files whose presence means the folder holds tokenizer files to judge by
TOKENIZER_FILES = ("tokenizer_config.json", "chat_template.jinja", "chat_template.json")
SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
TEMPLATE_DIR = "additional_chat_templates"

Template = str | dict[str, str]


def has_tokenizer_files(folder: Path) -> bool:
    """Whether ``folder`` holds any file a chat template or tokenizer settings are read from."""
    return any((folder / name).is_file() for name in TOKENIZER_FILES) or (folder / TEMPLATE_DIR).is_dir()


def _read_json(path: Path) -> Any:
    """The JSON in ``path``, None when it does not exist; ValueError/OSError when it is unreadable."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return json.loads(text)


def _normalise(value: Any, *, files: bool = False) -> Template | None:
    """A template value as transformers holds it: template files give a string when there is only
    ``default.jinja``'s, named templates otherwise; a config list always gives named templates."""
    if isinstance(value, (list, tuple)):  # named templates, as transformers saves several
        value = {item["name"]: item["template"] for item in value
                 if isinstance(item, dict) and isinstance(item.get("name"), str)
                 and isinstance(item.get("template"), str)}
    if isinstance(value, dict):
        named = {name: text for name, text in value.items() if isinstance(text, str) and text.strip()}
        if files and list(named) == ["default"]:
            return named["default"]
        return named or None
    return value if isinstance(value, str) and value.strip() else None


def read_chat_template(folder: str | Path) -> Template | None:
    """The chat template saved in ``folder``: a string, named templates ``{name: template}``, or
    None when there is none. Raises ``ValueError``/``OSError`` for an unreadable JSON file."""
    folder = Path(folder)
    files: dict[str, str] = {}
    if (folder / "chat_template.jinja").is_file():
        files["default"] = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    if (folder / TEMPLATE_DIR).is_dir():
        for path in sorted((folder / TEMPLATE_DIR).glob("*.jinja")):
            files[path.name.removesuffix(".jinja")] = path.read_text(encoding="utf-8")
    if files:  # template files take priority over the config entries, as in transformers
        return _normalise(files, files=True)
    for name in ("tokenizer_config.json", "chat_template.json"):
        data = _read_json(folder / name)
        if isinstance(data, dict):
            found = _normalise(data.get("chat_template"))
            if found is not None:
                return found
    return None


def pick_template(template: Template | None, *, tools: bool = False) -> str | None:
    """The one template ``apply_chat_template`` renders (transformers' ``get_chat_template``):
    named templates give ``tool_use`` when tools are passed and it exists, else ``default``."""
    if isinstance(template, dict):
        if tools and "tool_use" in template:
            return template["tool_use"]
        return template.get("default")
    return template


def _content(value: Any) -> Any:
    if isinstance(value, dict) and "content" in value:  # a serialised AddedToken
        return value["content"]
    return value


def read_special_tokens(folder: str | Path) -> dict[str, Any]:
    """The special tokens saved in ``folder``: ``tokenizer_config.json``'s (plain strings or
    serialised ``AddedToken`` dicts), ``special_tokens_map.json`` filling the gaps, plus
    ``additional_special_tokens``. Raises ``ValueError``/``OSError`` for an unreadable file."""
    folder = Path(folder)
    config = _read_json(folder / "tokenizer_config.json")
    extra = _read_json(folder / "special_tokens_map.json")
    config = config if isinstance(config, dict) else {}
    extra = extra if isinstance(extra, dict) else {}
    special: dict[str, Any] = {}
    for key in SPECIAL_KEYS:
        value = _content(config.get(key)) if config.get(key) is not None else _content(extra.get(key))
        if isinstance(value, str):
            special[key] = value
    additional = config.get("additional_special_tokens") or extra.get("additional_special_tokens")
    if additional:
        special["additional_special_tokens"] = [_content(item) for item in additional]
    return special
