"""Fixtures of the sentence-transformers backend's tests: a tiny local embedder and labelled texts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "scripts" / "make_tiny_embedder.py"

GROUPS = {
    "geo": ["what is the capital of france", "capital of germany", "where is rome", "the capital of spain is madrid",
            "which country is berlin in", "paris is a city in france"],
    "code": ["design a microservices architecture", "scale the database cluster", "deploy the api server",
             "cache the service queue", "design an api for the database", "scale a server cluster"],
    "poem": ["write a poem about the sea", "a song about the moon", "a love story verse", "rhyme about the night sky",
             "a dream of the stars", "a verse about my heart"],
    "account": ["how do i reset my password", "refund my payment", "my login email", "billing invoice question",
                "charge on my card", "reset the account login"],
}


@pytest.fixture(scope="session")
def tiny_embedder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """scripts/make_tiny_embedder.py's model (2-layer BERT, WordPiece, mean pooling), built locally."""
    pytest.importorskip("sentence_transformers")
    out = tmp_path_factory.mktemp("embedder") / "model"
    subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], check=True, capture_output=True, text=True,
                   timeout=600)
    return out


@pytest.fixture(scope="session")
def labelled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 texts of 4 labels (string labels), one JSON object a line."""
    path = tmp_path_factory.mktemp("labelled") / "train.jsonl"
    rows = [{"text": text, "label": label} for label, texts in GROUPS.items() for text in texts]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path
