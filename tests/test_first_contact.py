"""A new user's first contact (issue 15): every hint leads somewhere, output goes where pip, git
and kubectl put it, and a dry run checks the data. Each test runs the real CLI, in-process
(click's runner, separate stdout/stderr) or as a piped subprocess like `thub ... | grep`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from thub import hookimpl
from thub.specs import BackendSpec

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "examples" / "data"
CHAT = str(DATA / "chat.jsonl")


def thub(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``thub ARGS`` as a child process with stdout and stderr piped (not a terminal)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_") and k != "COLUMNS"}
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True, env=environ,
                          timeout=300, cwd=cwd or ROOT)


def dry(*extra: str) -> list[str]:
    return ["--model-path", "m", "--data-path", CHAT, "--ckpt-output-dir", "out", "--dry-run", *extra]


# --- 2. thub doctor on a CPU-only machine ------------------------------------------------------


def test_gpu_only_check_is_not_applicable_without_a_gpu() -> None:
    pytest.importorskip("thub_plugin_minitrainer", reason="pip install --no-deps -e ./thub-plugin-minitrainer")
    done = thub("doctor", "minitrainer.attention", "--json", env={"CUDA_VISIBLE_DEVICES": ""})
    check = json.loads(done.stdout)["checks"][0]
    assert check["status"] == "skip" and "not applicable" in check["summary"], check
    assert done.returncode == 0
    human = thub("doctor", "--exclude-tag", "slow", "--timeout", "600", env={"CUDA_VISIBLE_DEVICES": ""})  # hang guard
    assert "flash-attn --no-build-isolation" not in human.stdout + human.stderr
    assert human.returncode == 0, human.stdout + human.stderr


class _PinnedOld:
    """A CPU backend named like a catalog one whose pins contradict the installed trl backend's."""

    @hookimpl
    def thub_register_backends(self, register):  # type: ignore[no-untyped-def]
        register(BackendSpec("unsloth", "old pins", {"lora_sft": frozenset()}, "nowhere:run",
                             requirements=("trl>=0.18.2,<=1.15.0", "thub-surely-not-installed>=1")))


def test_backend_requirements_fix_never_conflicts_with_what_is_installed(thub_plugin, thub_cli) -> None:
    from importlib.metadata import version

    from packaging.version import Version

    if Version(version("trl")) <= Version("1.15.0"):
        pytest.skip("needs trl > 1.15 installed (the trl backend's pin)")
    thub_plugin(("pinned", _PinnedOld()), entry_points=False)
    result = thub_cli("doctor", "core.backend-requirements", "--json", "--timeout", "600")  # a hang guard
    check = result.json()["checks"][0]
    assert check["status"] in ("warn", "fail"), check
    assert "thub install unsloth --into managed" in check["fix"], check["fix"]
    assert "trl<=1.15" not in check["fix"].replace(" ", "") and "pip install" not in check["fix"], check["fix"]


# --- 3. unknown backend, advice for an algorithm ----------------------------------------------------


def test_unknown_backend_names_the_catalog_and_the_install_command(thub_plugin, thub_cli) -> None:
    thub_plugin(entry_points=False)  # nothing installed but the built-ins
    result = thub_cli("train", "sft", "--backend", "mini-trainer", *dry())
    assert result.exit_code == 2
    assert "thub install mini-trainer" in result.stderr
    for name in ("trl", "mini-trainer", "instructlab", "unsloth", "art", "verl"):
        assert name in result.stderr
    typo = thub_cli("train", "sft", "--backend", "mini-trainr", *dry())
    assert typo.exit_code == 2 and "did you mean 'mini-trainer'" in typo.stderr


def test_advice_for_an_algorithm_names_a_backend_that_runs_it(thub_plugin, thub_cli) -> None:
    thub_plugin(entry_points=False)
    train = thub_cli("train", "osft", *dry())
    assert train.exit_code == 2
    assert "thub install mini-trainer" in train.stderr and "thub install trl" not in train.stderr
    listing = thub_cli("backends", "osft")
    assert "thub install mini-trainer" in listing.stdout + listing.stderr
    assert "thub-plugin-trl" not in listing.stdout + listing.stderr


def test_catalog_algorithms_match_the_installed_plugins(thub_registry) -> None:
    from thub.envs.catalog import CATALOG

    checked = 0
    for entry in CATALOG.values():
        for spec in thub_registry.backends.values():
            if spec.provenance.distribution == entry.distribution and spec.python is None:
                assert set(entry.algorithms) == set(spec.algorithms), entry.name
                checked += 1
    assert checked >= 1  # trl at least (scripts/setup.sh installs it)


# --- 4. data check of several files ------------------------------------------------------------


