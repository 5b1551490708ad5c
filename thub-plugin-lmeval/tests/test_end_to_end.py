"""Issue 28's end-to-end check on CPU with the real harness: the tiny model trained with
``thub train sft --backend trl`` on a set it memorises, then ``thub eval RUN --base --tasks
<those prompts>,<unrelated prompts>``: tuned beats base on the first and not on the second, the
results are in RUN_DIR/eval/ and ``thub history show RUN`` shows the deltas."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def thub(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def test_tuned_beats_base_on_what_it_learned_and_not_elsewhere(tiny_model: Path, tasks: dict[str, Path],
                                                                tmp_path: Path) -> None:
    data = tasks["train"]
    run = tmp_path / "run"
    # every token is trained (--unmask-messages): lm-eval scores the newline after the template's
    # assistant header as part of the answer, see conftest.trained_model
    trained = thub("train", "sft", "--backend", "trl", "--model-path", str(tiny_model), "--data-path", str(data),
                   "--ckpt-output-dir", str(run), "--unmask-messages", "--learning-rate", "1e-2",
                   "--num-epochs", "40", "--effective-batch-size", "6", "--json")
    assert trained.returncode == 0, trained.stderr[-3000:]

    done = thub("eval", str(run), "--base", "--tasks", f"{tasks['capitals']},{tasks['unrelated']}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr  # lm-eval's bootstrap pool workers end quietly

    capitals = json.loads((run / "eval" / "capitals.json").read_text())
    unrelated = json.loads((run / "eval" / "unrelated.json").read_text())
    base, tuned = capitals["models"]["base"], capitals["models"]["final"]
    assert tuned["metrics"]["acc"] > base["metrics"]["acc"]
    assert tuned["metrics"]["perplexity"] < base["metrics"]["perplexity"]
    base, tuned = unrelated["models"]["base"], unrelated["models"]["final"]
    assert tuned["metrics"]["acc"] <= base["metrics"]["acc"]
    assert tuned["metrics"]["perplexity"] >= base["metrics"]["perplexity"]
    for result in (capitals, unrelated):
        assert result["evaluator"]["name"] == "lmeval"
        for model in result["models"].values():
            assert model["harness"]["name"] == "lm-eval" and model["samples"] == 6
            assert model["arguments"]["command"].startswith("lm_eval run --model hf ")

    history = thub("history", "show", str(run))
    assert history.returncode == 0, history.stderr
    text = history.stdout
    assert "eval capitals" in text and "eval unrelated" in text
    capitals_block = text.split("eval capitals", 1)[1].split("eval unrelated", 1)[0]
    assert "acc" in capitals_block and "better" in capitals_block
    assert "better" not in text.split("eval unrelated", 1)[1]
