"""``thub compare sft --backends trl,llamafactory`` (issue 25) on the tiny model and the edge-case set:
equal examples and trained-token masks per example and a first-step loss within the stated
tolerance, or every difference named with its reason and that reason in both plugin READMEs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.install]

ROOT = Path(__file__).parents[2]


def test_compare_trl_and_llamafactory_on_the_edge_cases(lf_env: dict, tiny_model: Path, edge_cases: Path,
                                                        edge_cases_max_seq_len: int, tmp_path: Path) -> None:
    pytest.importorskip("trl")
    done = subprocess.run(
        [sys.executable, "-m", "thub", "compare", "sft", "--backends", "trl,llamafactory", "--steps", "2",
         "--out", str(tmp_path / "cmp"), "--set", f"model_path={tiny_model}",
         "--set", f"data_path={edge_cases / 'chat.jsonl'}", "--set", f"max_seq_len={edge_cases_max_seq_len}",
         "--json"], capture_output=True, text=True, env=lf_env["environ"], timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    document = json.loads(done.stdout)
    trl, lf = document["backends"]
    assert (trl["backend"], lf["backend"]) == ("trl", "llamafactory")
    assert trl["status"] == lf["status"] == "succeeded", (trl["error"], lf["error"])
    # what each library built was measured from the library itself, before step 1
    assert trl["built_by"].startswith("trl ") and lf["built_by"].startswith("llamafactory ")
    assert lf["masks_hash_count"] == lf["examples"]
    named = {d["quantity"]: d for d in document["differences"]}
    unexplained = [d for d in document["differences"] if not d["why"]]
    assert not unexplained, unexplained
    if "examples" not in named and "masks" not in named:
        assert trl["examples"] == lf["examples"] and trl["trained_tokens"] == lf["trained_tokens"]
        assert trl["as_validated"] is True and lf["as_validated"] is True
    if "loss" not in named:
        assert lf["steps"][0]["loss"] == pytest.approx(trl["steps"][0]["loss"], rel=document["tolerances"]["loss"])


def test_every_declared_difference_is_in_both_readmes() -> None:
    """A known difference thub compare names is documented where users read about the backend."""
    from thub.manager import get_registry

    registry = get_registry()
    if "llamafactory" not in registry.backends:
        pytest.skip("the llamafactory plugin is not installed here")
    declared = dict(registry.backends["llamafactory"].known_differences)
    for readme in (ROOT / "thub-plugin-llamafactory" / "README.md", ROOT / "thub-plugin-trl" / "README.md"):
        text = " ".join(readme.read_text().split())
        missing = [sentence for sentence in declared.values() if sentence not in text]
        assert not missing, f"{readme}: does not say {missing}"
