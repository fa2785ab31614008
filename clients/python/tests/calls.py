"""One call of each RPC, as a gateway makes it, for the sync and the asyncio client."""

from portcullis_client import ClearReason, Flow

PASSWORD = "correct horse battery staple"
ARGON2 = "$argon2id$v=19$m=19456,t=2,p=1$9UYIR9ZIReF5HPUwKOtfHg$mXlw4iTpYMohjtsi7qzPygANdC7/hd1SbLoNsHPwwfQ"


def kwargs(rpc: str, **extra):
    if rpc == "Admit":
        return dict(realm="default", identifier="alice@example.com", **extra)
    if rpc == "RecordAttempt":
        return dict(realm="default", identifier="alice@example.com", client_key="203.0.113.7", **extra)
    if rpc == "Verify":
        return dict(
            realm="default",
            identifier="alice@example.com",
            password=PASSWORD,
            stored_hash=ARGON2,
            client_key="203.0.113.7",
            **extra,
        )
    if rpc == "ClearAttempts":
        return dict(realm="default", identifier="alice@example.com", reason=ClearReason.PASSWORD_VERIFIED, **extra)
    if rpc == "CheckPassword":
        return dict(realm="default", identifier="alice@example.com", password=PASSWORD, **extra)
    if rpc in FLOW_METHOD:
        # The flow's own method, as a gateway calls it; the mail flows take a client key.
        mail = rpc in ("password_reset", "verification_resend")
        return dict(realm="default", identifier="alice@example.com", **({"client_key": "203.0.113.7"} if mail else {}), **extra)
    if rpc == "ClearFlow":
        return dict(realm="default", identifier="alice@example.com", flow=Flow.SECOND_FACTOR, **extra)
    if rpc == "ConfirmDevice":
        return dict(
            realm="default", identifier="alice@example.com", challenge_token="ct-from-the-challenge", stored_hash=ARGON2, **extra
        )
    raise ValueError(rpc)


#: RecordFlowAttempt, by the table's flow name: each flow's own method.
FLOW_METHOD = {
    "second_factor": "second_factor_attempt",
    "recovery_code": "recovery_code_attempt",
    "password_reset": "password_reset_request",
    "verification_resend": "verification_resend_request",
}

METHOD = {
    "Admit": "admit",
    "RecordAttempt": "record_attempt",
    "Verify": "verify",
    "ClearAttempts": "clear_attempts",
    "CheckPassword": "check_password",
    "ClearFlow": "clear_flow",
    "ConfirmDevice": "confirm_device",
    **FLOW_METHOD,
}


def _which(rpc: str, flow: str | None) -> str:
    """A RecordFlowAttempt is called through its flow's method (second_factor by default)."""
    return (flow or "second_factor") if rpc == "RecordFlowAttempt" else rpc


def call_sync(client, rpc: str, flow: str | None = None, **extra):
    which = _which(rpc, flow)
    return getattr(client, METHOD[which])(**kwargs(which, **extra))


async def call_async(client, rpc: str, flow: str | None = None, **extra):
    which = _which(rpc, flow)
    return await getattr(client, METHOD[which])(**kwargs(which, **extra))
