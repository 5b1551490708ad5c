"""Following a library's own output files while it trains, for backends that convert them."""

from __future__ import annotations

import threading
from typing import Self


class PollingFollower:
    """Calls :meth:`poll` every ``interval`` seconds in a daemon thread.

    Subclasses implement ``poll`` (read new metrics lines, find new checkpoints). :meth:`stop`
    ends the thread and polls once more, so nothing written before the end is lost.
    """

    def __init__(self, interval: float, name: str) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def poll(self) -> None:
        raise NotImplementedError

    def start(self) -> Self:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self.poll()