def test_data_check_checks_each_file_on_its_own(thub_cli) -> None:
    files = sorted(str(p) for p in DATA.glob("*.jsonl"))
    assert len(files) > 2
    result = thub_cli("data", "check", *files)
    assert result.exit_code == 0, result.stderr
    report = thub_cli("data", "check", "--json", *files).json()
    assert report["ok"] and len(report["sources"]) == len(files)
    mixed = thub_cli("data", "check", "--mix", "concat", *files)
    assert mixed.exit_code == 2 and "one kind to mix" in mixed.stderr


# --- 5. suggestions everywhere ---------------------------------------------------------------------


@pytest.mark.parametrize(("typed", "meant"), [("sfft", "sft"), ("lora-sft", "lora_sft")])
def test_algorithm_did_you_mean(thub_cli, typed: str, meant: str) -> None:
    result = thub_cli("train", typed, *dry())
    assert result.exit_code == 2
    assert f"did you mean '{meant}'" in result.stderr and "Traceback" not in result.stderr


def test_backend_name_is_case_insensitive(thub_cli) -> None:
    result = thub_cli("train", "sft", "--backend", "TRL", *dry("--json"))
    assert result.exit_code == 0, result.stderr
    assert result.json()["backend"] == "trl"


def test_unknown_thub_variable_warns_with_a_suggestion(thub_cli) -> None:
    result = thub_cli("train", "sft", "--backend", "trl", *dry("--json"), env={"THUB_LEARNNG_RATE": "1e-3"})
    assert result.exit_code == 0, result.stderr
    assert "THUB_LEARNNG_RATE" in result.stderr and "THUB_LEARNING_RATE" in result.stderr
    json.loads(result.stdout)  # the warning stays off stdout
    quiet = thub_cli("train", "sft", "--backend", "trl", *dry("--json"),
                     env={"THUB_LEARNING_RATE": "1e-3", "THUB_DATA_DIR": "/tmp"})
    assert quiet.exit_code == 0, quiet.stderr
    assert "is not a thub setting" not in quiet.stderr  # (the warning's wording: thub.envnames.describe)
    doctor = thub("doctor", "core.env-vars", "--json", env={"THUB_LEARNNG_RATE": "1e-3"})
    check = json.loads(doctor.stdout)["checks"][0]
    assert check["status"] == "warn" and "THUB_LEARNNG_RATE" in check["summary"] + " ".join(check["details"])
    assert "THUB_LEARNING_RATE" in check["fix"]


def test_every_thub_variable_the_code_reads_is_known(thub_registry) -> None:
    from thub.envnames import unknown_variables

    read = set()
    for folder in ("core", "plugins", *(p.name + "/src" for p in ROOT.glob("thub-plugin-*"))):
        for path in (ROOT / folder).rglob("*.py"):
            read.update(re.findall(r"[\"'](THUB_[A-Z0-9_]+)[\"'=]", path.read_text()))
    assert "THUB_PLUGINS" in read
    assert unknown_variables(dict.fromkeys(read, "1")) == []  # a new setting belongs in thub.envnames.SETTINGS


def test_install_only_catalog_backends_or_an_explicit_package(thub_cli) -> None:
    typo = thub_cli("install", "mini-traner", "--dry-run")
    assert typo.exit_code == 2 and "did you mean 'mini-trainer'" in typo.stderr
    index_name = thub_cli("install", "requests", "--dry-run")
    assert index_name.exit_code == 2 and "--package" in index_name.stderr
    explicit = thub_cli("install", "--package", "thub-plugin-echo>=0.1", "--into", "managed", "--dry-run", "--json")
    assert explicit.exit_code == 0, explicit.stderr
    assert any("thub-plugin-echo>=0.1" in " ".join(p["sources"]) for p in explicit.json()["plans"])


# --- 6. output conventions --------------------------------------------------------------------------


def test_listings_reports_and_plans_go_to_stdout() -> None:
    algorithms = thub("algorithms")
    assert "lora_sft" in algorithms.stdout and algorithms.stderr == ""
    backends = thub("backends")
    assert "trl" in backends.stdout
    plan = thub("train", "sft", "--backend", "trl", *dry())
    assert plan.returncode == 0, plan.stderr
    assert "learning_rate" in plan.stdout and "per_device_train_batch_size" in plan.stdout
    assert "learning_rate" not in plan.stderr
    report = thub("doctor", "core.python")
    assert "Python version" in report.stdout and report.returncode == 0
    as_json = thub("doctor", "core.python", "--json")
    json.loads(as_json.stdout)


