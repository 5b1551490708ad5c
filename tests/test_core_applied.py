"""Parameters core applies for every backend are honoured by core (issue 26 item 3).

The parent validates, normalises and mixes the data once for every backend
(:mod:`thub.data.training`): ``datasets``, ``mix_strategy``, ``mix_probabilities``, ``data_format``
and ``document_column_name`` are used whatever the backend, so no backend lists them, none refuses
them, and "ignored by <backend>" is never said of them. They are declared once, on their pydantic
fields (``param(..., core_applied=True)``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from thub.manager import load_registry

ROOT = Path(__file__).parents[1]
DATA = ROOT / "examples" / "data"

#: (backend, an algorithm it runs, the demo file of that algorithm's data)
RUNS = [
    pytest.param(backend, algorithm, data, marks=pytest.mark.needs_backend(backend), id=f"{backend}-{algorithm}")
    for backend, algorithm, data in (
        ("mini-trainer", "sft", "chat.jsonl"),
        ("instructlab-training", "sft", "chat.jsonl"),
        ("verl", "grpo", "grpo.jsonl"),
        ("art", "lora_grpo", "grpo.jsonl"),
        ("unsloth", "lora_sft", "chat.jsonl"),
        ("trl", "sft", "chat.jsonl"),
        ("llamafactory", "sft", "chat.jsonl"),
        ("axolotl", "lora_sft", "chat.jsonl"),
    )
]


def _two_files(tmp_path: Path, data: str) -> list[str]:
    text = (DATA / data).read_text()
    paths = []
    for name in ("a.jsonl", "b.jsonl"):
        (tmp_path / name).write_text(text)
        paths.append(str(tmp_path / name))
    return paths


def _mix_args(tmp_path: Path, data: str) -> list[str]:
    a, b = _two_files(tmp_path, data)
    return ["--model-path", "m", "--ckpt-output-dir", str(tmp_path / "out"), "--dataset", a, "--dataset", b,
            "--mix-strategy", "interleave_under", "--mix-probabilities", "0.5,0.5"]


@pytest.mark.parametrize(("backend", "algorithm", "data"), RUNS)
def test_datasets_and_their_mixing_are_accepted_by_every_backend(thub_cli, tmp_path, backend, algorithm,
                                                                  data) -> None:
    result = thub_cli("train", algorithm, "--backend", backend, "--dry-run", "--json", *_mix_args(tmp_path, data))
    assert result.exit_code == 0, result.stderr
    assert "ignored" not in result.stderr.lower()
    plan = json.loads(result.stdout)
    assert plan["ignored"] == []
    assert plan["parameters"]["datasets"]["source"] == "flag --dataset"
    assert plan["parameters"]["mix_strategy"]["value"] == "interleave_under"


@pytest.mark.parametrize(("backend", "algorithm", "data"), RUNS)
def test_allow_ignored_never_calls_a_used_value_ignored(thub_cli, tmp_path, backend, algorithm, data) -> None:
    result = thub_cli("train", algorithm, "--backend", backend, "--dry-run", "--allow-ignored",
                      *_mix_args(tmp_path, data))
    assert result.exit_code == 0, result.stderr
    assert "ignored by" not in result.stdout + result.stderr


@pytest.mark.parametrize("backend", ["mini-trainer", "instructlab-training", "trl"])
def test_a_document_column_is_read_by_core(thub_cli, tmp_path, backend) -> None:
    """``document_column_name`` picks the column core reads documents from, on every backend."""
    if backend not in load_registry().backends:
        pytest.skip(f"needs the {backend} plugin")
    rows = [json.loads(line) for line in (DATA / "documents.jsonl").read_text().splitlines()]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"text": row["document"]}) + "\n" for row in rows))
    result = thub_cli("train", "sft", "--backend", backend, "--dry-run", "--json", "--model-path", "m",
                      "--ckpt-output-dir", str(tmp_path / "out"), "--data-path", str(tmp_path / "docs.jsonl"),
                      "--data-format", "document", "--document-column-name", "text")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["ignored"] == []
    wrong = thub_cli("train", "sft", "--backend", backend, "--dry-run", "--model-path", "m",
                     "--ckpt-output-dir", str(tmp_path / "out"), "--data-path", str(tmp_path / "docs.jsonl"),
                     "--data-format", "document", "--document-column-name", "body")
    assert wrong.exit_code == 2  # the column is really read: a missing one is refused by core
    assert "body" in wrong.stderr


def test_core_applied_parameters_are_declared_on_their_fields() -> None:
    """One definition: the marker on the pydantic field, read through param_infos."""
    from thub.config.fields import core_applied, param_infos

    registry = load_registry()
    model = registry.algorithm("sft").load_parameters()
    names = core_applied(model)
    assert {"datasets", "mix_strategy", "mix_probabilities", "data_format", "document_column_name", "data_path",
            "model_path", "ckpt_output_dir", "divergence_steps", "allow_data_mismatch"} <= names
    assert "learning_rate" not in names and "seed" not in names  # the backend's library applies these
    infos = param_infos(model)
    assert {name for name, info in infos.items() if info.core_applied} == names


def test_no_backend_lists_a_core_applied_parameter() -> None:
    """A backend lists only what it applies itself; core's own are honoured by core."""
    from thub.config.fields import core_applied

    registry = load_registry()
    listed = []
    for backend in registry.backends.values():
        for algorithm in backend.algorithms:
            mine = core_applied(registry.algorithm(algorithm).load_parameters())
            listed += [f"{backend.name} {algorithm}: {name}" for name in sorted(backend.honours(algorithm) & mine)]
    assert not listed, listed
