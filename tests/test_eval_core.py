"""``thub eval`` and ``thub evaluators`` (issue 28): the core side, with a small real evaluator
(tests/fixtures/eval_plugin: the mean log-likelihood of each answer, computed with transformers) on
real trl CPU runs of the tiny model trained to memorise a few answers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.needs_module("peft", "safetensors"), pytest.mark.needs_backend("trl")]

PLUGIN_DIR = Path(__file__).parent / "fixtures" / "eval_plugin"
ROWS = [("Say the secret word.", "Zanzibar quokka."), ("What is the code?", "Seven seven marmot."),
        ("Name the ship.", "The Purple Walrus."), ("Who guards the gate?", "Old Barnaby.")]
OTHER = [("What is two plus two?", "Four."), ("What colour is the sky?", "Blue.")]


def _environ() -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    environ["XDG_CACHE_HOME"] = os.path.join(tempfile.gettempdir(), f"thub-eval-tests-{os.getpid()}")
    return environ


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("eval-data")
    _write_jsonl(root / "train.jsonl", [{"messages": [{"role": "user", "content": p},
                                                      {"role": "assistant", "content": a}]} for p, a in ROWS])
    _write_jsonl(root / "memorised.jsonl", [{"prompt": p, "answer": a} for p, a in ROWS])
    _write_jsonl(root / "unrelated.jsonl", [{"prompt": p, "answer": a} for p, a in OTHER])
    return root


def _train(algorithm: str, model: Path, data: Path, run: Path, *extra: str) -> Path:
    lora = ("--lora-r", "8", "--learning-rate", "1e-2") if algorithm == "lora_sft" else ("--learning-rate", "5e-3")
    done = subprocess.run([sys.executable, "-m", "thub", "train", algorithm, "--backend", "trl", "--model-path",
                           str(model), "--data-path", str(data / "train.jsonl"), "--ckpt-output-dir", str(run),
                           "--max-steps", "6", "--save-steps", "3", "--max-seq-len", "96", *lora, *extra],
                          capture_output=True, text=True, env=_environ(), timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return run


@pytest.fixture(scope="module")
def sft_run(tiny_model: Path, data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _train("sft", tiny_model, data, tmp_path_factory.mktemp("eval-sft") / "run")


@pytest.fixture(scope="module")
def lora_run(tiny_model: Path, data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _train("lora_sft", tiny_model, data, tmp_path_factory.mktemp("eval-lora") / "run")


@pytest.fixture
def evaluator(thub_plugin: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    import thub_test_evaluator

    # entry points off: an installed evaluator plugin (lmeval) would make the choice ambiguous
    return thub_plugin(("loglik-tests", thub_test_evaluator), entry_points=False)


def _copy_run(run: Path, tmp_path: Path) -> Path:
    """A copy of a run with its recorded paths pointing into the copy (result.json, checkpoints)."""
    copy = tmp_path / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("eval"))
    result = (copy / "result.json").read_text().replace(str(run), str(copy))
    (copy / "result.json").write_text(result)
    return copy


# --- thub evaluators -------------------------------------------------------------------------

def test_evaluators_lists_the_registered_one_with_its_plugin_and_readiness(evaluator: Any, thub_cli: Any) -> None:
    done = thub_cli("evaluators", "--json")
    assert done.exit_code == 0, done.stderr
    [row] = done.json()["evaluators"]
    assert row["name"] == "loglik" and row["ready"] is True and row["missing"] == []
    assert row["plugin"] == "loglik-tests" and row["task_files"] == [".jsonl"]
    text = thub_cli("evaluators")
    assert "loglik" in text.stdout and "ready" in text.stdout


def test_no_evaluator_is_exit_2_with_the_install_command(thub_plugin: Any, thub_cli: Any, sft_run: Path,
                                                         data: Path) -> None:
    thub_plugin(entry_points=False)
    done = thub_cli("eval", str(sft_run), "--tasks", str(data / "memorised.jsonl"))
    assert done.exit_code == 2
    assert "no evaluator is installed" in done.stderr and "`thub install lmeval`" in done.stderr
    assert "Traceback" not in done.stderr


def test_missing_requirements_are_exit_2_with_the_install(thub_plugin: Any, thub_cli: Any, sft_run: Path,
                                                          data: Path) -> None:
    from thub import hookimpl
    from thub.specs import EvaluatorSpec

    class Needy:
        @hookimpl
        def thub_register_evaluators(self, register: Any) -> None:
            register(EvaluatorSpec("needy", "x", "nowhere:evaluate", requirements=("no-such-harness>=9",),
                                   install="pip install no-such-harness"))

    thub_plugin(("needy", Needy()), entry_points=False)
    assert thub_cli("evaluators", "--json").json()["evaluators"][0]["missing"] == [
        "no-such-harness is not installed (needs no-such-harness>=9)"]
    done = thub_cli("eval", str(sft_run), "--tasks", str(data / "memorised.jsonl"))
    assert done.exit_code == 2
    assert "no-such-harness is not installed" in done.stderr and "pip install no-such-harness" in done.stderr


# --- resolution and dry runs --------------------------------------------------------------------

def test_dry_run_resolves_final_all_and_base_as_trained(evaluator: Any, thub_cli: Any, sft_run: Path,
                                                        tiny_model: Path, data: Path) -> None:
    task = data / "memorised.jsonl"
    done = thub_cli("eval", str(sft_run), "--tasks", f"{task},hellaswag", "--base", "--checkpoints", "all",
                    "--dry-run", "--json")
    assert done.exit_code == 0, done.stderr
    plan = done.json()
    assert [m["label"] for m in plan["models"]] == ["base", "checkpoint-3", "checkpoint-6", "final"]
    assert [m["step"] for m in plan["models"]] == [0, 3, 6, 6]
    base, *_, final = plan["models"]
    assert base["model_path"] == str(tiny_model) and final["model_path"] == str(sft_run / "final")
    # served as trained: chat rows, the model's template, the run's max_seq_len and generation config
    assert all(m["apply_chat_template"] for m in plan["models"]) and {m["max_seq_len"] for m in plan["models"]} == {96}
    assert final["generation_config"] == str(sft_run / "final" / "generation_config.json")
    assert final["template"]["status"] == "ok"
    assert plan["tasks"] == [{"name": "memorised", "path": str(task)}, {"name": "hellaswag", "path": None}]
    assert plan["data_kind"] == "chat" and plan["results"] == str(sft_run / "eval")
    assert not (sft_run / "eval").exists()  # a dry run writes nothing


def test_dry_run_imports_no_torch(sft_run: Path, data: Path) -> None:
    code = (f"import sys; sys.path.insert(0, {str(PLUGIN_DIR)!r}); import thub_test_evaluator as p\n"
            "from thub import manager\n"
            "manager.set_registry(manager.load_registry(extra_plugins=[('t', p)], entry_points=False))\n"
            "from thub.cli.main import cli\n"
            f"try:\n    cli(['eval', {str(sft_run)!r}, '--tasks', {str(data / 'memorised.jsonl')!r}, '--base',"
            " '--checkpoints', 'all', '--dry-run', '--json'])\n"
            "except SystemExit as exit:\n    assert exit.code in (0, None), exit.code\n"
            "heavy = [m for m in ('torch', 'transformers', 'peft') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_environ(), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["dry_run"] is True


def test_best_checkpoint_from_result_json_and_refused_without_validation(evaluator: Any, thub_cli: Any,
                                                                         sft_run: Path, data: Path,
                                                                         tmp_path: Path) -> None:
    task = str(data / "memorised.jsonl")
    refused = thub_cli("eval", str(sft_run), "--tasks", task, "--checkpoints", "best", "--dry-run")
    assert refused.exit_code == 2 and "no best_checkpoint" in refused.stderr and "validation" in refused.stderr
    run = _copy_run(sft_run, tmp_path)
    result = json.loads((run / "result.json").read_text())
    result["best_checkpoint"] = {"path": str(run / "checkpoints" / "checkpoint-3"), "step": 3,
                                 "metric": "eval_loss", "value": 1.5}
    (run / "result.json").write_text(json.dumps(result))
    done = thub_cli("eval", str(run), "--tasks", task, "--checkpoints", "best", "--dry-run", "--json")
    assert done.exit_code == 0, done.stderr
    [model] = done.json()["models"]
    assert (model["label"], model["step"], model["best"]) == ("checkpoint-3", 3, True)
    assert model["model_path"] == str(run / "checkpoints" / "checkpoint-3")


def test_bad_tasks_are_exit_2(evaluator: Any, thub_cli: Any, sft_run: Path, data: Path) -> None:
    missing = thub_cli("eval", str(sft_run), "--tasks", str(data / "nope.jsonl"))
    assert missing.exit_code == 2 and "no such task file" in missing.stderr and "nope.jsonl" in missing.stderr
    (data / "notes.txt").write_text("x")
    wrong = thub_cli("eval", str(sft_run), "--tasks", str(data / "notes.txt"))
    assert wrong.exit_code == 2 and "no task file this evaluator reads (it reads .jsonl)" in wrong.stderr
    folder = thub_cli("eval", str(data / "no-run"), "--tasks", "x")
    assert folder.exit_code == 2 and "no such run directory or model folder" in folder.stderr


def test_a_model_folder_needs_out_or_json_and_refuses_base(evaluator: Any, thub_cli: Any, tiny_model: Path,
                                                           data: Path) -> None:
    task = str(data / "memorised.jsonl")
    done = thub_cli("eval", str(tiny_model), "--tasks", task)
    assert done.exit_code == 2 and "give --out DIR" in done.stderr
    base = thub_cli("eval", str(tiny_model), "--tasks", task, "--base", "--out", "x")
    assert base.exit_code == 2 and "--base needs a run directory" in base.stderr


# --- scoring ------------------------------------------------------------------------------------

def test_tuned_beats_base_on_what_it_memorised_results_stay_with_the_run(evaluator: Any, thub_cli: Any,
                                                                         sft_run: Path, data: Path,
                                                                         tmp_path: Path) -> None:
    run = _copy_run(sft_run, tmp_path)
    memorised, unrelated = str(data / "memorised.jsonl"), str(data / "unrelated.jsonl")
    done = thub_cli("eval", str(run), "--tasks", f"{memorised},{unrelated}", "--base")
    assert done.exit_code == 0, done.stderr
    assert "memorised" in done.stdout and "final - base" in done.stdout and "better" in done.stdout
    document = json.loads((run / "eval" / "memorised.json").read_text())
    assert document["task"] == "memorised" and document["path"] == memorised
    assert document["evaluator"]["name"] == "loglik"
    final, base = document["models"]["final"], document["models"]["base"]
    assert final["metrics"]["loglik"] > base["metrics"]["loglik"] + 0.5  # memorised: far more likely
    assert final["samples"] == 4 and final["harness"]["name"] == "transformers"
    assert final["arguments"] == {"limit": None, "chat": True} and final["evaluated_at"]
    assert final["model_path"] == str(run / "final") and final["higher_is_better"]["perplexity"] is False
    # the request was the run's serving settings
    request = json.loads((run / "eval" / "harness" / "final" / "request.json").read_text())
    assert request["max_seq_len"] == 96 and request["apply_chat_template"] is True
    assert request["generation_config"] == str(run / "final" / "generation_config.json")
    summary = json.loads((run / "result.json").read_text())["eval"]["tasks"]
    gain = summary["memorised"]["delta"]["final"]["loglik"]
    assert gain == pytest.approx(final["metrics"]["loglik"] - base["metrics"]["loglik"])
    assert summary["unrelated"]["delta"]["final"]["loglik"] < gain
    assert json.loads((run / "result.json").read_text())["status"] == "succeeded"  # the rest unchanged

    # re-running base alone merges into the file: final is kept
    again = thub_cli("eval", str(run), "--tasks", memorised, "--base", "--checkpoints", "all", "--json",
                     "--limit", "2")
    assert again.exit_code == 0, again.stderr
    models = json.loads((run / "eval" / "memorised.json").read_text())["models"]
    assert list(models) == ["base", "checkpoint-3", "checkpoint-6", "final"]
    assert models["base"]["samples"] == 2 and models["checkpoint-3"]["step"] == 3
    assert json.loads((run / "eval" / "unrelated.json").read_text())["models"]["final"]["samples"] == 2 - 0

    # history show / compare, and plot --eval
    shown = thub_cli("history", "show", str(run), "--json")
    assert shown.exit_code == 0, shown.stderr
    assert shown.json()["eval"]["tasks"]["memorised"]["delta"]["final"]["loglik"] > 0
    text = thub_cli("history", "show", str(run))
    assert "memorised" in text.stdout and "loglik" in text.stdout
    compared = thub_cli("history", "compare", str(sft_run), str(run), "--json")
    assert compared.exit_code == 0, compared.stderr
    row = next(r for r in compared.json()["rows"] if r["task"] == "memorised" and r["metric"] == "loglik")
    assert row["a"]["tuned"] is None and row["b"]["delta"] == pytest.approx(models["final"]["metrics"]["loglik"]
                                                                            - models["base"]["metrics"]["loglik"])
    plotted = thub_cli("plot", str(run), "--eval", "memorised:loglik", "--json")
    assert plotted.exit_code == 0, plotted.stderr
    [series] = plotted.json()["runs"]
    assert series["x"] == [0, 3, 6] and len(series["y"]) == 3  # base at 0, checkpoint-3, final (step 6)
    assert series["y"][0] == models["base"]["metrics"]["loglik"]


def test_an_adapter_is_merged_first_and_cached(evaluator: Any, thub_cli: Any, lora_run: Path, data: Path) -> None:
    task = str(data / "memorised.jsonl")
    plan = thub_cli("eval", str(lora_run), "--tasks", task, "--dry-run", "--json").json()
    [final] = plan["models"]
    assert final["layout"] == "peft-adapter" and final["merge"] is True
    assert final["model_path"] == str(lora_run / "eval" / "models" / "final")
    done = thub_cli("eval", str(lora_run), "--tasks", task, "--base")
    assert done.exit_code == 0, done.stderr
    assert "merging the adapter" in done.stderr
    merged = lora_run / "eval" / "models" / "final"
    assert (merged / "model.safetensors").is_file() and (merged / "thub_merge.json").is_file()
    models = json.loads((lora_run / "eval" / "memorised.json").read_text())["models"]
    assert models["final"]["model_path"] == str(merged) and models["final"]["source"] == str(lora_run / "final")
    assert models["final"]["metrics"]["loglik"] != models["base"]["metrics"]["loglik"]  # the adapter was merged
    again = thub_cli("eval", str(lora_run), "--tasks", task)
    assert again.exit_code == 0 and "using the merged model cached" in again.stderr
    listed = thub_cli("checkpoint", "ls", str(lora_run), "--json").json()  # the cached merge is not a checkpoint
    assert not [c for c in listed["checkpoints"] if "/eval/" in c["path"]], listed


def test_a_changed_chat_template_is_refused_with_both_differences_unless_allowed(evaluator: Any, thub_cli: Any,
                                                                                 sft_run: Path, data: Path,
                                                                                 tmp_path: Path) -> None:
    run = _copy_run(sft_run, tmp_path)
    template = run / "final" / "chat_template.jinja"
    template.write_text(template.read_text().replace("<|im_start|>assistant\\n", "<|im_start|>bot\\n"))
    task = str(data / "memorised.jsonl")
    refused = thub_cli("eval", str(run), "--tasks", task)
    assert refused.exit_code == 2, refused.stderr
    message = " ".join(refused.stderr.split())
    assert "chat template differs from the training input's" in message and "--allow-template-change" in message
    assert "expected 'assistant" in message and "found 'bot" in message
    assert not (run / "eval").exists()
    allowed = thub_cli("eval", str(run), "--tasks", task, "--allow-template-change")
    assert allowed.exit_code == 0, allowed.stderr
    assert "evaluated with a chat template unlike the training input's" in allowed.stderr
    entry = json.loads((run / "eval" / "memorised.json").read_text())["models"]["final"]
    assert "found 'bot" in entry["template_change"]


def test_an_evaluator_usage_error_is_exit_2_and_writes_nothing(evaluator: Any, thub_cli: Any, sft_run: Path,
                                                               data: Path, tmp_path: Path) -> None:
    run = _copy_run(sft_run, tmp_path)
    before = (run / "result.json").read_text()
    done = thub_cli("eval", str(run), "--tasks", f"{data / 'memorised.jsonl'},offline_task")
    assert done.exit_code == 2
    assert "offline_task" in done.stderr and "not cached" in done.stderr and "Traceback" not in done.stderr
    broken = thub_cli("eval", str(run), "--tasks", "broken")
    assert broken.exit_code == 1 and "RuntimeError: the harness fell over" in broken.stderr
    assert not list((run / "eval").glob("*.json")) if (run / "eval").exists() else True
    assert (run / "result.json").read_text() == before


def test_a_model_folder_scores_into_out_and_the_api(evaluator: Any, tiny_model: Path, data: Path,
                                                    tmp_path: Path) -> None:
    import thub

    done = thub.evaluate_model(str(tiny_model), tasks=[str(data / "memorised.jsonl")], out=tmp_path / "results",
                               progress=False)
    score = done["results"]["memorised"]["models"]["model"]
    assert score["samples"] == 4 and score["metrics"]["loglik"] < 0
    assert json.loads((tmp_path / "results" / "memorised.json").read_text())["models"]["model"] == score
    plan = thub.evaluate_model(str(tiny_model), tasks="memorised", dry_run=True)
    assert plan["models"][0]["label"] == "model" and plan["results"] is None


def test_a_sharded_checkpoint_is_refused_naming_consolidate(evaluator: Any, thub_cli: Any, sft_run: Path,
                                                           data: Path, tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import load_file

    run = _copy_run(sft_run, tmp_path)
    sharded = run / "checkpoints" / "dcp-final"
    dcp.save(load_file(str(run / "final" / "model.safetensors")), checkpoint_id=str(sharded))  # torch DCP layout
    result = json.loads((run / "result.json").read_text())
    result["final_checkpoint"] = str(sharded)
    (run / "result.json").write_text(json.dumps(result))
    done = thub_cli("eval", str(run), "--tasks", str(data / "memorised.jsonl"), "--dry-run")
    assert done.exit_code == 2
    message = " ".join(done.stderr.split())
    assert "is a sharded checkpoint (torch-dcp)" in message
    assert f"thub checkpoint consolidate {sharded} --out DIR" in message
    folder = thub_cli("eval", str(sharded), "--tasks", str(data / "memorised.jsonl"), "--out", str(tmp_path / "o"))
    assert folder.exit_code == 2 and "thub checkpoint consolidate" in folder.stderr


def test_results_of_an_earlier_run_in_the_directory_are_neither_merged_nor_shown(evaluator: Any, thub_cli: Any,
                                                                                 sft_run: Path, data: Path,
                                                                                 tmp_path: Path) -> None:
    run = _copy_run(sft_run, tmp_path)
    task = str(data / "memorised.jsonl")
    assert thub_cli("eval", str(run), "--tasks", task, "--base", "--limit", "1").exit_code == 0
    # the directory trained again (--overwrite keeps a user's eval/): a new thub_run.json, a new result.json
    record = json.loads((run / "thub_run.json").read_text())
    record["created"] += 100
    (run / "thub_run.json").write_text(json.dumps(record))
    result = json.loads((run / "result.json").read_text())
    del result["eval"]
    (run / "result.json").write_text(json.dumps(result))
    assert thub_cli("history", "show", str(run), "--json").json()["eval"] is None
    assert thub_cli("plot", str(run), "--eval", "loglik").exit_code == 2
    assert thub_cli("eval", str(run), "--tasks", task, "--limit", "1").exit_code == 0
    document = json.loads((run / "eval" / "memorised.json").read_text())
    assert list(document["models"]) == ["final"] and document["run_created"] == record["created"]


def test_best_checkpoint_of_a_validated_trl_run_is_scored(evaluator: Any, thub_cli: Any, tiny_model: Path,
                                                          data: Path, tmp_path: Path) -> None:
    # result.json's best_checkpoint as the run writes it (held-out eval_loss), not one written by hand
    run = _train("sft", tiny_model, data, tmp_path / "run", "--validation-data-path", str(data / "train.jsonl"),
                 "--validation-frequency", "3")
    best = json.loads((run / "result.json").read_text())["best_checkpoint"]
    assert best["metric"] == "eval_loss" and best["step"] in (3, 6)
    done = thub_cli("eval", str(run), "--tasks", str(data / "memorised.jsonl"), "--checkpoints", "best",
                    "--limit", "1", "--json")
    assert done.exit_code == 0, done.stderr
    entry = done.json()["results"]["memorised"]["models"][f"checkpoint-{best['step']}"]
    assert entry["model_path"] == best["path"] and entry["best"] is True and entry["samples"] == 1


def test_a_base_typed_relative_to_where_training_ran_is_found_from_anywhere(evaluator: Any, thub_cli: Any,
                                                                            sft_run: Path, tiny_model: Path,
                                                                            data: Path, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    record = json.loads((sft_run / "thub_run.json").read_text())
    assert record["working_dir"] == os.getcwd()  # the training subprocess ran here
    copy = _copy_run(sft_run, tmp_path)
    # as if trained with --model-path model from tiny_model's parent folder
    record["working_dir"] = str(tiny_model.parent)
    record["parameters"]["model_path"]["value"] = tiny_model.name
    (copy / "thub_run.json").write_text(json.dumps(record))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    done = thub_cli("eval", str(copy), "--tasks", str(data / "memorised.jsonl"), "--base", "--dry-run", "--json")
    assert done.exit_code == 0, done.stderr
    assert done.json()["models"][0]["model_path"] == str(tiny_model)


def test_what_the_harness_prints_goes_to_stderr_and_json_stays_json(evaluator: Any, thub_cli: Any, sft_run: Path,
                                                                   data: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import thub_test_evaluator

    scores = thub_test_evaluator.evaluate

    def chatty(request: Any) -> Any:
        print("bootstrapping for stddev: loglik")  # as lm-eval prints on stdout
        return scores(request)

    monkeypatch.setattr(thub_test_evaluator, "evaluate", chatty)
    done = thub_cli("eval", str(_copy_run(sft_run, tmp_path)), "--tasks", str(data / "memorised.jsonl"), "--json")
    assert done.exit_code == 0, done.stderr
    assert "final" in json.dumps(done.json())  # stdout parses as JSON
    assert "bootstrapping for stddev" in done.stderr
