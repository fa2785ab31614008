"""Fork safety: each process builds its own channels, and a forked child gets its locks
back unlocked.

A gateway under ``gunicorn --preload`` (or any pre-forking server) builds its client in
the master, before ``fork()``. grpcio does not support a channel used across
``fork()``: parent and child would share one TCP connection and one HTTP/2 state, and
the child may hang or crash. So a client never builds a channel when it is made; it
builds one on the first call to each endpoint, in the process that makes the call, and
records that process's id. A client called in another process (a forked child) builds
new channels there and never touches the parent's: it does not use them, close them or
let them be garbage-collected (closing or freeing a grpc channel in the child can act on
the connection the parent still uses), so they are kept, unused, for the life of the
child.

``GRPC_ENABLE_FORK_SUPPORT=1`` (with ``GRPC_POLL_STRATEGY=poll``) is grpc's own
alternative; the lazy channel does not need it and is the default because it works
without setting anything before the interpreter starts, with every poll strategy, and
for channels made after the fork (grpc's fork support only covers the blocking stack).

The locks of a client (its counters, the pool's health, the retry budget, its channels)
are :class:`Lock` objects: a child gets each one back unlocked, so a lock that some other
thread of the parent held at the moment of the fork (a thread the child does not have)
cannot deadlock the child.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import Generic, TypeVar

__all__ = ["ChannelSet", "Lock", "forked_with_open", "on_fork_probe"]


class Lock:
    """A ``threading.Lock`` that a forked child gets back unlocked. Use it in a ``with``
    block; it is not reentrant."""

    __slots__ = ("__weakref__", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        _LOCKS.add(self)

    def __enter__(self) -> Lock:
        self._lock.acquire()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._lock.release()

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()


_LOCKS: weakref.WeakSet[Lock] = weakref.WeakSet()

#: Objects a forked child must never free: the parent's channels (see the module's text).
_INHERITED: list[object] = []

#: Callables asked, in the parent at fork time, whether the child inherits something that
#: makes a part of grpc unusable in it; each answers with the name of that part or ``""``.
_AT_FORK_PROBES: list[Callable[[], str]] = []
_FORKED_WITH_OPEN: set[str] = set()
_PROBED_AT_FORK: set[str] = set()


def _before_fork() -> None:
    _PROBED_AT_FORK.clear()
    for probe in _AT_FORK_PROBES:
        try:
            name = probe()
        except Exception:  # noqa: BLE001 - a probe must never stop a fork
            name = "unknown"
        if name:
            _PROBED_AT_FORK.add(name)


def _after_fork_in_child() -> None:
    for lock in list(_LOCKS):
        lock._after_fork_in_child()
    _FORKED_WITH_OPEN.update(_PROBED_AT_FORK)


if hasattr(os, "register_at_fork"):  # POSIX; Windows has no fork
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def on_fork_probe(probe: Callable[[], str]) -> None:
    """Registers ``probe``, called in the parent just before every ``fork()``: a
    non-empty answer is remembered by the child (and its own children) for
    :func:`forked_with_open`."""
    _AT_FORK_PROBES.append(probe)


def forked_with_open(name: str) -> bool:
    """Whether this process, or one of its ancestors since the probe was registered, was
    forked while a probe answered ``name``."""
    return name in _FORKED_WITH_OPEN


Channel = TypeVar("Channel")
Stub = TypeVar("Stub")


class ChannelSet(Generic[Channel, Stub]):
    """One channel and stub per endpoint, built on first use in the calling process.
    ``build(index)`` makes endpoint ``index``'s channel and stub."""

    def __init__(self, count: int, build: Callable[[int], tuple[Channel, Stub]]) -> None:
        self._build = build
        self._lock = Lock()
        self._pid = os.getpid()
        self._channels: list[Channel | None] = [None] * count
        self._stubs: list[Stub | None] = [None] * count
        self._closed = False

    def stub(self, index: int) -> Stub:
        """Endpoint ``index``'s stub in this process. Raises ``RuntimeError`` once the
        set was closed (the client turns it into a deny)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("client closed")
            self._adopt_process()
            stub = self._stubs[index]
            if stub is None:
                channel, stub = self._build(index)
                self._channels[index] = channel
                self._stubs[index] = stub
            return stub

    def close(self) -> list[Channel]:
        """Marks the set closed and gives back this process's channels, for the caller to
        close. A parent's channels are never among them."""
        with self._lock:
            self._closed = True
            self._adopt_process()
            channels = [c for c in self._channels if c is not None]
            self._channels = [None] * len(self._channels)
            self._stubs = [None] * len(self._stubs)
        return channels

    def open_in_this_process(self) -> int:
        """How many channels this process built and has not closed."""
        with self._lock:
            if self._pid != os.getpid():
                return 0
            return sum(1 for c in self._channels if c is not None)

    def _adopt_process(self) -> None:
        """In a process other than the one that built the channels (a forked child):
        keep the parent's channels and stubs alive and unused, and start afresh."""
        pid = os.getpid()
        if self._pid == pid:
            return
        _INHERITED.append((self._channels, self._stubs))
        self._channels = [None] * len(self._channels)
        self._stubs = [None] * len(self._stubs)
        self._pid = pid
