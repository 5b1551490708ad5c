"""The post-run steps after a successful local run (thub.runner.poststeps): ``--export`` → ``eval:`` →
``--push``, on real trl CPU runs of the tiny model: the export folder scored by the real lm-evaluation-harness
evaluator (thub-plugin-lmeval) into RUN_DIR/eval and pushed to file:// with its model card; a failed push is
exit 1 with training's status still succeeded; bad push/eval input is exit 2 before training, nothing written.
The SLURM chain: tests/test_post_run_slurm.py."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROWS = [("Say the secret word.", "Zanzibar quokka."), ("What is the code?", "Seven seven marmot."),
        ("Name the ship.", "The Purple Walrus."), ("Who guards the gate?", "Old Barnaby.")]
OFFLINE = {"HF_HUB_OFFLINE": "1"}  # local tasks only: nothing may be downloaded


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def data(tmp_path: Path) -> Path:
    _jsonl(tmp_path / "train.jsonl", [{"messages": [{"role": "user", "content": p},
                                                    {"role": "assistant", "content": a}]} for p, a in ROWS])
    _jsonl(tmp_path / "memorised.jsonl", [{"prompt": p, "answer": a} for p, a in ROWS])
    return tmp_path


def _train(thub: Any, algorithm: str, model: Path, data: Path, *extra: str, env: dict[str, str] | None = None,
           cwd: Path | None = None) -> Any:
    lora = ("--lora-r", "4", "--learning-rate", "5e-2") if algorithm == "lora_sft" else ("--learning-rate", "5e-3")
    return thub("train", algorithm, "--backend", "trl", "--model-path", str(model), "--data-path",
                str(data / "train.jsonl"), "--ckpt-output-dir", str(data / "run"), "--max-steps", "4",
                "--max-seq-len", "96", *lora, *extra, env={**OFFLINE, **(env or {})}, cwd=cwd)


@pytest.mark.slow
@pytest.mark.needs_backend("trl")
@pytest.mark.skipif(importlib.util.find_spec("lm_eval") is None, reason="lm_eval is not importable")
def test_export_then_eval_then_push_after_a_local_run(thub: Any, tiny_model: Path, data: Path) -> None:
    """lora_sft with --export, eval: (config keys, a relative local task file) and --push file://: the
    merged export folder is scored (base too) into RUN_DIR/eval and pushed with its card."""
    listed = thub("evaluators", "--json")
    if "lmeval" not in {e["name"] for e in json.loads(listed.stdout)["evaluators"]}:
        pytest.skip("the lmeval evaluator is not registered: thub install lmeval")
    hf, pushed, run = data / "hf", data / "pushed", data / "run"
    (data / "post.yaml").write_text("eval: [memorised.jsonl]\neval_base: true\n")
    done = _train(thub, "lora_sft", tiny_model, data, "--config", "post.yaml", "--export", str(hf), "--push",
                  f"file://{pushed}", cwd=data)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    result = json.loads((run / "result.json").read_text())
    assert result["status"] == "succeeded" and result["export"]["ok"] is True
    evaluated, sent = result["post_run"]["eval"], result["post_run"]["push"]
    assert evaluated["ok"] is True and evaluated["model"] == str(hf), evaluated  # the export, not a second merge
    assert evaluated["labels"] == ["base", "final"] and evaluated["tasks"] == ["memorised"]
    document = json.loads((run / "eval" / "memorised.json").read_text())
    assert document["models"]["final"]["model_path"] == str(hf) and "base" in document["models"]
    summary = result["eval"]["tasks"]["memorised"]
    assert set(summary["models"]) == {"base", "final"} and summary["delta"], summary
    assert not (run / "eval" / "models").exists()  # nothing merged again for the evaluation
    # the push: the export folder with thub's card, no training state; recorded as thub checkpoint push does
    assert sent["ok"] is True and sent["source"] == str(hf) and sent["kind"] == "file", sent
    assert (pushed / "model.safetensors").is_file() and (pushed / "config.json").is_file()
    card = (pushed / "README.md").read_text()
    assert str(tiny_model) in card and "lora_sft" in card
    assert not [p for p in pushed.rglob("*") if p.name in ("optimizer.pt", "trainer_state.json")]
    assert result["push"][-1]["to"] == f"file://{pushed}" and result["push"][-1]["source"] == str(hf)
    assert "eval: base, final scored on memorised" in done.stdout and f"push: {hf} -> file://{pushed}" in done.stdout
    # the order: export, then eval, then push
    assert done.stdout.index("export:") < done.stdout.index("eval: base") < done.stdout.index("push: ")
    # thub runs wait reports each step; the SLURM job's entry point reruns a step from the recorded parameters
    waited = thub("runs", "wait", str(run), "--json")
    assert waited.returncode == 0, waited.stderr
    assert [(s["name"], s["outcome"]["ok"]) for s in json.loads(waited.stdout)["steps"]] == [
        ("export", True), ("eval", True), ("push", True)]
    again = subprocess.run([sys.executable, "-m", "thub.runner.poststeps", "eval", str(run)], capture_output=True,
                           text=True, cwd=data, env=thub.environ(OFFLINE), timeout=900)
    assert again.returncode == 0 and "eval: base, final scored on memorised" in again.stdout, again.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.needs_backend("trl")
def test_a_failed_push_is_exit_1_and_training_still_succeeded(thub: Any, tiny_model: Path, data: Path) -> None:
    """sft without export pushes its final model (an HF folder verify passes); a target that cannot be
    written (a path under a file) fails the push after training: exit 1, status succeeded, the error recorded."""
    blocker = data / "a-file"
    blocker.write_text("x")
    done = _train(thub, "sft", tiny_model, data, "--push", f"file://{blocker}/model")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((data / "run" / "result.json").read_text())
    assert result["status"] == "succeeded" and "export" not in result
    outcome = result["post_run"]["push"]
    assert outcome["ok"] is False and f"push to file://{blocker}/model failed" in outcome["error"], outcome
    assert "push FAILED: push to file://" in done.stdout and "Traceback" not in done.stdout + done.stderr
    assert not result.get("push")  # nothing was published


@pytest.mark.needs_backend("trl")
@pytest.mark.parametrize(("extra", "env", "said"), [
    (("--push", "ftp://host/x"), {}, "push: ftp://host/x: expected hf://ORG/NAME"),
    (("--push", "file://relative/x"), {}, "a file:// target is an absolute path"),
    (("--push", "file:///tmp/x", "--push-public"), {}, "push_public: only an hf:// target has a visibility"),
    (("--push", "file:///tmp/x", "--lora-r", "4"), {}, "this run saves a LoRA adapter, not a model folder: set "
                                                       "export"),
    (("--push", "file://{nonempty}"), {}, "already holds files; push to a new or empty path"),
    (("--eval", "{data}/nope.jsonl"), {}, "eval: {data}/nope.jsonl: no such task file"),
    (("--eval", "{data}/memorised.jsonl"), {"THUB_DISABLE_PLUGINS": "thub-plugin-lmeval"},
     "eval: no evaluator is installed"),
    (("--eval-base",), {}, "eval_base changes nothing without eval"),
    (("--push", "mlflow://tuned"), {"MLFLOW_TRACKING_URI": ""}, "push mlflow://tuned: no MLflow tracking URI"),
], ids=["scheme", "relative-file", "public-file", "adapter-without-export", "nonempty-target", "missing-task",
        "no-evaluator", "eval-base-alone", "mlflow-without-tracking-uri"])
def test_bad_push_and_eval_input_is_exit_2_before_training(thub: Any, tiny_model: Path, data: Path,
                                                          extra: tuple[str, ...], env: dict[str, str],
                                                          said: str) -> None:
    nonempty = data / "full"
    nonempty.mkdir()
    (nonempty / "x").write_text("x")
    values = [v.format(data=data, nonempty=nonempty) for v in extra]
    algorithm = "lora_sft" if "--lora-r" in values else "sft"
    if algorithm == "lora_sft":
        values = [v for v in values if v not in ("--lora-r", "4")]
    done = _train(thub, algorithm, tiny_model, data, *values, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert said.format(data=data) in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (data / "run").exists()  # nothing written: refused before training


def test_compare_refuses_one_push_target_for_every_backend(thub: Any, tiny_model: Path, data: Path) -> None:
    """thub compare trains each backend into its own directory: one push target for all is refused first."""
    out = data / "cmp"
    done = thub("compare", "sft", "--backends", "trl,llamafactory", "--out", str(out), "--set",
                f"model_path={tiny_model}", "--set", f"data_path={data / 'train.jsonl'}", "--set",
                f"push=file://{data / 'pushed'}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "expected no push target in thub compare" in done.stderr and not out.exists()


@pytest.mark.parametrize(("status", "said"), [("succeeded", "not run: the export step failed"),
                                              ("failed", "not run: the run's status is failed")])
def test_a_step_runs_only_after_every_earlier_one_succeeded(tmp_path: Path, status: str, said: str) -> None:
    """Export fails (the run saved no final model): eval and push are recorded as not run, exit 1; a run that
    did not succeed says so for every step."""
    from thub.runner.poststeps import exit_code, run_after

    run = tmp_path / "run"
    run.mkdir()
    result = {"status": status, "final_model": None}
    (run / "result.json").write_text(json.dumps(result))
    values = {"export": str(tmp_path / "hf"), "eval": ["memorised.jsonl"], "push": f"file://{tmp_path / 'pushed'}"}
    after = run_after(run, result, values, quiet=True)
    assert after == json.loads((run / "result.json").read_text())
    assert after["export"]["ok"] is False
    assert after["post_run"] == {"eval": {"ok": False, "error": said}, "push": {"ok": False, "error": said}}
    assert exit_code(after) == 1 and not (tmp_path / "pushed").exists() and not (run / "eval").exists()
