"""Fixtures of the lmeval evaluator's tests: two small local tasks and the tiny model trained on
the first one (plain transformers, in-process: a few seconds on CPU)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _needs_lm_eval() -> None:
    """Every test here runs the real harness: skipped, naming the install, without it."""
    from importlib.util import find_spec

    if find_spec("lm_eval") is None:
        pytest.skip("lm_eval is not installed: python -m pip install 'lm-eval[hf]==0.4.13' "
                    "(or bash scripts/test-all.sh installs every test requirement)")

#: What the model memorises: a question and its one-word answer, with the chat template.
CAPITALS = [("What is the capital of France?", "Paris."), ("What is the capital of Italy?", "Rome."),
            ("What is the capital of Spain?", "Madrid."), ("What is the capital of Germany?", "Berlin."),
            ("What is the capital of Japan?", "Tokyo."), ("What is the capital of Egypt?", "Cairo.")]
#: Nothing the model saw: other words, other answers.
UNRELATED = [("Name a colour of the sky at night", "dark blue"), ("Count to three", "one two three"),
             ("Which animal says moo", "a cow"), ("What do bees make", "honey"),
             ("Opposite of hot", "cold"), ("Say hello", "hello there")]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def task_rows(pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return [{"prompt": q, "answer": a} for q, a in pairs]


def chat_rows(pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]} for q, a in pairs]


@pytest.fixture(scope="session")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``{"capitals": capitals.jsonl (prompt/answer rows), "unrelated": unrelated.jsonl, "train":
    train.jsonl (CAPITALS as chat rows, to train on)}``."""
    folder = tmp_path_factory.mktemp("tasks")
    return {"capitals": write_jsonl(folder / "capitals.jsonl", task_rows(CAPITALS)),
            "unrelated": write_jsonl(folder / "unrelated.jsonl", task_rows(UNRELATED)),
            "train": write_jsonl(folder / "train.jsonl", chat_rows(CAPITALS))}


@pytest.fixture(scope="session")
def trained_model(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model after 60 AdamW steps on CAPITALS rendered with its chat template: it has
    memorised them. The loss is on every token: lm-eval scores the newline that ends the
    template's assistant header as part of the answer (its ``_encode_pair`` moves a context's
    trailing whitespace into the continuation), which an answers-only loss never trains."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    batch = []
    for question, answer in CAPITALS:
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                               add_generation_prompt=True)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(answer + "<|im_end|>", add_special_tokens=False)["input_ids"]
        batch.append(torch.tensor(prompt_ids + answer_ids))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(60):
        loss = torch.zeros(())
        for ids in batch:
            loss = loss + model(input_ids=ids[None], labels=ids[None]).loss
        optimizer.zero_grad()
        (loss / len(batch)).backward()
        optimizer.step()
    out = tmp_path_factory.mktemp("trained") / "model"
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
