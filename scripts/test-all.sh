#!/usr/bin/env bash
# The README's second command: install what the tests need into .venv, then run every test
# (scripts/test.sh; extra arguments go to pytest, e.g. -m "not slow"). .ci/run calls it too.
# It first runs scripts/setup.sh --no-demo (a no-op when that is done). Safe to run again.
#
# Every install line for the tests lives here (not in .ci/run): the other backends' libraries
# and plugins (installed without their GPU stacks), unpacked reference wheels under build/,
# experiment trackers, and (scripts/system-packages.sh: root or sudo only) a one-node SLURM. A plugin,
# library or system binary that is not installed makes its tests skip with the install command as the
# reason (conftest.py), never a collection error.
set -euo pipefail
cd "$(dirname "$0")/.."

# .venv, CPU torch, thub with its test extras, the trl backend, the tiny model (no demo run).
bash scripts/setup.sh --no-demo
. .venv/bin/activate

# Experiment trackers (issue 20; tests/test_trackers.py, thub-plugin-trl/tests/test_trackers.py write and read
# real runs): tensorboard, mlflow-skinny + sqlalchemy/alembic (its sqlite store), wandb (offline). ~200 MB,
# ~20 s, no torch/transformers change.
python -m pip install --quiet "tensorboard==2.21.0" "mlflow-skinny==3.17.2" "sqlalchemy==2.1.9" "alembic==1.20.1" \
  "wandb==0.31.0"
# thub checkpoint push (issue 29; tests/test_checkpoint_push*.py): s3fs (fsspec's S3) and boto3 as clients of a
# real S3-compatible server the tests start on 127.0.0.1 (moto's server mode). Pinned to the venv's fsspec; no
# torch/transformers change.
python -m pip install --quiet "moto[server]==5.2.5" "s3fs==2026.9.0" "boto3==1.43.117"
# instructlab-training imports on CPU (its data step runs here; training needs CUDA and is tested
# up to that boundary). It adds only small packages next to torch/trl/transformers/datasets.
python -m pip install --quiet "instructlab-training==0.16.2"
python -m pip install --quiet --no-deps -e ./thub-plugin-instructlab
# mini-trainer imports on CPU as well (its torchrun workers need CUDA: tested up to that boundary).
python -m pip install --quiet "rhai-innovation-mini-trainer==0.9.0"
python -m pip install --quiet --no-deps -e ./thub-plugin-minitrainer
# verl: the plugin (its GPU stack, verl[vllm] with torch 2.11 + vllm 0.24, never here), hydra-core
# and omegaconf to compose verl's config in the tests (3 small packages, no torch change), and the
# verl 0.9.1 wheel unpacked without dependencies outside the venv (it ships top-level `tests` and
# `scripts` packages and pins transformers<5.11, so it is not installed into .venv).
python -m pip install --quiet "hydra-core>=1.3,<1.4" "omegaconf>=2.3,<2.4"
python -m pip install --quiet --no-deps -e ./thub-plugin-verl
# Next to it, what verl's batch checks import (thub-plugin-verl/tests/test_batch_matrix.py runs them):
# tensordict 0.10.0 (verl pins <=0.10.0) and four small pure-Python/compiled helpers, ~5 MB.
python -m pip install --quiet --no-deps --upgrade --target build/verl-0.9.1 "verl==0.9.1" \
  "tensordict==0.10.0" "cloudpickle==3.1.3" "pyvers==0.2.3" "codetiming==1.4.0" "orjson==3.13.0"
