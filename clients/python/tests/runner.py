"""One client of either kind behind one interface, for tests that do the same steps with
the blocking and the asyncio client: ``Runner("sync" | "asyncio", config)``, then
``runner.call("verify", **kwargs)``. The asyncio client runs on a loop of its own."""

from __future__ import annotations

import asyncio
from typing import Any

from portcullis_client import AsyncClient, Client, ClientConfig


class Runner:
    def __init__(self, kind: str, config: ClientConfig) -> None:
        self.kind = kind
        self._loop = asyncio.new_event_loop() if kind == "asyncio" else None
        self.client: Any = AsyncClient(config) if kind == "asyncio" else Client(config)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self.client, method)(*args, **kwargs)
        if self._loop is not None:
            return self._loop.run_until_complete(result)
        return result

    def close(self) -> None:
        if self._loop is not None:
            self._loop.run_until_complete(self.client.close())
            self._loop.close()
        else:
            self.client.close()
