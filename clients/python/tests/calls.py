"""One call of each RPC, as a gateway makes it, for the sync and the asyncio client."""

from portcullis_client import ClearReason

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
    raise ValueError(rpc)


METHOD = {
    "Admit": "admit",
    "RecordAttempt": "record_attempt",
    "Verify": "verify",
    "ClearAttempts": "clear_attempts",
    "CheckPassword": "check_password",
}


def call_sync(client, rpc: str, **extra):
    return getattr(client, METHOD[rpc])(**kwargs(rpc, **extra))


async def call_async(client, rpc: str, **extra):
    return await getattr(client, METHOD[rpc])(**kwargs(rpc, **extra))
