"""The backend's row check (``BackendSpec.check_rows``): a dpo/kto row LLaMA-Factory's sharegpt
preference format cannot hold is refused in the parent, naming the row. With LLaMA-Factory in its
managed environment, the dry run and the real run refuse it (run through the managed interpreter,
as the translation is), exit 2, no run directory written, not a failed run of the training child.
The registration-only part runs without LLaMA-Factory (tests/test_one_plan.py: every surface)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from thub.backend import UsageError
from thub.manager import load_registry
from thub.specs import load_object

USER = {"role": "user", "content": "hi"}
PROMPT = [{"role": "user", "content": "what is 6 x 7?"}, {"role": "tool", "content": "42"},
          {"role": "user", "content": "so?"}]


def _check(algorithm: str, rows: list[dict], params: dict | None = None) -> None:
    spec = load_registry().backend("llamafactory")
    assert spec.check_rows is not None
    load_object(spec.check_rows)(algorithm, rows, [f"p.jsonl:{i + 1}" for i in range(len(rows))], params or {})


def test_the_registered_check_refuses_what_the_format_cannot_hold_and_passes_the_rest() -> None:
    pair = {"prompt": [USER], "chosen": [{"role": "assistant", "content": "a"}],
            "rejected": [{"role": "assistant", "content": "b"}]}
    _check("dpo", [pair])
    _check("kto", [{"prompt": [USER], "completion": [{"role": "assistant", "content": "a"}], "label": True}])
    # sft rows are thub's own tokens on this backend: a tool turn is trained as the template renders it
    _check("sft", [{"messages": [USER, {"role": "tool", "content": "42"}, {"role": "assistant", "content": "a"}]}])
    with pytest.raises(UsageError, match=r"^p.jsonl:2.prompt\[1\]: a tool call or tool result"):
        _check("dpo", [pair, {**pair, "prompt": PROMPT}])
    with pytest.raises(UsageError, match=r"^p.jsonl:1.completion: expected one assistant turn, found 2"):
        _check("kto", [{"prompt": [USER], "completion": [{"role": "assistant", "content": "a"}] * 2, "label": True}])


def test_the_check_imports_no_training_library() -> None:
    """It runs in the parent (the plan), which never imports a training library."""
    code = ("import sys, thub_plugin_llamafactory.preference; "
            "print(sorted(m for m in ('torch', 'transformers', 'datasets', 'llamafactory') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.slow
@pytest.mark.install
@pytest.mark.parametrize("dry", [True, False], ids=["dry run", "real run"])
def test_managed_backend_refuses_a_row_it_cannot_hold_before_the_run(lf_env: dict, tiny_model: Path,
                                                                     tmp_path: Path, dry: bool) -> None:
    managed = [b for b in lf_env["manifest"]["backends"] if b["name"] == "llamafactory"]
    assert managed and managed[0]["check_rows"] == "thub_plugin_llamafactory.preference:check_rows"
    data = tmp_path / "tools.jsonl"
    good = {"prompt": [{"role": "user", "content": "hi"}], "chosen": [{"role": "assistant", "content": "hello"}],
            "rejected": [{"role": "assistant", "content": "go"}]}
    data.write_text(json.dumps(good) + "\n" + json.dumps({**good, "prompt": PROMPT}) + "\n")
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "thub", "train", "dpo", "--backend", "llamafactory",
                           "--model-path", str(tiny_model), "--data-path", str(data), "--ckpt-output-dir", str(out),
                           "--max-steps", "2", *(["--dry-run"] if dry else [])],
                          capture_output=True, text=True, env=lf_env["environ"], timeout=600)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-3000:]
    assert "tools.jsonl:2.prompt[1]: a tool call or tool result" in done.stderr
    assert "Traceback" not in done.stderr
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.install
def test_managed_translation_refusal_is_bad_input(lf_env: dict, tiny_model: Path, tmp_path: Path) -> None:
    """The managed environment's UsageError (a batch that does not split over the processes) is
    exit 2 with its message, as the same translation's in the current environment."""
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "thub", "train", "sft", "--backend", "llamafactory",
                           "--model-path", str(tiny_model), "--data-path", str(Path(__file__).parents[2] / "examples"
                                                                                / "data" / "chat.jsonl"),
                           "--ckpt-output-dir", str(out), "--effective-batch-size", "5", "--nproc-per-node", "2",
                           "--dry-run"], capture_output=True, text=True, env=lf_env["environ"], timeout=600)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-3000:]
    assert "nearest valid values: 4, 6" in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()
