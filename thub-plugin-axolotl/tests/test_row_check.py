"""The backend's row check (``BackendSpec.check_rows``): a dpo/kto row whose prompt the model's
chat template does not render as the start of prompt + answer (so the answer cannot be cut off
for axolotl's RL path) is refused in the parent, naming its ``file:line``: every dry run and the
real run exit 2 before anything is written or started, not a failed run of the training child.
Runs without axolotl: the check imports only ``thub.backend``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from thub.backend import UsageError
from thub.manager import load_registry
from thub.specs import load_object

#: a system line only with an assistant turn present: the generation prompt is not a prefix
REWRITING = ("{% if messages[-1].role == 'assistant' %}SYSTEM {% endif %}"
             "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
             "{% if add_generation_prompt %}assistant: {% endif %}")
PROMPT = [{"role": "user", "content": "hi"}]
PAIR = {"prompt": PROMPT, "chosen": [{"role": "assistant", "content": "a"}],
        "rejected": [{"role": "assistant", "content": "b"}]}
UNPAIRED = [{"prompt": PROMPT, "completion": [{"role": "assistant", "content": "a"}], "label": True},
            {"prompt": PROMPT, "completion": [{"role": "assistant", "content": "b"}], "label": False}]


@pytest.fixture
def rewriting_model(tiny_model: Path, tmp_path: Path) -> Path:
    """The tiny model with a chat template that renders the prompt differently once an answer follows."""
    model = tmp_path / "rewriting"
    shutil.copytree(tiny_model, model)
    (model / "chat_template.jinja").write_text(REWRITING)  # read before tokenizer_config.json's, as transformers does
    return model


def _check(algorithm: str, rows: list[dict], model: Path) -> None:
    spec = load_registry().backend("axolotl")
    assert spec.check_rows is not None
    load_object(spec.check_rows)(algorithm, rows, [f"p.jsonl:{i + 1}" for i in range(len(rows))],
                                 {"model_path": str(model)})


def test_the_registered_check_refuses_a_prompt_the_template_rewrites(tiny_model: Path,
                                                                      rewriting_model: Path) -> None:
    _check("dpo", [PAIR, PAIR], tiny_model)  # ChatML renders the prompt as the start: nothing to refuse
    _check("kto", UNPAIRED, tiny_model)
    _check("sft", [{"messages": [*PROMPT, {"role": "assistant", "content": "a"}]}], rewriting_model)  # thub's tokens
    with pytest.raises(UsageError, match=r"^p.jsonl:1.chosen: the model's chat template does not render the prompt"):
        _check("dpo", [PAIR], rewriting_model)
    with pytest.raises(UsageError, match=r"^p.jsonl:1.completion: the model's chat template does not render"):
        _check("kto", UNPAIRED, rewriting_model)


def test_the_check_imports_no_training_library() -> None:
    """It runs in the parent (the plan), which never imports a training library."""
    code = ("import sys, thub_plugin_axolotl.preference; "
            "print(sorted(m for m in ('torch', 'transformers', 'datasets', 'axolotl', 'trl') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("dry", [True, False], ids=["dry run", "real run"])
def test_refused_before_the_run_with_file_and_line(thub_cli, rewriting_model: Path, tmp_path: Path,
                                                   dry: bool) -> None:
    data = tmp_path / "pairs.jsonl"
    data.write_text(json.dumps({**PAIR, "chosen": [{"role": "assistant", "content": "hello"}]}) + "\n")
    out = tmp_path / "run"
    result = thub_cli("train", "dpo", "--backend", "axolotl", "--model-path", str(rewriting_model),
                      "--data-path", str(data), "--ckpt-output-dir", str(out), *(["--dry-run"] if dry else []))
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert f"{data}:1.chosen: the model's chat template does not render the prompt" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()
