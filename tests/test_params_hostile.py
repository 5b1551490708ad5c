"""Hostile parameter files and values (issue 23 items 1, 4, 5, 6): refused at resolution with
file, line and field, exit 2, never a traceback or a late failure in the child."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from thub.config import yamlfile
from thub.config.resolve import resolve
from thub.errors import UsageError

# --- item 4: YAML alias bombs ----------------------------------------------------------------

# nine levels of nine aliases: 9**9 (387 million) values from 400 bytes
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8))


def _counting_children(monkeypatch: pytest.MonkeyPatch) -> dict[int, int]:
    """How often the walk asks for each node's children (by node id)."""
    counts: dict[int, int] = {}
    children = yamlfile._children

    def counted(node: yaml.Node) -> list[yaml.Node]:
        counts[id(node)] = counts.get(id(node), 0) + 1
        return children(node)

    monkeypatch.setattr(yamlfile, "_children", counted)
    return counts


def test_an_alias_bomb_is_refused_and_each_node_visited_once(thub_registry, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    counts = _counting_children(monkeypatch)
    config = tmp_path / "bomb.yaml"
    config.write_text(BOMB)
    with pytest.raises(UsageError, match=rf"{config}:\d+: aliases expand this config file to more than "
                                         r"1,000,000 values"):
        resolve(thub_registry, "sft", backend="trl", config_file=config, environ={})
    assert counts and set(counts.values()) == {1}  # memoised: never the same node twice
    assert len(counts) < 200  # the distinct nodes of the file, not their expansion


def test_a_bomb_under_a_valid_key_is_refused_before_any_value_is_built(thub_registry, tmp_path: Path) -> None:
    config = tmp_path / "kwargs.yaml"
    config.write_text("model_path: m\ndata_path: d.jsonl\nckpt_output_dir: o\nlr_scheduler_kwargs:\n"
                      + "".join("  " + line + "\n" for line in BOMB.splitlines()))
    with pytest.raises(UsageError, match=rf"{config}:\d+: aliases expand"):
        resolve(thub_registry, "sft", backend="trl", config_file=config, environ={})


def test_a_recursive_alias_is_refused(thub_registry, tmp_path: Path) -> None:
    config = tmp_path / "loop.yaml"
    config.write_text("model_path: m\nlr_scheduler_kwargs: &k\n  self: *k\n")
    with pytest.raises(UsageError, match=rf"{config}:2: a recursive alias"):
        resolve(thub_registry, "sft", backend="trl", config_file=config, environ={})


def test_modest_aliases_still_work_and_duplicates_are_still_found(thub_registry, tmp_path: Path) -> None:
    config = tmp_path / "ok.yaml"
    config.write_text("model_path: m\ndata_path: d.jsonl\nckpt_output_dir: o\n"
                      "lr_scheduler_kwargs: &k {min_lr: 1}\nmix_probabilities: [0.5, 0.5]\n"
                      "datasets: [{path: a.jsonl, extra: *k}]\n")
    resolved = resolve(thub_registry, "sft", backend="trl", config_file=config, environ={})
    assert resolved.values()["lr_scheduler_kwargs"] == {"min_lr": 1}
    again = tmp_path / "dup.yaml"
    again.write_text("x: &x {a: 1}\ny: [*x, *x, {b: 1, b: 2}]\n")
    with pytest.raises(UsageError, match=rf"{again}:2: duplicate key 'b'"):
        yamlfile.load_yaml(again)


# --- item 1: `~` is expanded once, in resolution, for every path parameter, from every source ------

PATHS = ("model_path", "data_path", "ckpt_output_dir", "data_output_dir", "tensorboard_log_dir", "export")


def test_every_path_parameter_is_declared_as_one() -> None:
    from thub.config.fields import param_infos
    from thub.params import BaseParams

    declared = {name for name, info in param_infos(BaseParams).items() if info.is_path}
    assert declared == {*PATHS, "datasets"}


@pytest.mark.parametrize("source", ["config", "env", "flag", "set"])
def test_tilde_is_expanded_from_every_source(source: str, thub_registry, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    values = {name: f"~/{name}" for name in PATHS} | {"datasets": ["~/extra.jsonl:prob=0.5"]}
    kwargs: dict = {"environ": {}}
    if source == "config":
        config = tmp_path / "c.yaml"
        config.write_text("".join(f"{k}: {v}\n" for k, v in values.items() if k != "datasets")
                          + "datasets: [{path: ~/extra.jsonl}]\n")
        kwargs["config_file"] = config
    elif source == "env":
        kwargs["environ"] = {f"THUB_{k.upper()}": (v if isinstance(v, str) else v[0]) for k, v in values.items()}
    elif source == "flag":
        kwargs["flags"] = values
    else:
        kwargs["overrides"] = [f"{k}={v if isinstance(v, str) else v[0]}" for k, v in values.items()]
    resolved = resolve(thub_registry, "sft", backend="trl", allow_ignored=True, **kwargs)
    home = str(tmp_path / "home")
    got = resolved.values()
    assert {name: got[name] for name in PATHS} == {name: f"{home}/{name}" for name in PATHS}
    first = got["datasets"][0]
    assert (first["path"] if isinstance(first, dict) else first).startswith(f"{home}/extra.jsonl")


def test_tilde_is_expanded_in_the_python_api_and_a_literal_dollar_is_kept(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from thub import api

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SCRATCH", "/scratch")
    (tmp_path / "d.jsonl").write_text((Path(__file__).parents[1] / "examples" / "data" / "chat.jsonl").read_text())
    plan = api.dry_run("sft", backend="trl", model_path="~/m", data_path="~/d.jsonl",
                       ckpt_output_dir="~/runs/$SCRATCH")
    parameters = plan["parameters"]
    assert parameters["model_path"]["value"] == f"{tmp_path}/m"
    assert parameters["data_path"]["value"] == f"{tmp_path}/d.jsonl"
    assert parameters["ckpt_output_dir"]["value"] == f"{tmp_path}/runs/$SCRATCH"  # no $VAR expansion: documented


# --- item 5: numeric bounds the libraries enforce, declared in the fields ---------------------

# numeric fields that rightly have no bound, with why (none today)
UNBOUNDED: dict[str, str] = {}


def _numeric(annotation: object) -> bool:
    import typing

    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Annotated:
        return _numeric(args[0])
    if args:
        return any(_numeric(a) for a in args)
    return annotation in (int, float)


def _declares_bounds(field: object) -> bool:
    import typing

    import annotated_types

    def bounded(metadata: object) -> bool:  # Ge/Gt/Le/Lt, directly or in an Annotated Field(...)
        return any(isinstance(m, (annotated_types.Ge, annotated_types.Gt, annotated_types.Le, annotated_types.Lt))
                   or bounded(getattr(m, "metadata", ())) for m in metadata)  # type: ignore[attr-defined]

    def walk(annotation: object) -> bool:
        if typing.get_origin(annotation) is typing.Annotated:
            return bounded(typing.get_args(annotation)[1:]) or walk(typing.get_args(annotation)[0])
        return any(walk(a) for a in typing.get_args(annotation))

    return bounded(field.metadata) or walk(field.annotation)  # type: ignore[attr-defined]


def test_every_numeric_parameter_declares_its_bounds(thub_registry) -> None:
    checked = []
    for spec in thub_registry.algorithms.values():
        model = spec.load_parameters()
        for name, field in model.model_fields.items():
            if not _numeric(field.annotation) or name in UNBOUNDED:
                continue
            checked.append(name)
            assert _declares_bounds(field), f"{spec.name}.{name} ({field.annotation}) declares no bounds"
    assert {"seed", "nproc_per_node", "mix_probabilities", "lora_r", "temperature"} <= set(checked)


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("nproc_per_node", 0, "greater than or equal to 1"), ("nproc_per_node", -1, "greater than or equal to 1"),
    ("seed", -1, "greater than or equal to 0"), ("seed", 2**32, "less than 4294967296"),
    ("mix_probabilities", [-0.5, 1.5], "greater than or equal to 0"),
])
def test_out_of_bounds_numbers_are_usage_errors(name: str, value: object, expected: str, tmp_path: Path) -> None:
    from thub import api

    extra = {"datasets": [str(tmp_path / "b.jsonl")]} if name == "mix_probabilities" else {}
    with pytest.raises(UsageError, match=rf"{name}.*{expected}"):
        api.dry_run("sft", backend="trl", model_path="m", data_path="d.jsonl", ckpt_output_dir=str(tmp_path / "o"),
                    **{name: value}, **extra)
    assert not (tmp_path / "o").exists()


def test_cli_nproc_zero_is_exit_2_without_traceback(tmp_path: Path, demo_data: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "thub", "train", "sft", "--backend", "trl", "--model-path", "m",
                           "--data-path", str(demo_data / "chat.jsonl"), "--ckpt-output-dir", str(tmp_path / "o"),
                           "--nproc-per-node", "0", "--dry-run"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "nproc_per_node" in done.stderr, done.stderr
    assert not (tmp_path / "o").exists()


# --- item 6: a NUL byte in any string is refused at validation --------------------------------

@pytest.mark.parametrize("name", ["ckpt_output_dir", "data_path", "wandb_project", "datasets", "lr_scheduler_kwargs"])
def test_a_nul_byte_in_any_string_is_refused(name: str, thub_registry, tmp_path: Path) -> None:
    values = {"ckpt_output_dir": "o\\0x", "data_path": "d\\0.jsonl", "wandb_project": "p\\0",
              "datasets": "[{path: \"a\\0.jsonl\"}]", "lr_scheduler_kwargs": "{k: \"v\\0\"}"}
    config = tmp_path / "nul.yaml"
    base = {"model_path": "m", "data_path": "d.jsonl", "ckpt_output_dir": "o"}
    lines = [f"{k}: {v}" for k, v in base.items() if k != name]
    text = values[name] if name in ("datasets", "lr_scheduler_kwargs") else f"\"{values[name]}\""
    config.write_text("\n".join([*lines, f"{name}: {text}"]) + "\n")
    with pytest.raises(UsageError, match=rf"{name} \(from {config}:\d\): .*NUL byte"):
        resolve(thub_registry, "sft", backend="trl", config_file=config, environ={}, allow_ignored=True)


def test_a_nul_byte_from_the_python_api_is_refused(tmp_path: Path, demo_data: Path) -> None:
    from thub import api

    with pytest.raises(UsageError, match=r"ckpt_output_dir .*NUL byte"):
        api.train("sft", backend="trl", model_path="m", data_path=str(demo_data / "chat.jsonl"),
                  ckpt_output_dir=f"{tmp_path}/o\0x")
