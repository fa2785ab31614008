"""A gateway process for tests/test_daemon.py: makes Verify calls with the sync or the
asyncio client and prints one JSON line per answer.

    python gateway_proc.py sync|asyncio URL IDENTIFIER STORED_HASH CLIENT_KEY PASSWORD...
"""

import asyncio
import json
import sys

from portcullis_client import AsyncClient, Client, ClientConfig


def line(answer) -> str:
    return json.dumps({"decision": answer.decision.value, "retryable": answer.retryable, "step_up": answer.step_up})


def main() -> None:
    kind, url, identifier, stored_hash, client_key, *passwords = sys.argv[1:]
    config = ClientConfig(endpoints=(url,), call_timeout=5.0)
    login = dict(realm="default", identifier=identifier, stored_hash=stored_hash, client_key=client_key)
    if kind == "sync":
        with Client(config) as client:
            for pw in passwords:
                print(line(client.verify(password=pw, **login)), flush=True)
    else:

        async def run() -> None:
            async with AsyncClient(config) as client:
                for pw in passwords:
                    print(line(await client.verify(password=pw, **login)), flush=True)

        asyncio.run(run())


if __name__ == "__main__":
    main()
