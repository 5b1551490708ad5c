"""Real lm-evaluation-harness runs on the tiny local model (CPU): local JSONL tasks score, the
model trained on a task's prompts beats its base there and not on an unrelated task, the chat
template is applied when asked, and every bad request is a UsageError before a model loads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from thub_plugin_lmeval.runner import evaluate

from thub.evaluate import EvalRequest, EvalTask, TaskScore

pytestmark = pytest.mark.slow


def request(model: Path, work: Path, *tasks: Path | str, **kwargs: Any) -> EvalRequest:
    items = tuple(EvalTask(name=Path(t).stem, path=str(t)) if isinstance(t, Path) else EvalTask(name=t)
                  for t in tasks)
    return EvalRequest(model_path=str(model), label=kwargs.pop("label", "final"), tasks=items,
                       max_seq_len=128, work_dir=str(work), **kwargs)


def by_task(scores: list[TaskScore]) -> dict[str, TaskScore]:
    return {score.task: score for score in scores}


def samples(work: Path, task: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (work / "samples" / f"{task}.jsonl").read_text().splitlines()]


def test_local_task_scores_with_the_chat_template(tiny_model: Path, tasks: dict[str, Path], tmp_path: Path) -> None:
    import lm_eval

    scores = evaluate(request(tiny_model, tmp_path, tasks["capitals"], apply_chat_template=True, limit=4))
    (score,) = scores
    assert score.task == "capitals" and score.samples == 4
    assert set(score.metrics) == {"acc", "perplexity"} and set(score.stderr) <= {"acc", "perplexity"}
    assert score.higher_is_better == {"acc": True, "perplexity": False}
    assert score.harness == {"name": "lm-eval", "version": lm_eval.__version__}
    args = score.arguments
    assert args["model"] == "hf" and args["model_args"] == {"pretrained": str(tiny_model), "max_length": 128}
    assert args["limit"] == 4 and args["apply_chat_template"] is True and args["device"] == "cpu"
    assert "--include_path" in args["command"] and "--apply_chat_template" in args["command"]
    # the request text lm-eval built: the user turn in the tiny model's ChatML, the answer after it
    logged = samples(tmp_path, "capitals")
    context, continuation = logged[0]["arguments"][0]
    assert context == "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    assert continuation == "Paris."


def test_without_the_chat_template_the_prompt_is_plain_text(tiny_model: Path, tasks: dict[str, Path],
                                                           tmp_path: Path) -> None:
    evaluate(request(tiny_model, tmp_path, tasks["capitals"], apply_chat_template=False, limit=1))
    context, continuation = samples(tmp_path, "capitals")[0]["arguments"][0]
    assert (context, continuation) == ("What is the capital of France?", "Paris.")


def test_tuned_beats_base_on_its_prompts_and_not_on_unrelated_ones(tiny_model: Path, trained_model: Path,
                                                                   tasks: dict[str, Path], tmp_path: Path) -> None:
    both = (tasks["capitals"], tasks["unrelated"])
    base = by_task(evaluate(request(tiny_model, tmp_path / "base", *both, apply_chat_template=True, label="base")))
    tuned = by_task(evaluate(request(trained_model, tmp_path / "tuned", *both, apply_chat_template=True)))
    assert tuned["capitals"].metrics["acc"] > base["capitals"].metrics["acc"]
    assert tuned["capitals"].metrics["perplexity"] < base["capitals"].metrics["perplexity"]
    assert tuned["unrelated"].metrics["acc"] <= base["unrelated"].metrics["acc"]
    assert tuned["unrelated"].metrics["perplexity"] >= base["unrelated"].metrics["perplexity"]


def test_generate_mode_scores_exact_match(trained_model: Path, tasks: dict[str, Path], tmp_path: Path) -> None:
    (score,) = evaluate(request(trained_model, tmp_path, tasks["capitals"], apply_chat_template=True, limit=3,
                                options={"mode": "generate", "max_gen_toks": 8}))
    assert set(score.metrics) == {"exact_match"} and score.higher_is_better == {"exact_match": True}
    # greedy answers, stopped at the template's end-of-turn: the memorised ones
    logged = samples(tmp_path, "capitals")
    assert [row["filtered_resps"][0].strip() for row in logged] == ["Paris.", "Rome.", "Madrid."]
    assert score.metrics["exact_match"] == 1.0


def test_a_harness_yaml_is_used_as_it_is(tiny_model: Path, tasks: dict[str, Path], tmp_path: Path) -> None:
    import yaml

    folder = tmp_path / "mine"
    folder.mkdir()
    data = folder / "pairs.jsonl"
    data.write_text(tasks["capitals"].read_text())
    config = {"task": "my_capitals", "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(data)}},
              "test_split": "test", "output_type": "multiple_choice", "doc_to_text": "prompt",
              "doc_to_choice": "{{[answer, 'London.']}}", "doc_to_target": 0,
              "metric_list": [{"metric": "acc"}], "metadata": {"version": 1}}
    path = folder / "my_capitals.yaml"
    path.write_text(yaml.safe_dump(config))
    (score,) = evaluate(request(tiny_model, tmp_path / "work", path, limit=2))
    assert score.task == "my_capitals" and score.samples == 2 and set(score.metrics) == {"acc"}
    assert score.arguments["tasks"] == [str(path)] and score.arguments["include_path"] is None
    assert not (tmp_path / "work" / "tasks").exists()  # nothing generated for it
    # the YAML's own prompt: both choices after lm-eval's default target delimiter
    first = samples(tmp_path / "work", "my_capitals")[0]["arguments"]
    assert first == [["What is the capital of France?", " Paris."], ["What is the capital of France?", " London."]]


def test_the_recorded_command_reruns_it_with_lm_evals_cli(tiny_model: Path, tasks: dict[str, Path],
                                                          tmp_path: Path) -> None:
    import shlex
    import subprocess
    import sys

    (score,) = evaluate(request(tiny_model, tmp_path / "work", tasks["capitals"], apply_chat_template=True, limit=3))
    command = shlex.split(score.arguments["command"])
    assert command[:2] == ["lm_eval", "run"]
    out = tmp_path / "by-hand"
    done = subprocess.run([sys.executable, "-m", "lm_eval", *command[1:], "--output_path", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (written,) = out.rglob("results_*.json")
    results = json.loads(written.read_text())["results"]["thub_capitals"]
    assert results["acc,none"] == score.metrics["acc"]
    assert results["perplexity,none"] == pytest.approx(score.metrics["perplexity"], rel=1e-9)
