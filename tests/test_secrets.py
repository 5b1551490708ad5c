"""Secrets (issue 13, item 12): passwords inside URIs and secret query values are redacted in
``--dry-run`` (text and JSON), ``thub_run.json``, ``thub history show/diff`` and ``thub env``,
by one module (thub.redact), while the training child still receives the real values."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from thub import hookimpl
from thub.redact import REDACTED, is_secret_name, real_values, record_values, redact, redact_text
from thub.specs import AlgorithmSpec, BackendSpec

PASSWORD, TOKEN, HUB = "hunter2pw", "qtok42abc", "hf_sEcReT9"
URI = f"https://alice:{PASSWORD}@mlflow.example.com:5000/base?token={TOKEN}&experiment=7"


@pytest.mark.parametrize(("text", "shown"), [
    ("https://u:pw@host/x", f"https://{REDACTED}@host/x"),
    ("https://u:p@ss@host/x", f"https://{REDACTED}@host/x"),
    ("postgresql://u:pw@db:5432/mlflow", f"postgresql://{REDACTED}@db:5432/mlflow"),
    ("https://h/p?token=abc&x=1", f"https://h/p?token={REDACTED}&x=1"),
    ("https://h/p?x=1&access_token=abc", f"https://h/p?x=1&access_token={REDACTED}"),
    ("s3://b/k?X-Amz-Signature=abc&X-Amz-Date=1", f"s3://b/k?X-Amz-Signature={REDACTED}&X-Amz-Date=1"),
    ("https://acct.blob/c?sv=1&sig=abc", f"https://acct.blob/c?sv=1&sig={REDACTED}"),
    ("https://maps/api?key=AIza", f"https://maps/api?key={REDACTED}"),
    ("https://app/cb#id_token=abc", f"https://app/cb#id_token={REDACTED}"),
    # nothing secret: unchanged
    ("https://huggingface.co/org/model", "https://huggingface.co/org/model"),
    ("/data/run@2/out", "/data/run@2/out"),
    ("file:///a/b@c", "file:///a/b@c"),
    ("max_tokens=5&seed=1", "max_tokens=5&seed=1"),
    ("https://h/p?token=", "https://h/p?token="),
])
def test_redact_text(text: str, shown: str) -> None:
    assert redact_text(text) == shown


def test_secret_names_by_whole_words() -> None:
    for name in ("HF_TOKEN", "WANDB_API_KEY", "hub_token", "db_password", "apiKey", "aws_access_key_id",
                 "MLFLOW_TRACKING_SECRET", "X-Amz-Credential", "THUB_RUN_SECRETS"):
        assert is_secret_name(name), name
    for name in ("max_tokens", "TOKENIZERS_PARALLELISM", "prompt_key", "hub_private_repo", "keyword", "monkey"):
        assert not is_secret_name(name), name
    assert is_secret_name("OPENAI_KEY", loose=True) and not is_secret_name("OPENAI_KEY")
    # metric names that contain "token" are figures, not secrets (result.json's last_metrics)
    for name in ("mean_token_accuracy", "num_tokens", "token_accuracy", "tokens_per_second"):
        assert not is_secret_name(name), name
    assert redact({"last_metrics": {"mean_token_accuracy": 0.5}}) == {"last_metrics": {"mean_token_accuracy": 0.5}}
    nested = redact({"hub_token": HUB, "prompt_key": "prompt", "push": True, "env": {"WANDB_API_KEY": "k"},
                     "uris": [URI], "hub_private_repo": True, "none_token": None})
    assert nested == {"hub_token": REDACTED, "prompt_key": "prompt", "push": True, "env": {"WANDB_API_KEY": REDACTED},
                      "uris": [redact_text(URI)], "hub_private_repo": True, "none_token": None}


def test_record_values_restore_only_exact_redactions(tmp_path: Path) -> None:
    values = {"mlflow_tracking_uri": URI, "seed": 1, "lr_scheduler": "cosine"}
    shown = record_values(values, tmp_path / "run")
    assert shown["mlflow_tracking_uri"] == redact_text(URI) and PASSWORD not in json.dumps(shown)
    assert real_values(shown, tmp_path / "run") == values  # the writing process
    environ = {"THUB_RUN_SECRETS": json.dumps({"mlflow_tracking_uri": URI})}
    assert real_values(shown, environ=environ) == values  # a child
    other = {**shown, "mlflow_tracking_uri": "https://other/"}
    assert real_values(other, environ=environ)["mlflow_tracking_uri"] == "https://other/"  # never swapped in
    assert real_values(shown, environ={"THUB_RUN_SECRETS": "not json"}) == shown


def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("THUB_"):
            monkeypatch.delenv(name)


def test_dry_run_text_and_json_never_show_the_secret(thub_cli, demo_data: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _clean_env(monkeypatch)
    args = ["train", "sft", "--backend", "trl", "--dry-run", "--model-path", "m",
            "--data-path", str(demo_data / "chat.jsonl"), "--ckpt-output-dir", str(tmp_path / "o"),
            "--set", f"mlflow_tracking_uri={URI}"]
    for extra in ([], ["--json"]):
        result = thub_cli(*args, *extra)
        assert result.exit_code == 0, result.stderr
        shown = result.stdout + result.stderr
        assert PASSWORD not in shown and TOKEN not in shown, shown
        assert "mlflow.example.com" in shown  # the rest of the URI is still there
    plan = thub_cli(*args, "--json").json()
    assert plan["parameters"]["mlflow_tracking_uri"]["value"] == (
        f"https://{REDACTED}@mlflow.example.com:5000/base?token={REDACTED}&experiment=7")


def test_thub_env_redacts_query_tokens(thub_cli) -> None:
    env = {"MLFLOW_TRACKING_URI": f"https://mlflow.example.com/?token={TOKEN}",
           "HF_ENDPOINT": f"https://bob:{PASSWORD}@hub.example.com", "TOKENIZERS_PARALLELISM": "false"}
    for extra in ([], ["--json"]):
        result = thub_cli("env", "--no-torch", *extra, env=env)
        assert result.exit_code == 0, result.stderr
        assert TOKEN not in result.stdout and PASSWORD not in result.stdout
        assert "mlflow.example.com" in result.stdout and "hub.example.com" in result.stdout
    shown = json.loads(thub_cli("env", "--no-torch", "--json", env=env).stdout)["environment"]
    assert shown["MLFLOW_TRACKING_URI"] == f"https://mlflow.example.com/?token={REDACTED}"
    assert shown["TOKENIZERS_PARALLELISM"] == "false"  # not a secret: "tokenizers" is not "token"


# --- a real supervised run: the record is redacted, the child gets the real values -------------

ECHO_MODULE = '''
import json
from pathlib import Path

from thub_builtins.params import SFTParams


class EchoParams(SFTParams):
    """SFT parameters plus two a third-party plugin might add."""

    endpoint: str | None = None
    hub_token: str | None = None


def run(context):
    Path(context.run_dir.path, "seen.json").write_text(json.dumps(context.params))
    if context.params.get("lr_scheduler") == "fail":
        raise RuntimeError(f"cannot reach {context.params['endpoint']}")
    if context.params.get("lr_scheduler") == "print":  # what MLflow and other libraries print
        import os
        import sys

        print(f"View run at: {context.params['endpoint']}", flush=True)
        print(f"token from the env: {os.environ['EXTRA_API_KEY']} and {context.params['hub_token']}",
              file=sys.stderr, flush=True)
        os.write(1, b"y" * 65530 + b" https://bob:pw12345678@h/x\\r\\n")  # across a 64 KiB read
    return {}
'''


class _EchoPlugin:
    @hookimpl
    def thub_register_algorithms(self, register: Any) -> None:
        register(AlgorithmSpec("echo", "records its parameters", "h13_echo:EchoParams"))

    @hookimpl
    def thub_register_backends(self, register: Any) -> None:
        register(BackendSpec("echo", "records its parameters",
                             {"echo": frozenset({"endpoint", "hub_token", "lr_scheduler"})}, "h13_echo:run"))


@pytest.fixture
def echo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, thub_plugin: Any) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    (site / "h13_echo.py").write_text(textwrap.dedent(ECHO_MODULE))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))  # the training child imports the runner too
    _clean_env(monkeypatch)
    thub_plugin(("h13_echo_plugin", _EchoPlugin()))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    return model


def test_run_record_and_history_are_redacted_but_the_child_gets_the_real_values(
        echo: Path, demo_data: Path, tmp_path: Path, thub_cli) -> None:
    import thub

    out = tmp_path / "run"
    result = thub.train("echo", backend="echo", model_path=str(echo), data_path=str(demo_data / "chat.jsonl"),
                        ckpt_output_dir=str(out), endpoint=URI, hub_token=HUB)
    assert result["status"] == "succeeded", result
    seen = json.loads((out / "seen.json").read_text())
    assert seen["endpoint"] == URI and seen["hub_token"] == HUB  # the child trains with the real values
    record_text = (out / "thub_run.json").read_text()
    assert PASSWORD not in record_text and TOKEN not in record_text and HUB not in record_text
    record = json.loads(record_text)
    assert record["parameters"]["endpoint"]["value"] == redact_text(URI)
    assert record["parameters"]["hub_token"]["value"] == REDACTED
    for path in out.rglob("*"):
        if path.is_file() and path.name != "seen.json":
            text = path.read_text(errors="replace")
            assert PASSWORD not in text and HUB not in text, path
    for args in (("history", "show", str(out)), ("history", "show", str(out), "--json")):
        shown = thub_cli(*args)
        assert shown.exit_code == 0, shown.stderr
        assert PASSWORD not in shown.stdout and TOKEN not in shown.stdout and HUB not in shown.stdout
        assert "mlflow.example.com" in shown.stdout


def test_the_childs_output_is_redacted_as_it_is_written_to_the_log(
        echo: Path, demo_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 23 item 9: a library's own output (MLflow's "View run at: ...?token=...") reaches
    logs/train.log through thub.redact; the log is owner-only like the record and the result."""
    import stat

    import thub

    api_key = "sk-live-0123456789abcdef"
    monkeypatch.setenv("EXTRA_API_KEY", api_key)
    out = tmp_path / "run"
    result = thub.train("echo", backend="echo", model_path=str(echo), data_path=str(demo_data / "chat.jsonl"),
                        ckpt_output_dir=str(out), endpoint=URI, hub_token=HUB, lr_scheduler="print")
    assert result["status"] == "succeeded", result
    log = out / "logs" / "train.log"
    text = log.read_text()
    assert f"View run at: {redact_text(URI)}" in text
    assert TOKEN not in text and PASSWORD not in text and HUB not in text and api_key not in text
    assert "pw12345678" not in text and f" https://{REDACTED}@h/x" in text
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


