"""An algorithm and a data kind added from outside thub (issue 26 item 5).

``examples/plugins/thub-plugin-pairs`` is installed with pip, as a user would, into a directory of
its own (so this environment is left as it was) and put on ``PYTHONPATH``; thub finds it through
its entry point. It registers, through the public hooks only, a data kind (``pairs``), an algorithm
that accepts only that kind (``pairs_dpo``) and a backend that trains it with TRL's DPOTrainer. No
file of thub's core knows any of them: the run below goes through thub's whole path (the data
gate, the supervised child, the metrics stream, ``result.json``).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "examples" / "plugins" / "thub-plugin-pairs"
pytestmark = pytest.mark.needs_module("trl")

#: what the plugin may import from thub: the documented public modules
PUBLIC = {"thub", "thub.backend", "thub.specs", "thub.params"}

PAIRS = [  # a learnable preference: the better answer is always the short polite one
    {"prompt": "Say hello.", "better": "Hello! 👋", "worse": "no"},
    {"prompt": [{"role": "system", "content": "Réponds en français."}, {"role": "user", "content": "Bonjour ?"}],
     "better": "Bonjour ! Comment puis-je vous aider ?", "worse": "non"},
    {"prompt": "What is 2+2?", "better": "2 + 2 = 4.", "worse": "five"},
    {"prompt": "Name a colour.", "better": "Blue.", "worse": "dunno"},
]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin pip-installed (no dependencies: thub and TRL are this environment's) into its own folder."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                    str(PLUGIN)], check=True, capture_output=True, text=True)
    return target


def _thub(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    env.pop("THUB_PLUGINS", None)
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=1800)  # a hang guard only


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def test_the_plugin_imports_only_public_thub_modules() -> None:
    for source in (PLUGIN / "src" / "thub_plugin_pairs").glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                if name.split(".")[0] == "thub":
                    assert name in PUBLIC, f"{source.name} imports {name}, not a public thub module"


def test_thub_lists_what_the_plugin_registers(installed: Path, tmp_path: Path) -> None:
    listing = _thub(installed, "plugins", "--json", cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    assert "thub-plugin-pairs" in listing.stdout
    algorithms = _thub(installed, "train", "--help", cwd=tmp_path)
    assert "pairs_dpo" in algorithms.stdout


def test_its_rows_are_checked_and_its_gate_holds(installed: Path, tmp_path: Path, demo_data: Path) -> None:
    good = _write(tmp_path / "pairs.jsonl", PAIRS)
    checked = _thub(installed, "data", "check", str(good), cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    bad = _write(tmp_path / "bad.jsonl", [PAIRS[0], {"prompt": "Hi", "better": "Same.", "worse": "Same."}])
    refused = _thub(installed, "data", "check", str(bad), cwd=tmp_path)
    assert refused.returncode == 2
    assert f"{bad}:2" in refused.stdout + refused.stderr and "worse" in refused.stdout + refused.stderr
    assert "Traceback" not in refused.stderr

    common = ["--ckpt-output-dir", str(tmp_path / "run"), "--model-path", str(ROOT / "examples" / "tiny"),
              "--dry-run"]
    sft_on_pairs = _thub(installed, "train", "sft", "--backend", "trl", "--data-path", str(good), *common,
                         cwd=tmp_path)
    assert sft_on_pairs.returncode == 2, sft_on_pairs.stdout + sft_on_pairs.stderr
    assert f"{good}:1" in sft_on_pairs.stderr and "pairs" in sft_on_pairs.stderr
    pairs_on_chat = _thub(installed, "train", "pairs_dpo", "--backend", "pairs-trl", "--data-path",
                          str(demo_data / "chat.jsonl"), *common, cwd=tmp_path)
    assert pairs_on_chat.returncode == 2, pairs_on_chat.stdout + pairs_on_chat.stderr
    assert "pairs_dpo expects pairs rows" in pairs_on_chat.stderr
    assert not (tmp_path / "run").exists()


def test_it_trains_on_trl_through_thubs_run(installed: Path, tmp_path: Path, tiny_model: Path) -> None:
    data = _write(tmp_path / "pairs.jsonl", PAIRS)
    run_dir = tmp_path / "run"
    done = _thub(installed, "train", "pairs_dpo", "--backend", "pairs-trl", "--model-path", str(tiny_model),
                 "--data-path", str(data), "--ckpt-output-dir", str(run_dir), "--max-steps", "4",
                 "--effective-batch-size", "2", "--learning-rate", "5e-4", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "succeeded"
    steps = [json.loads(line) for line in (run_dir / "training_metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in steps] == [1, 2, 3, 4]
    assert all("loss" in line and "rewards/margins" in line for line in steps)
    assert (run_dir / "final" / "model.safetensors").is_file()
