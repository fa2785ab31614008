"""portcullis-client: the library a Python gateway embeds to call the Portcullis daemon.

Whatever goes wrong between gateway and daemon (a refused or reset connection, a
timeout, an open circuit breaker, an error status, an unknown or unspecified enum value)
arrives as ``Decision.DENY``; there is no third outcome. ``Answer.retryable`` only tells
a user interface whether to say "try again later" (503) instead of "wrong credentials"
(401). A ``verify`` whose password was right but needs a challenge or a password change
is a deny too, of its own ``Answer.kind`` (``AnswerKind.CHALLENGE``,
``AnswerKind.CHANGE_REQUIRED``). See README.md and the repository's docs/client.md.
"""

from ._aio import AsyncClient
from ._answer import (
    Answer,
    AnswerKind,
    ChallengeReason,
    ClearReason,
    Decision,
    Flow,
    PasswordCheck,
    PasswordCheckResult,
)
from ._config import ClientConfig, ConfigError, TlsConfig
from ._core import ClientStats
from ._sync import Client
from .client_key import client_key_from_forwarded

__all__ = [
    "Answer",
    "AnswerKind",
    "AsyncClient",
    "ChallengeReason",
    "ClearReason",
    "Client",
    "ClientConfig",
    "ClientStats",
    "ConfigError",
    "Decision",
    "Flow",
    "PasswordCheck",
    "PasswordCheckResult",
    "TlsConfig",
    "client_key_from_forwarded",
]

__version__ = "0.1.0"
