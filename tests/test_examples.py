"""The demo assets under examples/: the tiny-model script, the data files, the configs."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
DATA = EXAMPLES / "data"

IM_START, IM_END, EOT, PAD = "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<pad>"
ROLES = {"system", "user", "assistant", "tool"}


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory) -> tuple[Path, Path]:
    """Two runs of make_tiny_model.py with the same seed, side by side."""
    base = tmp_path_factory.mktemp("tiny")
    dirs = (base / "a", base / "b")
    procs = [
        subprocess.Popen(
            [sys.executable, str(EXAMPLES / "make_tiny_model.py"), "--out", str(d), "--seed", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        )
        for d in dirs
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"make_tiny_model.py failed:\n{out}\n{err}"
        assert "parameters: 139,584" in out, out
    return dirs


@pytest.fixture(scope="module")
def tiny(tiny_dirs) -> Path:
    return tiny_dirs[0]


@pytest.fixture(scope="module")
def tokenizer(tiny):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _rows(name: str) -> list[dict]:
    rows = []
    with open(DATA / name, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            assert line.strip(), f"{name}:{lineno} is blank"
            row = json.loads(line)
            assert isinstance(row, dict), f"{name}:{lineno} is not an object"
            rows.append(row)
    return rows


def _mask(tokenizer, messages: list[dict]) -> tuple[list[int], list[int]]:
    out = tokenizer.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    return list(out["input_ids"]), list(out["assistant_masks"])


# --- the tiny model ---------------------------------------------------------------


def test_output_files(tiny):
    names = {p.name for p in tiny.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors",
            "tokenizer.json", "tokenizer_config.json"} <= names
    assert "pytorch_model.bin" not in names
    tok_cfg = json.loads((tiny / "tokenizer_config.json").read_text())
    assert tok_cfg["tokenizer_class"] == "PreTrainedTokenizerFast"


def test_model_loads_and_runs(tiny, tokenizer):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny)
    cfg = model.config
    assert type(model).__name__ == "LlamaForCausalLM"
    assert (cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers) == (64, 128, 2)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads) == (4, 2)
    assert cfg.max_position_embeddings == 512
    assert cfg.tie_word_embeddings is False
    assert cfg.vocab_size == len(tokenizer) == 512
    assert sum(p.numel() for p in model.parameters()) == 139_584

    eos, pad = tokenizer.convert_tokens_to_ids([IM_END, PAD])
    assert cfg.eos_token_id == eos and cfg.pad_token_id == pad
    assert model.generation_config.eos_token_id == eos
    assert model.generation_config.pad_token_id == pad

    ids = tokenizer("What is 2+3?", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], 512)
    assert torch.isfinite(logits).all()


def test_same_seed_same_files(tiny_dirs):
    a, b = tiny_dirs
    for name in ("model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "config.json", "generation_config.json"):
        assert _sha(a / name) == _sha(b / name), name


def test_special_tokens(tokenizer):
    assert tokenizer.eos_token == IM_END
    assert tokenizer.pad_token == PAD
    assert tokenizer.bos_token is None
    ids = tokenizer.convert_tokens_to_ids([EOT, IM_START, IM_END, PAD])
    assert len(set(ids)) == 4 and tokenizer.unk_token_id not in ids
    for tok in (EOT, IM_START, IM_END, PAD):
        assert len(tokenizer.encode(tok, add_special_tokens=False)) == 1, tok
    text = "What is the capital of France? Paris."
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


# --- the chat template ------------------------------------------------------------


def test_chat_template_text(tokenizer):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+3"},
        {"role": "assistant", "content": "5"},
    ]
    assert tokenizer.apply_chat_template(messages, tokenize=False) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\n2+3<|im_end|>\n"
        "<|im_start|>assistant\n5<|im_end|>\n"
    )
    assert tokenizer.apply_chat_template(messages[:2], tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+3<|im_end|>\n<|im_start|>assistant\n"
    )
    tool_turns = [
        {"role": "user", "content": "add 2 and 3"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]},
        {"role": "tool", "content": "5"},
        {"role": "assistant", "content": "5"},
    ]
    assert tokenizer.apply_chat_template(tool_turns, tokenize=False) == (
        "<|im_start|>user\nadd 2 and 3<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call><|im_end|>\n'
        "<|im_start|>tool\n5<|im_end|>\n"
        "<|im_start|>assistant\n5<|im_end|>\n"
    )


def test_chat_template_rejects_unknown_role(tokenizer):
    with pytest.raises(Exception, match="Unknown role: bot"):
        tokenizer.apply_chat_template([{"role": "bot", "content": "hi"}], tokenize=False)


def test_assistant_mask_marks_exactly_the_replies(tokenizer):
    messages = [
        {"role": "system", "content": "You are a helpful assistant. Answer briefly."},
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "Count to 3."},
        {"role": "assistant", "content": "1 2 3"},
    ]
    ids, mask = _mask(tokenizer, messages)
    assert len(ids) == len(mask) and set(mask) <= {0, 1}
    im_end = tokenizer.convert_tokens_to_ids(IM_END)

    # The masked spans, in order, are each reply's tokens followed by <|im_end|>.
    spans, current = [], []
    for i, m in zip(ids, mask):
        if m:
            current.append(i)
        elif current:
            spans.append(current)
            current = []
    if current:
        spans.append(current)
    expected = [tokenizer.encode(m["content"], add_special_tokens=False) + [im_end]
                for m in messages if m["role"] == "assistant"]
    assert spans == expected

    # Everything else (headers, system, user turns, the newline after <|im_end|>) is unmasked.
    unmasked = tokenizer.decode([i for i, m in zip(ids, mask) if not m])
    assert unmasked == (
        "<|im_start|>system\nYou are a helpful assistant. Answer briefly.<|im_end|>\n"
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n\n"
        "<|im_start|>user\nCount to 3.<|im_end|>\n<|im_start|>assistant\n\n"
    )


def test_every_chat_row_fits_and_has_an_assistant_span(tokenizer):
    for n, row in enumerate(_rows("chat.jsonl"), 1):
        ids, mask = _mask(tokenizer, row["messages"])
        assert len(ids) <= 128, f"chat.jsonl:{n} is {len(ids)} tokens"
        assert sum(mask) >= 2, f"chat.jsonl:{n} has no assistant tokens"


# --- the data files ---------------------------------------------------------------


def test_chat_jsonl():
    rows = _rows("chat.jsonl")
    assert 48 <= len(rows) <= 80
    for n, row in enumerate(rows, 1):
        assert set(row) == {"messages"}, n
        msgs = row["messages"]
        roles = [m["role"] for m in msgs]
        assert roles in (["user", "assistant"], ["system", "user", "assistant"]), (n, roles)
        for m in msgs:
            assert set(m) == {"role", "content"}, n
            assert isinstance(m["content"], str) and m["content"].strip(), n
    assert any(r["messages"][0]["role"] == "system" for r in rows)


def test_grpo_jsonl():
    rows = _rows("grpo.jsonl")
    assert 24 <= len(rows) <= 48
    for n, row in enumerate(rows, 1):
        assert set(row) == {"question", "answer"}, n
        q, a = row["question"], row["answer"]
        assert q.startswith("What is ") and q.endswith("?"), n
        x, y = q[len("What is "):-1].split("+")
        assert a == str(int(x) + int(y)), n


def test_documents_jsonl():
    rows = _rows("documents.jsonl")
    assert 24 <= len(rows) <= 48
    for n, row in enumerate(rows, 1):
        assert set(row) == {"document"}, n
        assert isinstance(row["document"], str) and len(row["document"]) > 20, n


def test_sharegpt_jsonl():
    rows = _rows("sharegpt.jsonl")
    assert 8 <= len(rows) <= 32
    for n, row in enumerate(rows, 1):
        assert set(row) == {"conversations"}, n
        turns = row["conversations"]
        froms = [t["from"] for t in turns if t["from"] != "system"]
        assert froms == ["human", "gpt"], (n, froms)
        for t in turns:
            assert set(t) == {"from", "value"}, n
            assert t["from"] in {"system", "human", "gpt"}, n
            assert isinstance(t["value"], str) and t["value"].strip(), n


def test_alpaca_jsonl():
    rows = _rows("alpaca.jsonl")
    assert 8 <= len(rows) <= 32
    for n, row in enumerate(rows, 1):
        assert set(row) == {"instruction", "input", "output"}, n
        assert all(isinstance(row[k], str) for k in row), n
        assert row["instruction"].strip() and row["output"].strip(), n


def test_demo_data_is_what_the_script_writes(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "make_demo_data.py"), "--out", str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == sorted(p.name for p in DATA.glob("*.jsonl"))
    for name in written:
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), (
            f"examples/data/{name} differs from make_demo_data.py's output; rerun the script"
        )


# --- the configs ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sft.yaml", "lora_sft.yaml", "grpo.yaml"])
def test_config_parses_and_points_at_the_demo(name):
    import yaml

    cfg = yaml.safe_load((EXAMPLES / "configs" / name).read_text())
    assert cfg["model_path"] == "examples/tiny"
    assert (ROOT / cfg["data_path"]).is_file()
    assert cfg["ckpt_output_dir"].startswith("runs/")
    assert isinstance(cfg["learning_rate"], float)


def test_preference_jsonl():
    """The dpo demo's pairs: TRL's plain prompt/chosen/rejected, the chat rows' right answer chosen, and
    read by thub as the preference kind (no row refused)."""
    from thub.data import load_dataset_rows

    rows = _rows("preference.jsonl")
    assert len(rows) == 16
    for n, row in enumerate(rows, 1):
        assert set(row) == {"prompt", "chosen", "rejected"} and row["chosen"] != row["rejected"], n
    chat_answers = {m["content"] for row in _rows("chat.jsonl") for m in row["messages"] if m["role"] == "assistant"}
    assert all(row["chosen"] in chat_answers for row in rows)
    canonical = load_dataset_rows(str(DATA / "preference.jsonl"))
    assert [row["chosen"] for row in canonical][0] == [{"role": "assistant", "content": rows[0]["chosen"]}]


def test_the_tour_eval_task_asks_what_the_demo_trained_on() -> None:
    """examples/eval/capitals.jsonl (the README tour's `thub eval` task): each prompt and answer is a
    user turn and its assistant reply in examples/data/chat.jsonl, so the demo model was trained on it."""
    pairs = set()
    for line in (DATA / "chat.jsonl").read_text().splitlines():
        turns = [m for m in json.loads(line)["messages"] if m["role"] != "system"]
        if [m["role"] for m in turns] == ["user", "assistant"]:
            pairs.add((turns[0]["content"], turns[1]["content"]))
    task = [json.loads(line) for line in (EXAMPLES / "eval" / "capitals.jsonl").read_text().splitlines()]
    assert task and all((row["prompt"], row["answer"]) in pairs for row in task), task
