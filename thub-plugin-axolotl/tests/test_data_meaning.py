"""axolotl trains exactly the rows and tokens thub validated (issue 25 items 3, 4, 5, 6).

thub's runner writes axolotl's inputs (``runner.write_inputs``: the data file and config.yaml a
run hands to axolotl), then axolotl's own data preparation reads them, from its wheel unpacked
without dependencies (``build/axolotl-0.19.0``, see ``axolotl_data_prep.py``): ``validate_config``,
``normalize_config``, ``load_tokenizer`` and ``prepare_datasets``, the code ``axolotl train`` runs
before building its trainer. What axolotl's train dataset holds is compared, row by row, with
the reference every backend's mask test uses (:mod:`thub.testing.masks`: transformers' own
``apply_chat_template`` assistant mask, thub's ``overlong`` policy) on the edge-case set (tool
calls single and parallel, a system turn mid-conversation, same-role turns, an overlong row,
Unicode, per-row unmask), and with thub's pretraining blocks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from thub_plugin_axolotl.runner import write_inputs

from thub.config.resolve import resolve
from thub.data import load_dataset_rows
from thub.data.blocks import pretraining_blocks
from thub.errors import UsageError
from thub.manager import load_registry
from thub.runner.context import RunContext
from thub.runner.rundir import RunDirectory
from thub.testing.masks import mask_differences

ROOT = Path(__file__).parents[2]
AXOLOTL = ROOT / "build" / "axolotl-0.19.0"
PREP = Path(__file__).parent / "axolotl_data_prep.py"
#: already tokenized rows (written by the fixture): 8, 40 and 12 tokens, the first two masked
PROCESSED = Path("processed.jsonl")
PROCESSED_ROWS = [{"input_ids": list(range(5, 5 + n)), "labels": [-100] * 2 + list(range(7, 5 + n))}
                  for n in (8, 40, 12)]

#: name -> (data file in the edge-case set, thub flags)
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("chat.jsonl", {}),
    "unmask": ("chat.jsonl", {"unmask_messages": True}),
    "drop": ("chat.jsonl", {"overlong": "drop"}),
    "packing": ("chat.jsonl", {"packing": True}),
    "documents": ("documents.jsonl", {"is_pretraining": True, "block_size": 64}),
    "processed": (str(PROCESSED), {"max_seq_len": 16}),
    "processed_drop": (str(PROCESSED), {"max_seq_len": 16, "overlong": "drop"}),
}


def written_config(run_dir: Path, model: Path, data: Path, flags: dict[str, Any]) -> str:
    """The config.yaml (and data file) thub's runner writes for this run, as in the training child."""
    registry = load_registry()
    values = {"model_path": str(model), "data_path": str(data), "ckpt_output_dir": str(run_dir), **flags}
    params = resolve(registry, "sft", backend="axolotl", flags=values, environ={}).values()
    plan = registry.translate("sft", "axolotl", params)
    write_inputs(RunContext("sft", "axolotl", params, RunDirectory(run_dir)), plan)
    return str(plan["config_file"])


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path, edge_cases: Path,
             edge_cases_max_seq_len: int) -> dict[str, dict[str, Any]]:
    """Each case's train dataset as axolotl's own preparation builds it (one axolotl process)."""
    if not AXOLOTL.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"{AXOLOTL} missing: scripts/test-all.sh unpacks the axolotl wheel there")
        pytest.skip(f"{AXOLOTL} missing (scripts/test-all.sh unpacks the axolotl wheel there)")
    results: dict[str, dict[str, Any]] = {}
    configs: dict[str, str] = {}
    data_dir = tmp_path_factory.mktemp("data")
    (data_dir / PROCESSED).write_text("".join(json.dumps(r) + "\n" for r in PROCESSED_ROWS))
    for name, (data, flags) in CASES.items():
        run_dir = tmp_path_factory.mktemp(name)
        source = data_dir / data if data == str(PROCESSED) else edge_cases / data
        try:
            configs[name] = written_config(run_dir, tiny_model, source, {"max_seq_len": edge_cases_max_seq_len,
                                                                         **flags})
        except UsageError as exc:  # reported by the case's test
            results[name] = {"error": f"thub refused: {exc}"}
    environ = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "AXOLOTL_DO_NOT_TRACK": "1",
               "HF_DATASETS_CACHE": str(tmp_path_factory.mktemp("hf_datasets"))}
    done = subprocess.run([sys.executable, str(PREP), str(AXOLOTL), *configs.values()], capture_output=True,
                          text=True, timeout=1200, env=environ)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()[-len(configs):] if configs else []
    results.update(zip(configs, (json.loads(line) for line in lines), strict=True))
    return results


