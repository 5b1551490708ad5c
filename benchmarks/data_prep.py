"""Benchmark: chat data preparation (template + tokenize + loss mask) against the anchors.

All methods run in the same process on the same generated data and the same locally trained
byte-level BPE tokenizer (no network):

* ceiling: ``tokenizer(batch of 1000)`` on pre-rendered text (rendering not timed);
* thub ``tokenize_chat`` in process, and ``thub.data.prepare`` (JSONL written) with 1 and N procs;
* TRL ``SFTTrainer._prepare_dataset`` with ``assistant_only_loss`` (needs ``{% generation %}``);
* a plain ``apply_chat_template(return_assistant_tokens_mask=True)`` loop;
* instructlab-training ``data_process.process_data`` when it is installed.

It also times ``thub data check`` on a 100k-line JSONL file. Prints tokens/s and the ratio to
the ceiling for each; no assertion (the contract lives in docs/performance-anchors.md).

    python benchmarks/data_prep.py [--conversations 20000] [--vocab 32000] [--num-proc 2] [--repeat 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from thub.data import DatasetSource, prepare, tokenize_chat
from thub.data.synthetic import CHATML, CHATML_GENERATION

_SYLLABLES = ["ka", "lo", "mi", "ten", "ra", "su", "vo", "ex", "ph", "qu", "an", "ing", "st", "or", "ne", "ta",
              "ri", "co", "de", "ul", "ma", "zo", "bi", "ge", "ho", "fi", "ja", "ny", "pa", "we"]


def make_words(n: int, rng: random.Random) -> list[str]:
    """Pseudo-words, so that a 32k-token BPE has something to learn."""
    return ["".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(n)]


def make_text(rng: random.Random, words: list[str], weights: list[float], low: int, high: int) -> str:
    picked = rng.choices(words, weights=weights, k=rng.randint(low, high))
    out = []
    for i, word in enumerate(picked):
        out.append(word + ("." if rng.random() < 0.08 else ",") if rng.random() < 0.15 else word)
        if rng.random() < 0.03:
            out.append(str(rng.randint(0, 9999)))
        if i and rng.random() < 0.02:
            out.append("\n")
    return " ".join(out)


def make_data(n: int, seed: int) -> tuple[list[dict[str, Any]], list[str]]:
    """System + 1-3 exchanges per conversation (like the anchor data), and a training corpus."""
    rng = random.Random(seed)
    words = make_words(20000, rng)
    weights = [1.0 / (rank + 1) for rank in range(len(words))]  # Zipf-like
    rows = []
    for _ in range(n):
        messages = [{"role": "system", "content": make_text(rng, words, weights, 10, 40)}]
        for _ in range(rng.randint(1, 3)):
            messages.append({"role": "user", "content": make_text(rng, words, weights, 20, 120)})
            messages.append({"role": "assistant", "content": make_text(rng, words, weights, 60, 300)})
        rows.append({"messages": messages})
    corpus = [make_text(rng, words, weights, 20, 200) for _ in range(20000)]
    return rows, corpus


def make_tokenizer(corpus: list[str], vocab: int, template: str) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token="<|endoftext|>", chat_template=template)


@contextlib.contextmanager
def _quiet() -> Any:
    """Silence the anchors' own printing (instructlab prints every masked sample)."""
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        yield


def bench_trl(rows: list[dict[str, Any]], tok: Any, num_proc: int, cache_dir: str) -> tuple[int, int]:
    import datasets
    from trl import SFTConfig, SFTTrainer

    datasets.disable_caching()
    ds = datasets.Dataset.from_list(rows)
    args = SFTConfig(output_dir=cache_dir, assistant_only_loss=True, max_length=None, dataset_num_proc=num_proc,
                     report_to=[], use_cpu=True, bf16=False)
    fake = SimpleNamespace(_tokenizer=tok, chat_template=None, completion_only_loss=None)
    out = SFTTrainer._prepare_dataset(fake, ds, tok, args, False, None, "train")
    tokens = sum(len(x) for x in out["input_ids"])
    trained = sum(sum(1 for x in labels if x != -100) for labels in out["labels"])
    return tokens, trained


def bench_loop(rows: list[dict[str, Any]], tok: Any) -> tuple[int, int]:
    tokens = trained = 0
    for row in rows:
        enc = tok.apply_chat_template(row["messages"], tokenize=True, return_dict=True,
                                      return_assistant_tokens_mask=True)
        tokens += len(enc["input_ids"])
        trained += sum(enc["assistant_masks"])
    return tokens, trained


def bench_instructlab(rows: list[dict[str, Any]], tok_dir: str, work: Path, num_proc: int) -> tuple[int, int] | None:
    try:
        from instructlab.training import data_process  # type: ignore[import-not-found]
    except ImportError:
        return None
    data = work / "ilab.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out_dir = work / "ilab_out"
    data_process.process_data(data_path=str(data), data_output_path=str(out_dir), model_path=tok_dir,
                              max_seq_len=1_000_000, num_cpu_procs=num_proc)
    tokens = trained = 0
    with open(out_dir / "data.jsonl") as handle:
        for line in handle:
            sample = json.loads(line)
            tokens += len(sample["input_ids"])
            trained += sum(1 for x in sample["labels"] if x != -100)
    return tokens, trained