# unsloth: the plugin only. unsloth pins trl<=1.15 / datasets<5 and pulls triton, bitsandbytes and
# xformers (its own environment costs ~3 min + 2.9 GB), so its real CPU test is skipped here; see
# thub-plugin-unsloth/README.md.
python -m pip install --quiet --no-deps -e ./thub-plugin-unsloth
# ART: the plugin only (openpipe-art[backend] pins a CUDA torch 2.10, never here), and the
# openpipe-art 0.5.18 wheel unpacked without dependencies outside the venv: the tests read its
# config TypedDicts and its train()/TrainableModel signatures from it (507 kB, nothing imported
# from `art/__init__`).
python -m pip install --quiet --no-deps -e ./thub-plugin-art
python -m pip install --quiet --no-deps --upgrade --target build/openpipe-art-0.5.18 "openpipe-art==0.5.18"
# LLaMA-Factory: the plugin only here (llamafactory 0.9.5 pins transformers<=5.6, datasets<=4.0,
# trl<=0.24). Its tests build its managed environment with `thub install llamafactory --into managed`
# (about 1.5 min, 2.2 GB) and check the translation with LLaMA-Factory's own parser and train there.
python -m pip install --quiet --no-deps -e ./thub-plugin-llamafactory
# lm-evaluation-harness (issue 28, `thub eval`): lm-eval 0.4.13 with its HF extra (transformers, torch,
# accelerate, peft: already here, so the CPU torch stays; ~40 small packages: evaluate, sacrebleu,
# scikit-learn, rouge-score, ...) and the evaluator plugin. Its [vllm] extra is GPU only, never here.
python -m pip install --quiet "lm-eval[hf]==0.4.13"
python -m pip install --quiet --no-deps -e ./thub-plugin-lmeval
# axolotl: the plugin only (axolotl 0.19 pins transformers==5.16.1 and pulls 4.3 GB; its real runs
# need its managed environment, not built here), and the axolotl 0.19.0 wheel unpacked without
# dependencies outside the venv plus the few modules its config and data code import (addict, colorama;
# posthog, six, backoff for its telemetry module; 16 MB): the tests validate the generated configs with
# axolotl's own validate_config and run its own data preparation (prepare_datasets) on what thub writes.
python -m pip install --quiet --no-deps -e ./thub-plugin-axolotl
python -m pip install --quiet --no-deps --upgrade --target build/axolotl-0.19.0 "axolotl==0.19.0" "addict==2.4.0" \
    "colorama==0.4.6" "posthog==6.7.11" "six==1.17.0" "backoff==2.2.1"
# sentence-transformers (issue 30, embedding_sft): the library (its own SentenceTransformerTrainer; needs only
# transformers/torch/huggingface-hub/scikit-learn, already here: the CPU torch stays) and the plugin.
python -m pip install --quiet "sentence-transformers==6.2.0"
python -m pip install --quiet --no-deps -e ./thub-plugin-sentence-transformers
# gepa (issue 30, prompt optimisation): gepa 0.1.4 (no dependencies) and litellm, which it calls (openai, tiktoken,
# jiter, h2, ... ~15 MB; no torch/transformers change), and the plugin. Its tests serve the tiny model on 127.0.0.1
# with FastAPI + uvicorn (already here, from mlflow) and transformers' generate: no outside API.
python -m pip install --quiet "gepa==0.1.4" "litellm==1.110.2"
python -m pip install --quiet --no-deps -e ./thub-plugin-gepa
# Training Hub 0.11.2 (the system thub replaces), unpacked without dependencies outside the venv:
# tests/test_training_hub_names.py reads its public functions' signatures and callback hooks with
# `ast` (153 kB; nothing imported: it would pull instructlab-training, mini-trainer, torch, ...).
python -m pip install --quiet --no-deps --upgrade --target build/training-hub-0.11.2 "training-hub==0.11.2"
# DeepSpeed 0.19.8 (issue 27), built from its sdist with the venv's torch and no CUDA ops, unpacked without
# dependencies outside the venv (installed, accelerate and transformers would take their DeepSpeed paths):
# tests/test_checkpoint_consolidate.py writes real ZeRO-2/3 checkpoints on its CPU accelerator (gloo; it
# compiles one C++ op with g++ on first use) and compares thub's reader with DeepSpeed's zero_to_fp32.
DS_BUILD_OPS=0 python -m pip install --quiet --no-deps --no-build-isolation --upgrade \
    --target build/deepspeed-0.19.8 "deepspeed==0.19.8" "hjson==3.1.0" "msgpack==1.2.4" "einops==0.8.2"

# --- System packages (apt-get, as root or with passwordless sudo): a one-node SLURM with munge for
# tests/test_slurm_cluster.py (issue 10; a pytest session fixture starts it with scripts/slurm-up.sh),
# openssl for tests/test_kubeflow.py, shellcheck for tests/test_smoke_checker.py. As a normal user
# without sudo it installs nothing, says so with the command that does, and those tests skip.
bash scripts/system-packages.sh

# --- thub install (issue 8): tests/test_install_envs.py (marked slow + install) builds real
# virtual environments with `python -m venv` + pip from the package index; pip's wheel cache
# (~/.cache/pip or $PIP_CACHE_DIR) keeps reruns short, and torch comes from pip's local wheel.
# The tests point THUB_DATA_DIR at a temporary folder. Nothing to install: check venv/ensurepip.
python -c "import venv, ensurepip"

# Lint (issue 16): ruff's rules and line length from pyproject.toml, over the whole tree; a few seconds.
python -m pip install --quiet "ruff==0.17.6"
ruff check .
# Types (issue 16): mypy over core/thub and plugins/thub_builtins ([tool.mypy] in pyproject.toml; the ML
# stacks are not followed), ~10 s.
python -m pip install --quiet "mypy==2.4.1" "types-PyYAML==6.0.12.20261122"
mypy

# The README's test command (exit code 5 = no tests collected is a failure here, never a pass).
exec bash scripts/test.sh "$@"