def examples(prepared: dict[str, dict[str, Any]], name: str) -> list[dict[str, list[int]]]:
    result = prepared[name]
    assert "error" not in result, result["error"]
    return result["examples"]


def load_tokenizer(model: str) -> Any:
    """transformers' tokenizer: the reference renders with its apply_chat_template."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model)


def chat_rows(edge_cases: Path) -> tuple[list[dict[str, Any]], list[str]]:
    rows = load_dataset_rows(str(edge_cases / "chat.jsonl"))
    return rows, [f"chat.jsonl:{i + 1}" for i in range(len(rows))]


@pytest.mark.parametrize("case, unmask", [("chat", False), ("unmask", True), ("packing", False)])
def test_every_edge_case_row_is_one_example_with_thubs_mask(prepared: dict[str, dict[str, Any]], case: str,
                                                            unmask: bool, tiny_model: Path, edge_cases: Path,
                                                            edge_cases_max_seq_len: int) -> None:
    """Tool calls (single, parallel), a late system turn, same-role turns, Unicode, per-row unmask:
    one example per row, trained exactly as the model's template marks it (thub's mask)."""
    rows, locations = chat_rows(edge_cases)
    built = examples(prepared, case)
    assert len(built) == len(rows) == 10
    tokenizer = load_tokenizer(str(tiny_model))
    assert mask_differences(rows, built, tokenizer, edge_cases_max_seq_len, unmask=unmask,
                            locations=locations) == []


def test_overlong_row_is_truncated_by_default_and_dropped_only_with_drop(
        prepared: dict[str, dict[str, Any]], tiny_model: Path, edge_cases: Path, edge_cases_max_seq_len: int) -> None:
    """thub's default ``overlong: truncate`` keeps line 7 (1294 tokens) cut to max_seq_len;
    axolotl's own default (``excess_length_strategy: drop``) would leave it out."""
    built = examples(prepared, "chat")
    assert len(built) == 10 and len(built[6]["input_ids"]) == edge_cases_max_seq_len
    assert max(len(e["input_ids"]) for e in built) == edge_cases_max_seq_len
    rows, locations = chat_rows(edge_cases)
    dropped = examples(prepared, "drop")
    assert len(dropped) == 9
    assert mask_differences(rows, dropped, load_tokenizer(str(tiny_model)), edge_cases_max_seq_len,
                            overlong="drop", locations=locations) == []


def test_unmask_messages_trains_every_token(prepared: dict[str, dict[str, Any]]) -> None:
    """thub's ``unmask_messages``: every token of every row, role headers included (docs/data.md)."""
    built = examples(prepared, "unmask")
    assert sum(label != -100 for e in built for label in e["labels"]) == sum(len(e["input_ids"]) for e in built)
    assert all(e["labels"] == e["input_ids"] for e in built)


def test_pretraining_blocks_are_thubs(prepared: dict[str, dict[str, Any]], tiny_model: Path,
                                      edge_cases: Path) -> None:
    """Documents joined with EOS into fixed blocks of block_size (axolotl's ``type: completion``
    would chunk each document on its own and cut one longer than 64 blocks)."""
    rows = load_dataset_rows(str(edge_cases / "documents.jsonl"))
    ours = pretraining_blocks(rows, load_tokenizer(str(tiny_model)), 64)
    built = examples(prepared, "documents")
    assert len(built) == len(ours) == 86  # 5535 tokens (5 documents + 5 EOS): 86 full blocks of 64
    assert built == ours


def test_pretokenized_rows_follow_thubs_overlong_policy(prepared: dict[str, dict[str, Any]]) -> None:
    """Already tokenized rows are trained as given, the 40-token one cut at max_seq_len 16 (or left
    out under ``overlong: drop``): thub's policy for such rows (``processed_samples``)."""
    cut = [{k: v[:16] for k, v in row.items()} for row in PROCESSED_ROWS]
    assert examples(prepared, "processed") == cut
    assert examples(prepared, "processed_drop") == [PROCESSED_ROWS[0], PROCESSED_ROWS[2]]
