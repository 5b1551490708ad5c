"""The backend's row check (``BackendSpec.check_rows``) with LLaMA-Factory in its managed
environment: a dpo row its sharegpt ranking format cannot hold is refused by the dry run and by
the real run in the parent (run through the managed interpreter, as the translation is), exit 2
naming the row, no run directory written, not a failed run of the training child."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.install]

PROMPT = [{"role": "user", "content": "what is 6 x 7?"}, {"role": "tool", "content": "42"},
          {"role": "user", "content": "so?"}]


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
