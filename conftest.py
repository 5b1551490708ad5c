"""Repository-wide fixtures: the tiny local model every real training test uses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent
EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama + byte-level BPE tokenizer with a ChatML template, built locally."""
    out = tmp_path_factory.mktemp("tiny") / "model"
    subprocess.run([sys.executable, str(EXAMPLES / "make_tiny_model.py"), "--out", str(out)],
                   check=True, capture_output=True, text=True)
    return out


@pytest.fixture(scope="session")
def demo_data() -> Path:
    """The committed demo datasets (chat, grpo, documents, sharegpt, alpaca)."""
    return EXAMPLES / "data"
