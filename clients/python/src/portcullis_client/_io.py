"""The only things the blocking and the asyncio client do differently: how a channel is
made, how one try is made and waited for, how a TLS diagnosis (``_tls.py``) is waited
for, and how a channel is closed.

``_aio.py`` calls the ``async_`` names; ``scripts/unasync.py`` writes ``_sync.py`` from
it with the plain names. Everything else the two clients do is the same text.

grpc.aio after ``fork()``: grpc.aio keeps one poller thread per process, which a forked
child does not have. A child forked while a grpc.aio channel of this library was alive
crashes or hangs on its first grpc.aio call, whoever's channel it is (grpc's fork
support does not cover grpc.aio). In such a child, ``async_channel`` builds a blocking
channel instead and ``async_unary`` runs each try in a worker thread: the same answers,
one thread per call in flight. A grpc.aio channel of another library, alive at the
fork, has the same effect and cannot be seen from here.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

import grpc
import grpc.aio

from . import _process

log = logging.getLogger("portcullis_client")

#: How long past a try's deadline the asyncio client waits for grpc's own deadline to
#: fire before it gives up on the try itself.
GRACE = 0.05

_AIO = "grpc.aio"
_AIO_CHANNELS: weakref.WeakSet[grpc.aio.Channel] = weakref.WeakSet()
_warned = False


def _aio_channels_alive() -> str:
    return _AIO if len(_AIO_CHANNELS) > 0 else ""


_process.on_fork_probe(_aio_channels_alive)


def channel(target: str, credentials: grpc.ChannelCredentials | None, options: list[tuple[str, Any]]) -> grpc.Channel:
    """A blocking channel to ``target`` (``host:port``), TLS when ``credentials``."""
    if credentials is not None:
        return grpc.secure_channel(target, credentials, options=options)
    return grpc.insecure_channel(target, options=options)


def async_channel(
    target: str, credentials: grpc.ChannelCredentials | None, options: list[tuple[str, Any]]
) -> grpc.aio.Channel | grpc.Channel:
    """An asyncio channel to ``target``; a blocking one in a process forked while a
    grpc.aio channel was alive (see the module's text)."""
    global _warned
    if _process.forked_with_open(_AIO):
        if not _warned:
            _warned = True
            log.warning(
                "portcullis: this process was forked while a grpc.aio channel was open; "
                "grpc.aio cannot be used here, so AsyncClient makes its calls on the blocking stack in worker threads"
            )
        return channel(target, credentials, options)
    if credentials is not None:
        made = grpc.aio.secure_channel(target, credentials, options=options)
    else:
        made = grpc.aio.insecure_channel(target, options=options)
    _AIO_CHANNELS.add(made)
    return made


def unary(rpc: Any, request: Any, timeout: float, metadata: tuple[tuple[str, str], ...]) -> Any:
    """One try of a unary call: the response, or ``grpc.RpcError``."""
    return rpc(request, timeout=timeout, metadata=metadata, wait_for_ready=False)


async def async_unary(rpc: Any, request: Any, timeout: float, metadata: tuple[tuple[str, str], ...]) -> Any:
    """One try of a unary call on the event loop: the response, ``grpc.RpcError``, or
    ``TimeoutError`` when grpc's own deadline did not fire within ``GRACE``."""
    if not isinstance(rpc, grpc.aio.UnaryUnaryMultiCallable):  # a blocking channel (see above)
        return await asyncio.to_thread(unary, rpc, request, timeout, metadata)
    return await asyncio.wait_for(
        rpc(request, timeout=timeout, metadata=metadata, wait_for_ready=False), timeout + GRACE
    )


def wait_diagnosis(diagnosis: Callable[[], None], wait: float) -> None:
    """Runs ``diagnosis`` (bounded by its own timeout) in a thread of its own and waits
    for it at most ``wait`` seconds; it records its result whenever it ends."""
    thread = threading.Thread(target=diagnosis, name="portcullis-tls-diagnosis", daemon=True)
    thread.start()
    thread.join(wait)


async def async_wait_diagnosis(diagnosis: Callable[[], None], wait: float) -> None:
    """``wait_diagnosis`` on the event loop: ``diagnosis`` runs in the loop's default
    executor, and is not cancelled when the wait is over."""
    future = asyncio.get_running_loop().run_in_executor(None, diagnosis)
    await asyncio.wait({future}, timeout=wait)


def close(made: grpc.Channel) -> None:
    """Closes a blocking channel."""
    made.close()


async def async_close(made: grpc.aio.Channel | grpc.Channel) -> None:
    """Closes a channel ``async_channel`` made."""
    if isinstance(made, grpc.aio.Channel):
        await made.close()
    else:
        made.close()
