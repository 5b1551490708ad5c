"""``thub.gepa(...)`` is Training Hub's ``from training_hub import gepa``: its positional order (read from the
0.11.2 wheel's signature) and its keywords, run through thub-plugin-gepa."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import thub
from thub.errors import UsageError
from thub_builtins.training_hub.functions import GEPA_POSITIONAL

WHEEL = Path(__file__).parents[1] / "build" / "training-hub-0.11.2" / "training_hub" / "algorithms" / "gepa.py"


def test_the_positional_order_is_training_hubs() -> None:
    if not WHEEL.exists():
        pytest.skip(f"training-hub 0.11.2 is not unpacked at {WHEEL.parents[2]} (see .ci/run)")
    node = next(n for n in ast.parse(WHEEL.read_text()).body if isinstance(n, ast.FunctionDef) and n.name == "gepa")
    assert [a.arg for a in node.args.args][:len(GEPA_POSITIONAL)] == list(GEPA_POSITIONAL)


def test_positional_arguments_reach_the_plugin_and_an_unreachable_api_base_stops_it(tmp_path: Path) -> None:
    pytest.importorskip("thub_plugin_gepa")
    data = tmp_path / "qa.jsonl"
    data.write_text(json.dumps({"input": "2+2?", "answer": "4"}) + "\n")
    with pytest.raises(UsageError, match="api_base"):
        thub.gepa({"system_prompt": "Answer."}, "openai/tiny", str(data), output_dir=str(tmp_path / "run"),
                  api_base="http://127.0.0.1:9/v1", max_metric_calls=2, progress=False)
    assert not (tmp_path / "run").exists()  # refused before anything was written
    with pytest.raises(TypeError, match="multiple values for argument 'task_lm'"):
        thub.gepa({"system_prompt": "Answer."}, "openai/tiny", task_lm="openai/other")