def test_tables_do_not_wrap_when_piped() -> None:
    done = thub("backends")
    row = next(line for line in done.stdout.splitlines() if line.startswith("trl "))
    assert "ready" in row and "current" in row, done.stdout  # the whole row on one line
    plan = thub("train", "sft", "--backend", "trl", *dry())
    line = next(line for line in plan.stdout.splitlines() if line.startswith("data_path "))
    assert CHAT in line and "flag --data-path" in line, plan.stdout


def test_speed_is_printed_with_thousands_separators() -> None:
    from thub.runner.progress import _describe

    text = _describe({"loss": 1.5, "tokens_per_second": 11290.4})
    assert "11,290 tokens/s" in text and "e+" not in text


def test_progress_bar_keeps_a_readable_width_with_eta() -> None:
    import io

    from rich.console import Console

    from thub.runner.progress import Progress

    buffer = io.StringIO()
    console = Console(file=buffer, width=80, force_terminal=True, color_system="standard", legacy_windows=False)
    progress = Progress(console=console, live=True)
    with progress:
        progress.update({"step": 3, "max_steps": 32, "loss": 2.345, "learning_rate": 5e-3,
                         "tokens_per_second": 11290.4})
        progress._bar.refresh()
    lines = [line for line in re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buffer.getvalue()).splitlines() if "3/32" in line]
    assert lines, buffer.getvalue()
    line = lines[-1]
    assert len(line) <= 80, line
    assert len(re.findall("[━╸╺]", line)) >= 10, line  # the bar keeps at least 10 cells
    assert re.search(r"eta \d+:\d\d:\d\d|eta -:--:--", line), line  # the whole ETA


def test_preview_marks_trained_tokens_when_piped(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from thub.data.synthetic import CHATML, make_tokenizer

    model = tmp_path / "tok"
    make_tokenizer(chat_template=CHATML).save_pretrained(model)
    done = thub("data", "preview", "--model", str(model), CHAT)
    assert done.returncode == 0, done.stderr
    assert "[[" in done.stdout and "]]" in done.stdout
    first = json.loads((DATA / "chat.jsonl").read_text().splitlines()[0])
    answer = next(m["content"] for m in first["messages"] if m["role"] == "assistant")
    assert f"[[{answer}" in done.stdout, done.stdout


def test_readme_tour_writes_under_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    tour = readme.split("## A five-minute tour", 1)[1].split("```", 2)[1]
    targets = re.findall(r"(?:>|-o)\s+(\S+)", tour)
    assert targets, tour
    assert all(t.startswith("runs/") for t in targets), targets


# --- 7. the data gate ------------------------------------------------------------------------------


def test_dry_run_checks_the_data(thub_cli, tmp_path: Path) -> None:
    missing = thub_cli("train", "sft", "--backend", "trl", "--model-path", "m", "--data-path",
                       str(tmp_path / "nope.jsonl"), "--ckpt-output-dir", str(tmp_path / "out"), "--dry-run")
    assert missing.exit_code == 2 and "nope.jsonl: no such file" in missing.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"messages": [{"role": "user", "content": "q"}]}) + "\n")
    bad_run = thub_cli("train", "sft", "--backend", "trl", "--model-path", "m", "--data-path", str(bad),
                       "--ckpt-output-dir", str(tmp_path / "out"), "--dry-run")
    assert bad_run.exit_code == 2 and f"{bad}:1" in bad_run.stderr
    assert not (tmp_path / "out").exists()


def test_jsonl_with_a_byte_order_mark_is_accepted(thub_cli, tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + (DATA / "chat.jsonl").read_bytes())
    result = thub_cli("data", "check", str(path))
    assert result.exit_code == 0, result.stderr
    as_json = tmp_path / "bom.json"
    rows = [json.loads(line) for line in (DATA / "chat.jsonl").read_text().splitlines()]
    as_json.write_bytes(b"\xef\xbb\xbf" + json.dumps(rows).encode())
    assert thub_cli("data", "check", str(as_json)).exit_code == 0


def test_tool_call_arguments_that_are_not_json_are_located(thub_cli, tmp_path: Path) -> None:
    path = tmp_path / "tools.jsonl"
    good = {"messages": [{"role": "user", "content": "weather?"},
                         {"role": "assistant",
                          "tool_calls": [{"function": {"name": "get", "arguments": '{"city": "Oslo"}'}}]},
                         {"role": "tool", "content": "sunny"}, {"role": "assistant", "content": "Sunny."}]}
    bad = json.loads(json.dumps(good))
    bad["messages"][1]["tool_calls"][0]["function"]["arguments"] = "{city: Oslo"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    result = thub_cli("data", "check", str(path))
    assert result.exit_code == 2
    assert f"{path}:2: messages[1].tool_calls[0].function.arguments: expected a JSON object" in result.stderr
    assert f"{path}:1" not in result.stderr
