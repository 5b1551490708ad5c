#!/usr/bin/env python3
"""Write the demo datasets under examples/data/ (deterministic; stdlib only).

The rows are small and highly regular (capitals, arithmetic, counting,
repeating words) so that a tiny random model's loss falls within a few dozen
steps. The committed files are exactly what this script writes:

    python examples/make_demo_data.py            # rewrites examples/data/*.jsonl
    python examples/make_demo_data.py --out DIR  # writes them somewhere else

examples/make_tiny_model.py imports ``all_texts()`` from here to train its
tokenizer on the same text.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "data"

SYSTEM = "You are a helpful assistant. Answer briefly."

CAPITALS = [
    ("France", "Paris"),
    ("Germany", "Berlin"),
    ("Italy", "Rome"),
    ("Spain", "Madrid"),
    ("Japan", "Tokyo"),
    ("Egypt", "Cairo"),
    ("Canada", "Ottawa"),
    ("Peru", "Lima"),
]

NUMBER_WORDS = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
]

WORDS = ["cat", "dog", "sun", "tree", "book", "red", "blue", "fish"]

OPPOSITES = [
    ("hot", "cold"),
    ("up", "down"),
    ("big", "small"),
    ("fast", "slow"),
    ("day", "night"),
    ("old", "new"),
    ("yes", "no"),
    ("open", "closed"),
]

# Fixed (a, b) pairs for the chat arithmetic rows and the GRPO rows; written out
# rather than drawn so the files never depend on a random generator's version.
CHAT_SUMS = [(2, 3), (1, 1), (4, 4), (3, 5), (6, 2), (7, 1), (5, 4), (2, 6),
             (8, 1), (3, 3), (4, 2), (1, 7), (9, 0), (2, 2), (5, 3), (6, 3)]
GRPO_SUMS = [(2, 3), (1, 2), (4, 1), (3, 4), (5, 2), (6, 1), (2, 2), (3, 3),
             (1, 5), (4, 4), (7, 2), (2, 6), (5, 1), (3, 1), (8, 1), (1, 1),
             (6, 2), (2, 4), (4, 3), (5, 5), (1, 8), (3, 5), (7, 1), (2, 7),
             (6, 3), (4, 5), (1, 3), (3, 6), (5, 4), (2, 5), (8, 0), (1, 6)]


def _chat(user: str, assistant: str, system: bool = False) -> dict:
    messages = []
    if system:
        messages.append({"role": "system", "content": SYSTEM})
    messages.append({"role": "user", "content": user})
    messages.append({"role": "assistant", "content": assistant})
    return {"messages": messages}


def chat_rows() -> list[dict]:
    """64 rows: 8 capitals, 16 sums, 8 counting, 8 repeats, 8 opposites,
    8 number words, 8 spelled-out letters. Every fourth row has a system turn."""
    pairs: list[tuple[str, str]] = []
    for country, capital in CAPITALS:
        pairs.append((f"What is the capital of {country}?", f"{capital}."))
    for a, b in CHAT_SUMS:
        pairs.append((f"{a}+{b}", f"{a + b}"))
    for n in range(1, 9):
        pairs.append((f"Count to {n}.", " ".join(str(i) for i in range(1, n + 1))))
    for word in WORDS:
        pairs.append((f"Repeat: {word}", f"{word} {word} {word}"))
    for word, opposite in OPPOSITES:
        pairs.append((f"Opposite of {word}?", f"{opposite}"))
    for n in range(1, 9):
        pairs.append((f"Write {n} as a word.", NUMBER_WORDS[n]))
    for word in WORDS:
        pairs.append((f"Spell {word}.", "-".join(word)))
    return [_chat(u, a, system=(i % 4 == 0)) for i, (u, a) in enumerate(pairs)]


def grpo_rows() -> list[dict]:
    """32 rows of one-digit sums, answer a decimal string."""
    return [{"question": f"What is {a}+{b}?", "answer": str(a + b)} for a, b in GRPO_SUMS]


def document_rows() -> list[dict]:
    """32 short plain-text paragraphs built from the same facts as the chat rows."""
    docs: list[str] = []
    for country, capital in CAPITALS:
        docs.append(
            f"{capital} is the capital of {country}. Many people live in {capital}. "
            f"The capital of {country} is {capital}."
        )
    for n in range(1, 9):
        docs.append(
            f"The number {n} is written as {NUMBER_WORDS[n]}. "
            f"Counting to {n} goes: {' '.join(str(i) for i in range(1, n + 1))}."
        )
    for a, b in CHAT_SUMS[:8]:
        docs.append(f"When you add {a} and {b} you get {a + b}. So {a}+{b} is {a + b}.")
    for (word, opposite), thing in zip(OPPOSITES, WORDS):
        docs.append(
            f"The opposite of {word} is {opposite}. The {thing} is not {word}; "
            f"the {thing} is {opposite}."
        )
    return [{"document": d} for d in docs]


def sharegpt_rows() -> list[dict]:
    """16 rows in ShareGPT form (human/gpt turns); two also carry a system turn."""
    rows = []
    for i, row in enumerate(chat_rows()[:16]):
        convo = []
        if i % 8 == 0:
            convo.append({"from": "system", "value": SYSTEM})
        for m in row["messages"]:
            if m["role"] == "user":
                convo.append({"from": "human", "value": m["content"]})
            elif m["role"] == "assistant":
                convo.append({"from": "gpt", "value": m["content"]})
        rows.append({"conversations": convo})
    return rows


def alpaca_rows() -> list[dict]:
    """16 rows in Alpaca form (instruction, input, output); half have an empty input."""
    rows = []
    for country, capital in CAPITALS:
        rows.append({"instruction": "Name the capital of the country.", "input": country,
                     "output": f"{capital}."})
    for word, opposite in OPPOSITES[:4]:
        rows.append({"instruction": f"Give the opposite of {word}.", "input": "",
                     "output": opposite})
    for a, b in CHAT_SUMS[:4]:
        rows.append({"instruction": f"Add {a} and {b}.", "input": "", "output": str(a + b)})
    return rows


def preference_rows() -> list[dict]:
    """16 preference pairs (TRL's prompt/chosen/rejected, plain text) for the dpo demo: the chat
    rows' right answer chosen, a wrong one rejected (the next capital, a sum off by one). Built
    from the chat rows' own strings, so the tokenizer trained on :func:`all_texts` knows them."""
    rows = []
    for i, (country, capital) in enumerate(CAPITALS):
        wrong = CAPITALS[(i + 1) % len(CAPITALS)][1]
        rows.append({"prompt": f"What is the capital of {country}?", "chosen": f"{capital}.",
                     "rejected": f"{wrong}."})
    for a, b in CHAT_SUMS[:8]:
        rows.append({"prompt": f"{a}+{b}", "chosen": f"{a + b}", "rejected": f"{a + b + 1}"})
    return rows


DATASETS = {
    "chat.jsonl": chat_rows,
    "grpo.jsonl": grpo_rows,
    "documents.jsonl": document_rows,
    "sharegpt.jsonl": sharegpt_rows,
    "alpaca.jsonl": alpaca_rows,
}


def _strings(obj) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return []


def all_texts() -> list[str]:
    """Every string value in every demo dataset (for tokenizer training)."""
    texts: list[str] = []
    for make in DATASETS.values():
        for row in make():
            texts.extend(_strings(row))
    return texts


# written too, but not tokenizer text: adding them must not change the tiny model
EXTRA_DATASETS = {"preference.jsonl": preference_rows}


def write(out: Path) -> dict[str, int]:
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, make in {**DATASETS, **EXTRA_DATASETS}.items():
        rows = make()
        with open(out / name, "w", encoding="utf-8", newline="\n") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        counts[name] = len(rows)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"output directory (default: {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    counts = write(args.out)
    for name, n in counts.items():
        print(f"{args.out / name}: {n} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
