"""``thub eval`` through the real lm-evaluation-harness evaluator (thub-plugin-lmeval, registered
by its entry point) on a real trl CPU run of the tiny model trained to memorise a few answers
(issue 28's "done when"): the tuned model beats its base on a local task of those prompts and not
on an unrelated one; the results are in RUN_DIR/eval/ and in ``thub history show``."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.slow, pytest.mark.needs_backend("trl"),
    pytest.mark.skipif(importlib.util.find_spec("lm_eval") is None,
                       reason="lm_eval is not importable: thub install lmeval"),
]

ROWS = [("Say the secret word.", "Zanzibar quokka."), ("What is the code?", "Seven seven marmot."),
        ("Name the ship.", "The Purple Walrus."), ("Who guards the gate?", "Old Barnaby.")]
OTHER = [("What is two plus two?", "Four."), ("What colour is the sky?", "Blue."),
         ("How many legs has a cat?", "Four legs.")]


def _environ() -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    environ["XDG_CACHE_HOME"] = os.path.join(tempfile.gettempdir(), f"thub-eval-lmeval-tests-{os.getpid()}")
    environ["HF_HUB_OFFLINE"] = "1"  # local tasks only: nothing may be downloaded
    return environ


def _thub(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True, env=_environ(),
                          timeout=900)


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_tuned_beats_base_on_its_prompts_through_lm_eval(tiny_model: Path, tmp_path: Path) -> None:
    evaluators = _thub("evaluators", "--json")
    assert evaluators.returncode == 0, evaluators.stderr
    if "lmeval" not in {e["name"] for e in json.loads(evaluators.stdout)["evaluators"]}:
        pytest.skip("the lmeval evaluator is not registered: thub install lmeval")
    train = _jsonl(tmp_path / "train.jsonl", [{"messages": [{"role": "user", "content": p},
                                                            {"role": "assistant", "content": a}]} for p, a in ROWS])
    memorised = _jsonl(tmp_path / "memorised.jsonl", [{"prompt": p, "answer": a} for p, a in ROWS])
    unrelated = _jsonl(tmp_path / "unrelated.jsonl", [{"prompt": p, "answer": a} for p, a in OTHER])
    run = tmp_path / "run"
    done = _thub("train", "sft", "--backend", "trl", "--model-path", str(tiny_model), "--data-path", train,
                 "--ckpt-output-dir", str(run), "--max-steps", "6", "--learning-rate", "5e-3", "--max-seq-len", "96")
    assert done.returncode == 0, done.stdout + done.stderr

    done = _thub("eval", str(run), "--base", "--tasks", f"{memorised},{unrelated}", "--evaluator", "lmeval")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "final - base" in done.stdout and "perplexity" in done.stdout
    docs = {name: json.loads((run / "eval" / f"{name}.json").read_text()) for name in ("memorised", "unrelated")}
    assert docs["memorised"]["evaluator"]["name"] == "lmeval"
    final = docs["memorised"]["models"]["final"]
    assert final["harness"]["name"] == "lm-eval" and final["samples"] == len(ROWS)
    assert final["arguments"]["apply_chat_template"] is True
    ratio = {name: doc["models"]["base"]["metrics"]["perplexity"] / doc["models"]["final"]["metrics"]["perplexity"]
             for name, doc in docs.items()}
    assert ratio["memorised"] > 2, ratio  # far more likely after training on exactly these answers
    assert ratio["memorised"] > 2 * ratio["unrelated"], ratio  # and not on answers it never saw
    summary = json.loads((run / "result.json").read_text())["eval"]["tasks"]
    assert summary["memorised"]["delta"]["final"]["perplexity"] < 0
    assert summary["memorised"]["higher_is_better"]["perplexity"] is False
    shown = _thub("history", "show", str(run))
    assert shown.returncode == 0 and "eval memorised" in shown.stdout and "better" in shown.stdout
