"""A switch that one thread turns on for the length of a `with` block, as
opgen's context managers do (unpartitioned(), xla_graph_only()): other
threads, and the code after the block, see it off again."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class ThreadFlag:
    def __init__(self) -> None:
        self._local = threading.local()

    def __bool__(self) -> bool:
        return getattr(self._local, "on", False)

    @contextlib.contextmanager
    def on(self) -> Iterator[None]:
        previous = bool(self)
        self._local.on = True
        try:
            yield
        finally:
            self._local.on = previous
