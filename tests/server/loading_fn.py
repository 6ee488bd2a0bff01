"""The function the start-up and load tests serve: ``mlserve serve tests/server/loading_fn.py``.

``slow`` loads with a sync ``load()`` and ``later`` with an ``async def load()``, each
for ``LOAD_SECONDS`` (1.5 by default); ``flaky``'s load fails while the file named by
``FAIL_FILE`` exists, with ``RuntimeError: weights are corrupt``.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import mlserve

SECONDS = float(os.environ.get("LOAD_SECONDS", "1.5"))


class Slow(mlserve.V2ModelServer):
    def load(self) -> None:
        time.sleep(SECONDS)

    def predict(self, request: dict[str, Any]) -> Any:
        return ["slow"]


class Later(mlserve.V2ModelServer):
    async def load(self) -> None:
        await asyncio.sleep(SECONDS)

    def predict(self, request: dict[str, Any]) -> Any:
        return ["later"]


class Flaky(mlserve.V2ModelServer):
    loads = 0

    def load(self) -> None:
        fail = os.environ.get("FAIL_FILE")
        if fail and os.path.exists(fail):
            raise RuntimeError("weights are corrupt")
        Flaky.loads += 1
        self.generation = Flaky.loads

    def predict(self, request: dict[str, Any]) -> Any:
        return [self.generation]


fn = mlserve.new_function("loading")
fn.add_model("slow", class_name=Slow)
fn.add_model("later", class_name=Later)
fn.add_model("flaky", class_name=Flaky)
