"""Progress from the metrics stream: a rich bar on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
from typing import Any

from thub.ui.output import console


def _describe(line: dict[str, Any], compact: bool = False) -> str:
    parts = []
    for key in ("loss", "reward", "eval_loss", "learning_rate"):
        value = line.get(key)
        if isinstance(value, (int, float)):
            label = "lr" if compact and key == "learning_rate" else key.replace("_", " ")
            parts.append(f"{label} {value:.4g}")
    speed = line.get("tokens_per_second")
    if isinstance(speed, (int, float)):
        parts.append(f"{speed:,.0f} tokens/s")  # 11,290 tokens/s, never 1.129e+04
    return (" " if compact else "  ").join(parts)


#: Cells of the live bar: readable, and room for the ETA and metrics on 80 columns.
BAR_WIDTH = 16


class Progress:
    """Shows step/max_steps, loss (or reward), tokens/s and ETA on stderr."""

    def __init__(self, enabled: bool = True, *, console: Any = None, live: bool | None = None) -> None:
        self.enabled = enabled
        self.live = enabled and (sys.stderr.isatty() if live is None else live)
        self._console = console  # default: thub's stderr console
        self._bar: Any = None
        self._task: Any = None
        self._first: dict[str, Any] | None = None
        self._last: dict[str, Any] | None = None

    def __enter__(self) -> Progress:
        if self.live:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as Bar
            from rich.table import Column

            # The bar keeps BAR_WIDTH cells and the ETA stays whole on an 80-column terminal: the
            # metrics text (last) is what gets cut (see _fit).
            self._bar = Bar(TextColumn("[bold]training"), BarColumn(bar_width=BAR_WIDTH), MofNCompleteColumn(),
                            TextColumn("eta"), TimeRemainingColumn(),
                            TextColumn("{task.fields[info]}", table_column=Column(no_wrap=True)),
                            console=self._console or console())
            self._bar.__enter__()
            self._task = self._bar.add_task("train", total=None, info="starting")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
            self._bar = None

    def kept(self, lines: list[dict[str, Any]]) -> None:
        """Say once which steps an earlier attempt trained (a resumed run keeps their lines); the
        bar starts after them, and they are never shown as this attempt's progress."""
        if not self.enabled or not lines:
            return
        first, last = lines[0].get("step"), lines[-1].get("step")
        steps = f"step {last}" if first == last else f"steps {first}-{last}"
        console().print(f"kept {steps} from the earlier attempt", markup=False, highlight=False)
        if self._bar is not None:
            self._bar.update(self._task, completed=last or 0, total=lines[-1].get("max_steps"), info="resuming")

    def update(self, line: dict[str, Any]) -> None:
        if self._first is None:
            self._first = line
        self._last = line
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(self._task, completed=line.get("step", 0), total=line.get("max_steps"),
                             info=self._fit(_describe(line, compact=True), line))
        else:
            console().print(f"step {line.get('step')}/{line.get('max_steps')}  {_describe(line)}", markup=False)

    def _fit(self, info: str, line: dict[str, Any]) -> str:
        """Cut the metrics text so the bar line fits the terminal (the bar and ETA stay whole)."""
        steps = len(str(line.get("max_steps") or line.get("step") or 0))
        # "training " + bar + " " + "  3/32" + " eta " + "-:--:--" + " ", as rich lays them out
        fixed = len("training ") + BAR_WIDTH + 1 + (2 * steps + 2) + len(" eta ") + 7 + 1
        room = max(0, self._bar.console.width - fixed)
        return info if len(info) <= room else info[:max(0, room - 1)] + "…"

    def _trend(self) -> str | None:
        """``loss 6.62 -> 1.86 over steps 1-32`` (or reward), from the first and last lines seen."""
        if not self._first or not self._last:
            return None
        for key in ("loss", "reward"):
            a, b = self._first.get(key), self._last.get(key)
            if isinstance(a, (int, float)) and isinstance(b, (int, float)):
                return f"{key} {a:.4g} -> {b:.4g} over steps {self._first.get('step')}-{self._last.get('step')}"
        return None

    def finish(self, result: dict[str, Any]) -> None:
        if not self.enabled:
            return
        if (result.get("built") or {}).get("refused"):
            from thub.runner.built import summary_line

            # stopped before step 1 as bad input: the caller reports it (exit 2) and removes the run
            console().print(summary_line(result["built"]), markup=False, highlight=False)
            return
        status = result["status"]
        colour = {"succeeded": "green", "interrupted": "yellow"}.get(status, "red")
        console().print(f"[{colour}]run {status}[/{colour}] in {result.get('wall_seconds', 0):.1f} s: "
                        f"{result['run_dir']}")
        trend = self._trend()
        if trend:
            console().print(trend, markup=False)
        if result.get("built"):
            from thub.runner.built import summary_line

            console().print(summary_line(result["built"]), markup=False, highlight=False)
        if result.get("final_checkpoint"):
            console().print(f"final checkpoint: {result['final_checkpoint']}")
        for warning in result.get("warnings") or []:
            console().print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
        if status == "failed":
            console().print("[red]root cause:[/red]")
            for line in result.get("root_cause") or [result.get("error", "")]:
                console().print(f"  {line}", markup=False)
            console().print(f"full log: {result['log']}")
        elif status == "interrupted":
            if result.get("reason"):
                console().print(result["reason"], markup=False)
            from pathlib import Path

            from thub.surface import again, option

            if (Path(result["run_dir"]) / "thub_run.json").exists():  # else there is nothing to resume
                console().print(f"continue with {again()} and {option('resume')}", markup=False)