def test_history_of_an_old_unredacted_record_is_redacted(tmp_path: Path, thub_cli) -> None:
    old = tmp_path / "old"
    old.mkdir()
    (old / "thub_run.json").write_text(json.dumps({
        "algorithm": "sft", "backend": "trl", "created": 1.0,
        "parameters": {"mlflow_tracking_uri": {"value": URI, "source": "flag"},
                       "seed": {"value": 1, "source": "default"}},
        "command_line": ["thub", "train", "sft", "--mlflow-tracking-uri", URI]}))
    other = tmp_path / "other"
    other.mkdir()
    (other / "thub_run.json").write_text(json.dumps({
        "algorithm": "sft", "backend": "trl", "created": 1.0,
        "parameters": {"mlflow_tracking_uri": {"value": URI + "&x=1", "source": "flag"}}}))
    for args in (("history", "show", str(old)), ("history", "show", str(old), "--json"),
                 ("history", "diff", str(old), str(other)), ("history", "diff", str(old), str(other), "--json")):
        shown = thub_cli(*args)
        assert shown.exit_code == 0, shown.stderr
        assert PASSWORD not in shown.stdout and TOKEN not in shown.stdout, shown.stdout


def test_validation_error_does_not_echo_the_secret(thub_registry) -> None:
    from thub.config.resolve import resolve
    from thub.errors import UsageError

    with pytest.raises(UsageError) as info:
        resolve(thub_registry, "sft", backend="trl", environ={},
                flags={"model_path": "m", "data_path": "d", "ckpt_output_dir": "o", "num_epochs": URI})
    assert "num_epochs" in str(info.value) and PASSWORD not in str(info.value) and TOKEN not in str(info.value)


