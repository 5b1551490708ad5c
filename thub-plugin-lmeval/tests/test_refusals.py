"""Every bad request is a UsageError (exit 2) naming what is wrong, before a model loads: bad task
rows by file:line, a named task whose data is unreachable and not cached, an unknown task name,
an unknown or misplaced option, vLLM without vllm or a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from thub_plugin_lmeval.runner import evaluate

from thub.errors import UsageError
from thub.evaluate import EvalRequest, EvalTask


def jsonl_request(model: Path, task: Path, work: Path, **options: object) -> EvalRequest:
    return EvalRequest(model_path=str(model), label="final", tasks=(EvalTask(task.stem, str(task)),),
                       work_dir=str(work), options=dict(options))


def test_bad_rows_are_refused_by_file_and_line(tmp_path: Path) -> None:
    task = tmp_path / "bad.jsonl"
    task.write_text("\n".join([
        json.dumps({"prompt": "fine", "answer": "yes"}),
        json.dumps({"prompt": "no answer"}),
        "{not json",
        json.dumps({"prompt": 3, "answer": "x"}),
        json.dumps({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                                 {"role": "user", "content": "c"}]}),
        json.dumps({"prompt": "q", "answer": "  "}),
    ]) + "\n")
    # the model path is never read: the rows are refused first
    with pytest.raises(UsageError) as caught:
        evaluate(jsonl_request(tmp_path / "no-model", task, tmp_path / "work"))
    text = str(caught.value)
    assert f"{task}:2: answer: missing" in text
    assert f"{task}:3: not JSON" in text
    assert f"{task}:4: prompt: expected a string, found number 3" in text
    assert f"{task}:5: messages: expected [system?, user, assistant]" in text and "user, assistant, user" in text
    assert f"{task}:6: answer: expected a non-empty string" in text
    assert f"{task}:1" not in text


def test_an_empty_task_file_is_refused(tmp_path: Path) -> None:
    task = tmp_path / "empty.jsonl"
    task.write_text("\n")
    with pytest.raises(UsageError, match="no rows"):
        evaluate(jsonl_request(tmp_path, task, tmp_path / "work"))


@pytest.mark.parametrize(("options", "message"), [
    ({"bakend": "vllm"}, "--option bakend: not an lmeval option (did you mean 'backend'?)"),
    ({"backend": "tgi"}, "--option backend: Input should be 'hf' or 'vllm'"),
    ({"max_gen_toks": 8}, "max_gen_toks only applies with mode=generate"),
    ({"gpu_memory_utilization": 0.5}, "gpu_memory_utilization only apply with backend=vllm"),
])
def test_options_are_checked(options: dict[str, object], message: str, tmp_path: Path) -> None:
    task = tmp_path / "t.jsonl"
    task.write_text(json.dumps({"prompt": "q", "answer": "a"}) + "\n")
    with pytest.raises(UsageError) as caught:
        evaluate(jsonl_request(tmp_path, task, tmp_path / "work", **options))
    assert message in str(caught.value)


def test_mode_without_a_local_jsonl_task_is_refused(tiny_model: Path, tmp_path: Path) -> None:
    request = EvalRequest(model_path=str(tiny_model), label="final", tasks=(EvalTask("hellaswag"),),
                          options={"mode": "generate"})
    with pytest.raises(UsageError, match="mode applies to local .jsonl tasks only"):
        evaluate(request)


def test_vllm_is_refused_without_vllm_or_a_gpu(tiny_model: Path, tmp_path: Path) -> None:
    import importlib.util

    import torch

    if importlib.util.find_spec("vllm") is not None and torch.cuda.is_available():
        pytest.skip("vllm and a GPU are both here: nothing to refuse")
    task = tmp_path / "t.jsonl"
    task.write_text(json.dumps({"prompt": "q", "answer": "a"}) + "\n")
    with pytest.raises(UsageError) as caught:
        evaluate(jsonl_request(tiny_model, task, tmp_path / "work", backend="vllm"))
    text = str(caught.value)
    assert text.startswith("--option backend=vllm: ")
    assert "vllm is not installed" in text or "needs an NVIDIA GPU" in text


@pytest.mark.slow
def test_unknown_task_names_the_closest(tiny_model: Path) -> None:
    request = EvalRequest(model_path=str(tiny_model), label="final", tasks=(EvalTask("hellaswg"),))
    with pytest.raises(UsageError) as caught:
        evaluate(request)
    assert "--tasks hellaswg: lm-eval" in str(caught.value) and "(did you mean 'hellaswag'?)" in str(caught.value)


@pytest.mark.slow
@pytest.mark.parametrize(("setting", "state"), [
    ({"HF_ENDPOINT": "http://127.0.0.1:9"}, "unreachable ("),  # port 9 (discard): connection refused
    ({"HF_HUB_OFFLINE": "1"}, "set offline (HF_HUB_OFFLINE=1)"),
])
def test_named_task_offline_and_not_cached_fails_fast_naming_its_data(setting: dict[str, str], state: str,
                                                                      tiny_model: Path, tmp_path: Path) -> None:
    """In a child process (so the offline flags it sets cannot leak), with an empty HF_HOME and a
    Hub endpoint that refuses connections (or HF_HUB_OFFLINE=1): lm-eval would retry for half a
    minute per file; the probe makes it one clear error. The timeout is only a hang guard."""
    code = (
        "import sys\n"
        "from thub.errors import UsageError\n"
        "from thub.evaluate import EvalRequest, EvalTask\n"
        "from thub_plugin_lmeval.runner import evaluate\n"
        f"request = EvalRequest(model_path={str(tiny_model)!r}, label='final', tasks=(EvalTask('hellaswag'),))\n"
        "try:\n"
        "    evaluate(request)\n"
        "except UsageError as exc:\n"
        "    print('USAGE', exc)\n"
        "    sys.exit(2)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "THUB_"))}
    env.update(HF_HOME=str(tmp_path / "hf"), **setting)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr[-3000:]
    line = done.stdout.strip()
    assert line.startswith(f"USAGE hellaswag reads Rowan/hellaswag from the Hugging Face Hub, which is {state}")
    assert f"HF_HOME={tmp_path / 'hf'}" in line and "give a local task file" in line
    assert "Retrying" not in done.stderr  # offline mode was set: datasets did not retry the Hub


def test_registration_imports_no_harness() -> None:
    code = ("import sys\n"
            "from thub.manager import get_registry\n"
            "spec = get_registry().evaluators['lmeval']\n"
            "assert spec.runner == 'thub_plugin_lmeval.runner:evaluate', spec\n"
            "assert spec.task_files == ('.jsonl', '.yaml', '.yml'), spec\n"
            "assert spec.requirements[0].startswith('lm-eval'), spec\n"
            "heavy = [m for m in ('lm_eval', 'torch', 'transformers', 'datasets') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_readme_documents_every_option() -> None:
    from thub_plugin_lmeval.options import LmevalOptions

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    table = readme.split("## Options", 1)[1].split("\n## ", 1)[0]
    documented = {line.split("`")[1] for line in table.splitlines() if line.startswith("| `")}
    assert documented == set(LmevalOptions.model_fields)


def test_a_group_yaml_by_path_is_refused(tmp_path: Path) -> None:
    group = tmp_path / "mine.yaml"
    group.write_text("group: mine\ntask:\n  - task: a\n    dataset_path: json\n")
    request = EvalRequest(model_path=str(tmp_path), label="final", tasks=(EvalTask("mine", str(group)),))
    with pytest.raises(UsageError, match="a group config; lm-eval .* loads a task YAML by path, not a group"):
        evaluate(request)
    (tmp_path / "none.yaml").write_text("dataset_path: json\n")
    request = EvalRequest(model_path=str(tmp_path), label="final",
                          tasks=(EvalTask("none", str(tmp_path / "none.yaml")),))
    with pytest.raises(UsageError, match="expected a harness task config \\(a 'task' key\\), found dataset_path"):
        evaluate(request)
