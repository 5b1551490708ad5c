"""Real gepa runs against the OpenAI-compatible endpoint the tests start on 127.0.0.1 (the tiny local
model as task and reflection LM): thub train gepa and Training Hub's thub gepa command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from thub.backend import read_metrics

pytest.importorskip("gepa")
pytest.importorskip("litellm")

SEED = '{"system_prompt": "Answer the question in one word."}'


def _common(data: Path, url: str) -> list[str]:
    return ["--data-path", str(data), "--seed-candidate", SEED, "--task-lm", "openai/tiny", "--api-base", url,
            "--max-metric-calls", "9", "--reflection-minibatch-size", "1"]


@pytest.mark.slow
def test_thub_train_gepa_writes_the_optimised_prompt(endpoint: str, examples: Path, tmp_path: Path,
                                                     thub_run) -> None:
    out, marker = tmp_path / "run", tmp_path / "marker.txt"
    done = thub_run("train", "gepa", *_common(examples, endpoint), "--ckpt-output-dir", str(out),
                    "--evaluator", "gepa_hooks.by_length", "--callbacks", "gepa_hooks:Counter", "--json",
                    env={"GEPA_TEST_MARKER": str(marker)})
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "succeeded" and result["algorithm"] == "gepa" and result["backend"] == "gepa"
    summary = result["summary"]
    candidates = [json.loads(line) for line in (out / "gepa" / "candidates.jsonl").read_text().splitlines()]
    assert summary["candidates"] == len(candidates) >= 1 and summary["train_examples"] == 3
    assert candidates[0]["texts"] == json.loads(SEED) and candidates[0]["parents"] == [None]
    best = candidates[summary["best_candidate"]]
    assert best["best"] and summary["best_score"] == best["val_score"] == max(c["val_score"] for c in candidates)
    assert 0 < summary["metric_calls"] <= 9 + 3  # the budget is checked between iterations
    # the optimised prompt, as text and as gepa's candidate
    assert (out / "gepa" / "best_prompt.txt").read_text() == best["texts"]["system_prompt"].rstrip("\n") + "\n"
    assert json.loads((out / "gepa" / "best_candidate.json").read_text()) == best["texts"]
    assert json.loads((out / "gepa" / "gepa_result.json").read_text())["best_idx"] == summary["best_candidate"]
    assert (out / "gepa" / "state" / "gepa_state.bin").exists()  # gepa's own state: what --resume reads
    # one metrics line per candidate scored on the validation set, the seed first
    lines = read_metrics(out / "training_metrics.jsonl")
    assert [line["candidate"] for line in lines] == [c["candidate"] for c in candidates]
    assert [line["reward"] for line in lines] == [c["val_score"] for c in candidates]
    assert [line["step"] for line in lines] == list(range(1, len(candidates) + 1))
    assert all("loss" not in line and "eval_loss" not in line and line["val_examples"] == 3 for line in lines)
    assert result["last_metrics"]["step"] == len(candidates)
    # the evaluator scored (a score of length/60 is never 0 for a non-empty answer) and the callback ran
    assert summary["seed_score"] > 0
    assert marker.read_text().split() == [str(c["candidate"]) for c in candidates]


@pytest.mark.slow
def test_training_hubs_command_line_runs_gepa(endpoint: str, examples: Path, tmp_path: Path, thub_run) -> None:
    out = tmp_path / "optimised"
    done = thub_run("gepa", *_common(examples, endpoint), "--output-dir", str(out), "--seed", "3",
                    "--skip-perfect-score", "false", "--candidate-selection-strategy", "current_best")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.count("thub train gepa") == 1  # the equivalent, printed once
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "succeeded" and (out / "gepa" / "best_prompt.txt").read_text().strip()
    record = json.loads((out / "thub_run.json").read_text())["parameters"]
    assert record["seed"]["value"] == 3 and record["ckpt_output_dir"]["value"] == str(out)
    assert record["skip_perfect_score"]["value"] is False


def test_an_unreachable_api_base_is_refused_before_anything_starts(examples: Path, tmp_path: Path,
                                                                   thub_run) -> None:
    from socket import socket

    with socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    out = tmp_path / "run"
    done = thub_run("train", "gepa", *_common(examples, url), "--ckpt-output-dir", str(out))
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"api_base '{url}': nothing answers there" in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()


def test_a_bad_row_is_file_line(tmp_path: Path, thub_run) -> None:
    data = tmp_path / "qa.jsonl"
    data.write_text('{"input": "q", "answer": "a"}\n{"input": "", "answer": "a"}\n{"input": "q", "answer": 4}\n')
    done = thub_run("train", "gepa", *_common(data, "http://127.0.0.1:9/v1"), "--ckpt-output-dir",
                    str(tmp_path / "run"), "--dry-run")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{data}:2: input" in done.stderr and f"{data}:3: answer" in done.stderr, done.stderr


def test_an_import_string_that_does_not_import_is_exit_2(examples: Path, tmp_path: Path, thub_run) -> None:
    argv = _common(examples, "http://unused")
    del argv[argv.index("--api-base"):argv.index("--api-base") + 2]  # a hosted model: no endpoint to check
    done = thub_run("train", "gepa", *argv, "--ckpt-output-dir", str(tmp_path / "run"),
                    "--evaluator", "gepa_hooks.no_such_scorer", "--dry-run")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "evaluator 'gepa_hooks.no_such_scorer': cannot be imported" in done.stderr


@pytest.mark.slow
def test_sigterm_stops_with_gepas_state_and_resume_continues_it(endpoint: str, examples: Path, tmp_path: Path,
                                                                thub_run) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    argv = ["train", "gepa", "--data-path", str(examples), "--seed-candidate", SEED, "--task-lm", "openai/tiny",
            "--api-base", endpoint, "--reflection-minibatch-size", "1", "--no-skip-perfect-score",
            "--ckpt-output-dir", str(out)]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    run = subprocess.Popen([sys.executable, "-m", "thub", *argv, "--max-metric-calls", "100000"], env=environ,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = out / "gepa" / "state" / "run_log.txt"
    deadline = time.monotonic() + 300  # a hang guard only: we wait for gepa's third iteration
    while not (log.exists() and "Iteration 3:" in log.read_text(errors="replace")):
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()[0]
        time.sleep(0.2)
    run.send_signal(signal.SIGTERM)
    output = run.communicate(timeout=300)[0]
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "interrupted", output
    assert (out / "gepa" / "state" / "gepa_state.bin").exists()
    # a budget of 3 calls is spent by the seed's validation alone: a fresh start stops there (3 calls);
    # resumed, gepa starts from its saved state, past three iterations of reflection (each >= 2 calls)
    done = thub_run(*argv, "--max-metric-calls", "3", "--resume")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "succeeded" and result["summary"]["metric_calls"] > 3 + 2


@pytest.mark.slow
def test_mlflow_backend_optimises_a_registered_prompt(endpoint: str, examples: Path, tmp_path: Path,
                                                      thub_run, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow.genai.optimize")
    import mlflow

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    mlflow.set_tracking_uri(store)
    template = "Answer in one word: {{question}}"
    assert mlflow.genai.register_prompt(name="qa", template=template).uri == "prompts:/qa/1"
    out = tmp_path / "run"
    done = thub_run("gepa", "--backend", "mlflow", "--seed-candidate", json.dumps({"qa": template}),
                    "--task-lm", "openai/tiny", "--api-base", endpoint, "--data-path", str(examples),
                    "--output-dir", str(out), "--max-metric-calls", "9", "--reflection-minibatch-size", "1",
                    "--predict-fn", "gepa_hooks.predict", "--prompt-uris", "prompts:/qa/1",
                    "--scorers", '["gepa_hooks:length"]', "--enable-tracking", "false",
                    env={"MLFLOW_TRACKING_URI": store})
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "succeeded" and result["backend"] == "mlflow"
    record = json.loads((out / "gepa" / "mlflow_result.json").read_text())
    assert record["optimized_prompt_uris"] and record["optimized_prompt_uris"][0].startswith("prompts:/qa/")
    best = json.loads((out / "gepa" / "best_candidate.json").read_text())
    assert set(best) == {"qa"} and (out / "gepa" / "best_prompt.txt").read_text().strip()
    candidates = [json.loads(line) for line in (out / "gepa" / "candidates.jsonl").read_text().splitlines()]
    assert candidates and candidates[0]["texts"] == {"qa": template}
    lines = read_metrics(out / "training_metrics.jsonl")
    assert [line["reward"] for line in lines] == [c["val_score"] for c in candidates]
    assert candidates[0]["val_score"] > 0  # the length scorer scored the tiny model's answers
