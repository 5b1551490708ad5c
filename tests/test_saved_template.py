"""One reader of saved chat templates (thub.data.saved_template): the model-path check, the light
tokenizer and the checkpoint template check agree with each other and with transformers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from thub.config.model_path import has_chat_template
from thub.data.light_tokenizer import load_light
from thub.data.saved_template import pick_template, read_chat_template, read_special_tokens
from thub.data.template_check import load_template

CHATML = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
TOOLS = "{% if tools %}TOOLS{% endif %}" + CHATML


def _tokenizer_copy(tiny_model: Path, folder: Path) -> Path:
    """The tiny model's tokenizer files (a generic fast tokenizer) without any chat template."""
    folder.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (tiny_model / name).is_file():
            shutil.copy(tiny_model / name, folder / name)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def _set_config(folder: Path, **values: Any) -> None:
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, **values}))


def _variants(tiny_model: Path, root: Path) -> dict[str, Path]:
    made = {name: _tokenizer_copy(tiny_model, root / name) for name in (
        "none", "blank", "config", "config_list", "jinja", "jinja_and_named", "jinja_over_config",
        "processor_json", "json_and_config")}
    _set_config(made["blank"], chat_template="  \n")
    _set_config(made["config"], chat_template=CHATML)
    _set_config(made["config_list"], chat_template=[{"name": "default", "template": CHATML},
                                                    {"name": "tool_use", "template": TOOLS}])
    (made["jinja"] / "chat_template.jinja").write_text(CHATML)
    (made["jinja_and_named"] / "chat_template.jinja").write_text(CHATML)
    (made["jinja_and_named"] / "additional_chat_templates").mkdir()
    (made["jinja_and_named"] / "additional_chat_templates" / "tool_use.jinja").write_text(TOOLS)
    (made["jinja_over_config"] / "chat_template.jinja").write_text(TOOLS)
    _set_config(made["jinja_over_config"], chat_template=CHATML)
    (made["processor_json"] / "chat_template.json").write_text(json.dumps({"chat_template": CHATML}))
    (made["json_and_config"] / "chat_template.json").write_text(json.dumps({"chat_template": TOOLS}))
    _set_config(made["json_and_config"], chat_template=CHATML)
    return made


def test_the_three_readers_agree_on_every_edge_case(tiny_model: Path, tmp_path: Path) -> None:
    """Before, a blank template was one (model path) and none (template check); chat_template.json
    beat tokenizer_config.json in two readers and lost in the third."""
    for name, folder in _variants(tiny_model, tmp_path).items():
        template = read_chat_template(folder)
        light = load_light(folder)
        assert light is not None, name
        assert light.chat_template == template, name
        assert has_chat_template(folder) is (template is not None), name
        assert load_template(folder)[0] == pick_template(template, tools=True), name
    assert read_chat_template(tmp_path / "blank") is None and read_chat_template(tmp_path / "none") is None
    assert read_chat_template(tmp_path / "json_and_config") == CHATML  # the tokenizer's own config first
    assert read_chat_template(tmp_path / "processor_json") == CHATML  # a processor's legacy file, last
    assert load_template(tmp_path / "jinja_and_named")[0] == TOOLS  # tools given: the tool_use template


def test_the_reader_gives_what_transformers_loads(tiny_model: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    for name, folder in _variants(tiny_model, tmp_path).items():
        if name in ("blank", "processor_json", "json_and_config"):
            continue  # thub reads a blank template as none, and a processor's file (not the tokenizer's)
        loaded = AutoTokenizer.from_pretrained(str(folder))
        assert read_chat_template(folder) == loaded.chat_template, name
        specials = read_special_tokens(folder)
        for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
            assert specials.get(key) == getattr(loaded, key), (name, key)


def test_no_tokenizer_files_or_unreadable_ones_leave_it_to_the_library(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    assert has_chat_template(bare) is None
    (bare / "tokenizer_config.json").write_text("{not json")
    assert has_chat_template(bare) is None
    with pytest.raises(ValueError):
        read_chat_template(bare)
    assert load_template(bare) == (None, {})
    (bare / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": "</s>", "lstrip": False}}))
    assert has_chat_template(bare) is False
    assert read_special_tokens(bare) == {"eos_token": "</s>"}