@pytest.mark.needs_module("mlflow")  # the tracker check tries the store only with mlflow installed
def test_an_error_quoting_the_uri_does_not_show_the_password(thub_cli, demo_data: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _clean_env(monkeypatch)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    # port 9 (discard) on loopback: nothing listens, the tracker check reports it unreachable
    result = thub_cli("train", "sft", "--backend", "trl", "--model-path", str(model),
                      "--data-path", str(demo_data / "chat.jsonl"), "--ckpt-output-dir", str(tmp_path / "o"),
                      "--mlflow-tracking-uri", f"http://alice:{PASSWORD}@127.0.0.1:9/?token={TOKEN}")
    assert result.exit_code == 2, result.stderr
    assert "127.0.0.1:9" in result.stderr and PASSWORD not in result.stderr and TOKEN not in result.stderr
    assert not (tmp_path / "o").exists()


def test_a_failed_runs_result_does_not_quote_the_password(echo: Path, demo_data: Path, tmp_path: Path) -> None:
    import thub

    out = tmp_path / "run"
    result = thub.train("echo", backend="echo", model_path=str(echo), data_path=str(demo_data / "chat.jsonl"),
                        ckpt_output_dir=str(out), endpoint=URI, lr_scheduler="fail")
    assert result["status"] == "failed" and "cannot reach https://" in result["error"], result
    assert "mlflow.example.com" in result["error"]
    for text in (json.dumps(result), (out / "result.json").read_text()):
        assert PASSWORD not in text and TOKEN not in text
