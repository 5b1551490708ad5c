"""Training data: formats, validation, mixing, chat templates with loss masks, preparation.

Importing this package is cheap (no torch, transformers or datasets): the heavy libraries are
imported inside the functions that need a tokenizer, Parquet or a saved HF dataset.

Public API (stable; the training runner and backends call it):

* :func:`load_dataset_rows` / :func:`detect_format` - read and validate one file, in the
  formats plugins register (:mod:`thub.data.kinds`, ``thub_register_data_kinds``);
* :class:`RowCheck` / :func:`check_messages` / :func:`describe` / :func:`sharegpt_tags` - what a
  data format's normaliser is built from (``file:line: field: expected X, found Y``);
* :class:`DatasetSource` / :func:`mix` - several datasets with their own tags, mixed by a strategy;
* :func:`tokenize_chat` / :func:`tokenize_documents` - input_ids + labels with loss masks;
* :func:`prepare` - tokenize to a file backends read (cached, atomic);
* :func:`training_rows` / :func:`validate_training_data` - the rows a run trains on, from its
  parameters (path or mix); a backend's runner gets them from its run context instead
  (``context.data()``, :mod:`thub.data.training`), which reuses the parent's validation.
"""

from __future__ import annotations

from thub.data.formats import DatasetSource, RowCheck, check_messages, describe, sharegpt_tags
from thub.data.kinds import detect_format, format_names
from thub.data.loading import LoadedSource, load_dataset_rows, load_source, load_sources
from thub.data.mixing import STRATEGIES, mix, mix_loaded
from thub.data.prepare import PrepareResult, load_tokenizer, prepare
from thub.data.problems import Problems
from thub.data.tokenize import TokenizeStats, tokenize_chat, tokenize_documents
from thub.data.training import TrainingData, training_rows, training_sources, validate_training_data

__all__ = [
    "STRATEGIES", "DatasetSource", "LoadedSource", "PrepareResult", "Problems", "RowCheck", "TokenizeStats",
    "TrainingData", "check_messages", "describe", "detect_format", "format_names", "load_dataset_rows",
    "load_source", "load_sources", "load_tokenizer", "mix", "mix_loaded", "prepare", "sharegpt_tags",
    "tokenize_chat", "tokenize_documents", "training_rows", "training_sources", "validate_training_data",
]
