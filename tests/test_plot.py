"""thub plot and run history: metric sources, x-axis by step, images, sparklines, JSON; real TRL runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from thub.cli.history import history
from thub.cli.main import cli
from thub.insight.plotting import ema, find_metrics, load_series, sparkline

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def _fake_run(path: Path, algorithm: str, lines: list[dict], lr: float = 1e-5, status: str = "succeeded") -> Path:
    path.mkdir(parents=True)
    (path / "thub_run.json").write_text(json.dumps({
        "schema_version": 1, "algorithm": algorithm, "backend": "trl", "created": 1000.0,
        "parameters": {"learning_rate": {"value": lr, "source": "flag --learning-rate"},
                       "seed": {"value": 42, "source": "default"}},
        "versions": {"thub": "0.1.0", "library": {"name": "trl", "version": "1.16.0"}, "python": "3.11"},
        "command_line": ["thub", "train", algorithm],
    }))
    (path / "training_metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (path / "result.json").write_text(json.dumps({"status": status, "wall_seconds": 12.5, "final_checkpoint": None}))
    return path


def _lines(n: int, key: str = "loss", start: float = 5.0, every: int = 1) -> list[dict]:
    return [{"step": (i + 1) * every, "max_steps": n * every, key: start - 0.1 * i, "learning_rate": 1e-5,
             "epoch": i / n, "timestamp": 1000.0 + 2 * i, "num_tokens": 100.0 * (i + 1)} for i in range(n)]


def test_x_is_the_step_not_the_row(tmp_path: Path) -> None:
    run = _fake_run(tmp_path / "a", "sft", _lines(5, every=10))
    [series] = load_series([str(run)])
    assert series.xs == [10, 20, 30, 40, 50] and series.metric == "loss"
    assert series.label == "a (sft/trl)"
    [tokens] = load_series([str(run)], x_axis="tokens")
    assert tokens.xs == [100, 200, 300, 400, 500]
    [timed] = load_series([str(run)], x_axis="time")
    assert timed.xs == [0, 2, 4, 6, 8]


def test_grpo_defaults_to_reward(tmp_path: Path) -> None:
    run = _fake_run(tmp_path / "g", "grpo", [{**line, "loss": 0.0} for line in _lines(4, key="reward", start=0.1)])
    [series] = load_series([str(run)])
    assert series.metric == "reward" and series.key == "reward"
    assert series.summary()["best"] == series.ys[0]  # reward: higher is better


def test_resumed_run_keeps_last_value_per_step(tmp_path: Path) -> None:
    lines = _lines(3) + [{"step": 3, "loss": 1.0}, {"step": 4, "loss": 0.9}]
    [series] = load_series([str(_fake_run(tmp_path / "r", "sft", lines))])
    assert series.xs == [1, 2, 3, 4] and series.ys[2] == 1.0 and series.notes


def test_trainer_state_and_instructlab_files(tmp_path: Path) -> None:
    trl = tmp_path / "trl"
    for step in (2, 4):
        (trl / f"checkpoint-{step}").mkdir(parents=True)
        history_rows = [{"step": s, "loss": 3.0 - s / 10}
                        for s in range(1, step + 1)] + [{"step": step, "train_runtime": 1}]
        (trl / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"log_history": history_rows}))
    rows, source = find_metrics(trl)
    assert source.parent.name == "checkpoint-4"
    [series] = load_series([str(trl)])
    assert series.xs == [1, 2, 3, 4]
    il = tmp_path / "il"
    il.mkdir()
    (il / "training_params_and_metrics_global0.jsonl").write_text(
        json.dumps({"num_gpus": 1}) + "\n"
        + "".join(json.dumps({"step": s, "avg_loss": 2.0 / s}) + "\n" for s in (1, 2, 3)))
    [series] = load_series([str(il)])
    assert series.key == "avg_loss" and series.xs == [1, 2, 3]


def test_errors_are_usage_errors(tmp_path: Path) -> None:
    code, _, err = _run("plot", str(tmp_path / "missing"))
    assert code == 2 and "no such run directory" in err
    (tmp_path / "empty").mkdir()
    code, _, err = _run("plot", str(tmp_path / "empty"))
    assert code == 2 and "no metrics found" in err
    run = _fake_run(tmp_path / "a", "sft", _lines(3))
    code, _, err = _run("plot", str(run), "--metric", "perplexity")
    assert code == 2 and "no 'perplexity' values" in err
    code, _, err = _run("plot", str(run), "--label", "x", "--label", "y")
    assert code == 2 and "one per run" in err
    code, _, err = _run("plot", str(run), "--ema", "1.5")
    assert code == 2


def test_ema_and_sparkline_are_stable() -> None:
    assert ema([1.0, 3.0, 3.0], 0.5) == [1.0, 2.0, 2.5]
    assert sparkline([5, 4, 3, 2, 1, 0, 1]) == "█▇▅▄▂▁▂"
    assert sparkline([1.0] * 3) == "▅▅▅"
    assert len(sparkline([float(i) for i in range(1000)], width=40)) == 40


def test_text_and_json_summary(tmp_path: Path) -> None:
    a = _fake_run(tmp_path / "a", "sft", _lines(6))
    b = _fake_run(tmp_path / "b", "sft", _lines(6, start=6.0), lr=2e-5)
    code, out, err = _run("plot", str(a), str(b), "--ascii", "--ema", "0.5")
    assert code == 0 and err == ""  # the summary is a report: stdout
    assert "a (sft/trl)" in out and "b (sft/trl)" in out and "█" in out
    code, out, _ = _run("plot", str(a), str(b), "--json", "--label", "first", "--label", "second")
    data = json.loads(out)
    assert [r["label"] for r in data["runs"]] == ["first", "second"]
    assert data["runs"][0]["x"] == [1, 2, 3, 4, 5, 6] and data["output"] is None


def test_png_needs_matplotlib_or_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _fake_run(tmp_path / "a", "sft", _lines(3))
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # simulate a missing install
    code, out, err = _run("plot", str(run), "-o", str(tmp_path / "x.png"))
    assert code == 1 and "matplotlib is not installed" in err and "pip install matplotlib" in err
    assert "a (sft/trl)" in out  # the text summary is still shown
    assert not (tmp_path / "x.png").exists()


def test_bad_suffix(tmp_path: Path) -> None:
    run = _fake_run(tmp_path / "a", "sft", _lines(3))
    code, _, err = _run("plot", str(run), "-o", str(tmp_path / "x.jpg"))
    assert code == 2 and ".png, .svg or .pdf" in err


def test_png_and_svg_images(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    image = pytest.importorskip("matplotlib.image")
    a = _fake_run(tmp_path / "a", "sft", _lines(30))
    b = _fake_run(tmp_path / "b", "grpo", _lines(30, key="reward", start=0.0))
    png = tmp_path / "out" / "loss.png"
    code, _, err = _run("plot", str(a), str(b), "--metric", "learning_rate", "-o", str(png), "--ema", "0.2")
    assert code == 0, err
    pixels = image.imread(png)
    assert pixels.shape[:2] == (450, 800)
    svg = tmp_path / "loss.svg"
    assert _run("plot", str(a), "-o", str(svg))[0] == 0
    assert svg.read_text().lstrip().startswith("<?xml") and "<svg" in svg.read_text()


def test_history_list_show_diff(tmp_path: Path) -> None:
    _fake_run(tmp_path / "runs" / "a", "sft", _lines(4))
    _fake_run(tmp_path / "runs" / "nested" / "b", "grpo", _lines(4, key="reward", start=0.0), lr=2e-5, status="failed")
    runner = CliRunner()
    result = runner.invoke(history, ["list", str(tmp_path / "runs"), "--json"])
    runs = {r["name"]: r for r in json.loads(result.stdout)["runs"]}
    assert set(runs) == {"a", "b"}
    assert runs["a"]["status"] == "succeeded" and runs["a"]["final_metric"] == "loss" and runs["a"]["step"] == 4
    assert runs["b"]["status"] == "failed" and runs["b"]["final_metric"] == "reward"
    assert runs["a"]["duration_seconds"] == 12.5
    result = runner.invoke(history, ["list", str(tmp_path / "runs")])
    assert result.exit_code == 0 and "succeeded" in result.stdout
    result = runner.invoke(history, ["show", str(tmp_path / "runs" / "a"), "--json"])
    shown = json.loads(result.stdout)
    assert shown["parameters"]["learning_rate"]["source"] == "flag --learning-rate"
    result = runner.invoke(history,
                           ["diff", str(tmp_path / "runs" / "a"), str(tmp_path / "runs" / "nested" / "b"), "--json"])
    changes = json.loads(result.stdout)
    assert [p["name"] for p in changes["parameters"]] == ["learning_rate"]
    assert changes["run"][0] == {"name": "algorithm", "a": "sft", "b": "grpo"}
    result = runner.invoke(history, ["show", str(tmp_path)])
    assert result.exit_code == 2 and "not a thub run" in result.stderr


# --- real runs of the trl backend -----------------------------------------------------------------

@pytest.fixture(scope="module")
def real_runs(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> list[Path]:
    base = tmp_path_factory.mktemp("runs")
    runs = []
    for name, lr in (("lr-5e-3", "5e-3"), ("lr-1e-3", "1e-3")):
        out = base / name
        done = subprocess.run(
            [sys.executable, "-m", "thub", "train", "sft", "--config", str(ROOT / "examples/configs/sft.yaml"),
             "--ckpt-output-dir", str(out), "--max-steps", "4", "--learning-rate", lr,
             "--no-save-final-checkpoint", "--set", f"model_path={tiny_model}",
             "--set", f"data_path={ROOT / 'examples/data/chat.jsonl'}"],
            capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert done.returncode == 0, done.stderr[-2000:]
        runs.append(out)
    return runs


@pytest.mark.slow
def test_plot_two_real_trl_runs(real_runs: list[Path], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    image = pytest.importorskip("matplotlib.image")
    png = tmp_path / "demo.png"
    code, out, err = _run("plot", *map(str, real_runs), "-o", str(png), "--json")
    assert code == 0, err
    data = json.loads(out)
    assert [r["x"] for r in data["runs"]] == [[1, 2, 3, 4], [1, 2, 3, 4]]
    assert data["runs"][0]["label"] == "lr-5e-3 (sft/trl)"
    assert image.imread(png).shape[:2] == (450, 800)
    code, out, err = _run("plot", *map(str, real_runs), "--ascii")
    assert code == 0 and "lr-1e-3 (sft/trl)" in out


@pytest.mark.slow
def test_history_of_real_trl_runs(real_runs: list[Path]) -> None:
    result = CliRunner().invoke(history, ["list", str(real_runs[0].parent), "--json"])
    runs = json.loads(result.stdout)["runs"]
    assert {r["name"] for r in runs} == {"lr-5e-3", "lr-1e-3"}
    assert all(r["status"] == "succeeded" and r["step"] == 4 and r["algorithm"] == "sft" for r in runs)
    result = CliRunner().invoke(history, ["diff", *map(str, real_runs), "--json"])
    names = {p["name"] for p in json.loads(result.stdout)["parameters"]}
    assert names == {"learning_rate", "ckpt_output_dir"}
