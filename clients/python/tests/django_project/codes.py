"""The test project's one-time codes: ``CODES`` maps an identifier to its current code
(a stand-in for a TOTP secret or a mailed code)."""

CODES: dict[str, str] = {}


def check_code(identifier: str, code: str) -> bool:
    """Whether ``code`` is ``identifier``'s current code."""
    return CODES.get(identifier) == code