def bench_check(work: Path, lines: int) -> float:
    from thub.data.synthetic import conversations

    path = work / "check.jsonl"
    with path.open("w") as handle:
        for row in conversations(lines, seed=3, words=(4, 12)):
            handle.write(json.dumps(row) + "\n")
    from thub.data import load_dataset_rows

    start = time.perf_counter()
    load_dataset_rows(str(path))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=20000)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the median per method is reported")
    parser.add_argument("--max-seq-len", type=int, default=4096)
    parser.add_argument("--check-lines", type=int, default=100_000)
    parser.add_argument("--skip", default="", help="comma list of: trl,loop,instructlab,check")
    ns = parser.parse_args()
    skip = set(filter(None, ns.skip.split(",")))

    rows, corpus = make_data(ns.conversations, seed=0)
    trained_tok = make_tokenizer(corpus, ns.vocab, CHATML_GENERATION)
    results: list[tuple[str, float, int, int]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data_path = work / "data.jsonl"
        data_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tok_dir = work / "tok"
        trained_tok.save_pretrained(tok_dir)
        # Worker processes of datasets.map reload the tokenizer by path: give it a model type.
        (tok_dir / "config.json").write_text(json.dumps({"model_type": "qwen2"}))

        def fresh(template: str = CHATML_GENERATION) -> Any:
            # A new instance per method: the BPE word cache of a used tokenizer would favour
            # whichever method runs second.
            from transformers import PreTrainedTokenizerFast

            loaded = PreTrainedTokenizerFast.from_pretrained(tok_dir)
            loaded.chat_template = template
            return loaded

        tok = fresh()

        texts = [tok.apply_chat_template(r["messages"], tokenize=False) for r in rows]

        def ceiling() -> tuple[int, int]:
            tok = fresh()
            total = 0
            for k in range(0, len(texts), 1000):
                total += sum(len(x) for x in tok(texts[k:k + 1000], add_special_tokens=False)["input_ids"])
            return total, 0

        def thub_tokenize(template: str) -> tuple[int, int]:
            _, stats = tokenize_chat(rows, fresh(template), ns.max_seq_len)
            return stats.tokens, stats.trained_tokens

        def thub_prepare(procs: int) -> tuple[int, int]:
            result = prepare([DatasetSource(str(data_path))], fresh(), work / f"prepared{procs}.jsonl",
                             max_seq_len=ns.max_seq_len, num_proc=procs, use_cache=False)
            return result.stats.tokens, result.stats.trained_tokens

        methods: list[tuple[str, Any]] = [
            ("ceiling: tokenizer(batch of 1000), pre-rendered, 1 process", ceiling),
            ("thub tokenize_chat, template with generation markers", lambda: thub_tokenize(CHATML_GENERATION)),
            ("thub tokenize_chat, template without markers", lambda: thub_tokenize(CHATML)),
        ]
        for procs in sorted({1, ns.num_proc}):
            methods.append((f"thub prepare -> JSONL (validation+writing), num_proc={procs}",
                            lambda p=procs: thub_prepare(p)))
        if "trl" not in skip:
            methods.append((f"TRL SFTTrainer._prepare_dataset (assistant_only_loss, num_proc={ns.num_proc})",
                            lambda: bench_trl(rows, fresh(), ns.num_proc, str(work / "trl"))))
        if "loop" not in skip:
            methods.append(("apply_chat_template(return_assistant_tokens_mask) loop, 1 process",
                            lambda: bench_loop(rows, fresh())))
        if "instructlab" not in skip:
            methods.append((f"instructlab-training process_data (num_cpu_procs={ns.num_proc})",
                            lambda: bench_instructlab(rows, str(tok_dir), work, ns.num_proc)))

        # Rounds interleave the methods, so a machine getting busier or quieter during the run
        # does not favour whichever method ran first; the median per method is reported.
        times: dict[str, list[float]] = {label: [] for label, _ in methods}
        counts: dict[str, tuple[int, int]] = {}
        failed: set[str] = set()
        for _ in range(ns.repeat):
            for label, fn in methods:
                if label in failed:
                    continue
                start = time.perf_counter()
                try:
                    with _quiet():
                        found = fn()
                except Exception as exc:  # noqa: BLE001 - report and go on
                    print(f"{label}: failed: {exc!r}", file=sys.stderr)
                    failed.add(label)
                    continue
                if found is None:
                    print(f"{label}: not installed, skipped", file=sys.stderr)
                    failed.add(label)
                    continue
                times[label].append(time.perf_counter() - start)
                counts[label] = found
        results = [(label, statistics.median(times[label]), *counts[label]) for label, _ in methods
                   if times[label]]
        check_s = None if "check" in skip else bench_check(work, ns.check_lines)

    ceiling_rate = results[0][2] / results[0][1]
    print(f"{ns.conversations} conversations, vocab {len(tok)}, {os.cpu_count()} CPUs, median of {ns.repeat} interleaved rounds")
    print(f"{'method':<78} {'s':>7} {'tokens/s':>10} {'x ceiling':>9} {'tokens':>10} {'trained':>10}")
    for label, seconds, tokens, trained in results:
        rate = tokens / seconds
        print(f"{label:<78} {seconds:7.2f} {rate / 1e3:9.0f}k {rate / ceiling_rate:9.2f} {tokens:10d} {trained:10d}")
    rates = {label: tokens / seconds for label, seconds, tokens, _ in results}
    best = max(rate for label, rate in rates.items() if label.startswith("thub prepare"))
    for label, rate in rates.items():
        if label.startswith(("TRL", "apply_chat", "instructlab")):
            print(f"thub prepare (best) vs {label.split(' (')[0]}: {best / rate:.2f}x the tokens/s")
    if check_s is not None:
        print(f"thub data check on {ns.check_lines} lines: {check_s:.2f} s (target < 2 s)")


if __name__ == "__main__":
    main()
