"""``thub data preview`` on a row the model's chat template refuses (raise_exception): a clear error
naming the row and the template's words, exit 2, no traceback (it was a TemplateRejected traceback)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from thub.cli.main import cli

STRICT = ("{%- for m in messages %}{%- if m.role == 'system' and not loop.first %}"
          "{{- raise_exception('System messages must come first') }}{%- endif %}"
          "<|im_start|>{{ m.role }}\n{%- if m.role == 'assistant' %}{% generation %}{{ m.content }}<|im_end|>"
          "{% endgeneration %}{%- else %}{{ m.content }}<|im_end|>{%- endif %}\n{%- endfor %}"
          "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}")


def test_a_row_the_template_refuses_is_named_not_a_traceback(tiny_model: Path, tmp_path: Path) -> None:
    model = tmp_path / "strict"
    shutil.copytree(tiny_model, model)
    (model / "chat_template.jinja").write_text(STRICT)
    config = json.loads((model / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    data = tmp_path / "chat.jsonl"
    rows = [{"messages": [{"role": "user", "content": "Hi"}, {"role": "system", "content": "Be brief."},
                          {"role": "assistant", "content": "Hello."}]}]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    result = CliRunner().invoke(cli, ["data", "preview", "--model", str(model), str(data)])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert f"{data}:1" in result.output and "System messages must come first" in result.output


def test_a_pair_is_shown_side_by_side_on_a_terminal(tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal the chosen and rejected panels of a pair are columns of one grid (each line holds
    both); piped, they follow each other whole."""
    import io

    from rich.console import Console

    import thub.cli.data as data_cli

    pairs = Path(__file__).resolve().parent / "fixtures" / "preference" / "pairs.jsonl"
    screen = io.StringIO()
    monkeypatch.setattr(data_cli, "stdout_console", lambda: Console(file=screen, force_terminal=True, width=140,
                                                                     color_system="standard"))
    result = CliRunner().invoke(cli, ["data", "preview", "--model", str(tiny_model), str(pairs)])
    assert result.exit_code == 0, result.output
    lines = screen.getvalue().splitlines()
    titles = [line for line in lines if "chosen" in line and "rejected" in line]
    assert titles, screen.getvalue()  # both titles on one line: columns
    assert "trained" in screen.getvalue()
    monkeypatch.undo()
    piped = CliRunner().invoke(cli, ["data", "preview", "--model", str(tiny_model), str(pairs)])
    assert "-- chosen --" in piped.output and "-- rejected --" in piped.output
