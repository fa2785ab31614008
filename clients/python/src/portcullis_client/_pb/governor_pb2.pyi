from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Decision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DECISION_UNSPECIFIED: _ClassVar[Decision]
    DECISION_ALLOW: _ClassVar[Decision]
    DECISION_DENY: _ClassVar[Decision]

class Verdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VERDICT_UNSPECIFIED: _ClassVar[Verdict]
    VERDICT_ACCEPT: _ClassVar[Verdict]
    VERDICT_REJECT: _ClassVar[Verdict]
    VERDICT_CHALLENGE: _ClassVar[Verdict]
    VERDICT_CHANGE_REQUIRED: _ClassVar[Verdict]

class ChallengeReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHALLENGE_REASON_UNSPECIFIED: _ClassVar[ChallengeReason]
    CHALLENGE_REASON_NEW_DEVICE: _ClassVar[ChallengeReason]

class ClearReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLEAR_REASON_UNSPECIFIED: _ClassVar[ClearReason]
    CLEAR_REASON_PASSWORD_VERIFIED: _ClassVar[ClearReason]
    CLEAR_REASON_PASSWORD_RESET_COMPLETED: _ClassVar[ClearReason]

class Flow(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FLOW_UNSPECIFIED: _ClassVar[Flow]
    FLOW_SECOND_FACTOR: _ClassVar[Flow]
    FLOW_RECOVERY_CODE: _ClassVar[Flow]
    FLOW_PASSWORD_RESET: _ClassVar[Flow]
    FLOW_VERIFICATION_RESEND: _ClassVar[Flow]

class PasswordCheckReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PASSWORD_CHECK_REASON_UNSPECIFIED: _ClassVar[PasswordCheckReason]
    PASSWORD_CHECK_REASON_OK: _ClassVar[PasswordCheckReason]
    PASSWORD_CHECK_REASON_BREACHED: _ClassVar[PasswordCheckReason]
    PASSWORD_CHECK_REASON_CONTEXT_WORD: _ClassVar[PasswordCheckReason]
DECISION_UNSPECIFIED: Decision
DECISION_ALLOW: Decision
DECISION_DENY: Decision
VERDICT_UNSPECIFIED: Verdict
VERDICT_ACCEPT: Verdict
VERDICT_REJECT: Verdict
VERDICT_CHALLENGE: Verdict
VERDICT_CHANGE_REQUIRED: Verdict
CHALLENGE_REASON_UNSPECIFIED: ChallengeReason
CHALLENGE_REASON_NEW_DEVICE: ChallengeReason
CLEAR_REASON_UNSPECIFIED: ClearReason
CLEAR_REASON_PASSWORD_VERIFIED: ClearReason
CLEAR_REASON_PASSWORD_RESET_COMPLETED: ClearReason
FLOW_UNSPECIFIED: Flow
FLOW_SECOND_FACTOR: Flow
FLOW_RECOVERY_CODE: Flow
FLOW_PASSWORD_RESET: Flow
FLOW_VERIFICATION_RESEND: Flow
PASSWORD_CHECK_REASON_UNSPECIFIED: PasswordCheckReason
PASSWORD_CHECK_REASON_OK: PasswordCheckReason
PASSWORD_CHECK_REASON_BREACHED: PasswordCheckReason
PASSWORD_CHECK_REASON_CONTEXT_WORD: PasswordCheckReason

class Account(_message.Message):
    __slots__ = ("realm", "identifier")
    REALM_FIELD_NUMBER: _ClassVar[int]
    IDENTIFIER_FIELD_NUMBER: _ClassVar[int]
    realm: str
    identifier: str
    def __init__(self, realm: _Optional[str] = ..., identifier: _Optional[str] = ...) -> None: ...

class AdmitRequest(_message.Message):
    __slots__ = ("account",)
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    account: Account
    def __init__(self, account: _Optional[_Union[Account, _Mapping]] = ...) -> None: ...

class AdmitResponse(_message.Message):
    __slots__ = ("decision",)
    DECISION_FIELD_NUMBER: _ClassVar[int]
    decision: Decision
    def __init__(self, decision: _Optional[_Union[Decision, str]] = ...) -> None: ...

class RecordAttemptRequest(_message.Message):
    __slots__ = ("account", "attempt_id", "client_key")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_KEY_FIELD_NUMBER: _ClassVar[int]
    account: Account
    attempt_id: str
    client_key: str
    def __init__(self, account: _Optional[_Union[Account, _Mapping]] = ..., attempt_id: _Optional[str] = ..., client_key: _Optional[str] = ...) -> None: ...

class RecordAttemptResponse(_message.Message):
    __slots__ = ("decision", "step_up", "network_throttled", "lockout_started", "ceiling_reached")
    DECISION_FIELD_NUMBER: _ClassVar[int]
    STEP_UP_FIELD_NUMBER: _ClassVar[int]
    NETWORK_THROTTLED_FIELD_NUMBER: _ClassVar[int]
    LOCKOUT_STARTED_FIELD_NUMBER: _ClassVar[int]
    CEILING_REACHED_FIELD_NUMBER: _ClassVar[int]
    decision: Decision
    step_up: bool
    network_throttled: bool
    lockout_started: bool
    ceiling_reached: bool
    def __init__(self, decision: _Optional[_Union[Decision, str]] = ..., step_up: _Optional[bool] = ..., network_throttled: _Optional[bool] = ..., lockout_started: _Optional[bool] = ..., ceiling_reached: _Optional[bool] = ...) -> None: ...

class VerifyRequest(_message.Message):
    __slots__ = ("account", "password", "stored_hash", "client_key", "attempt_id", "device_token")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_FIELD_NUMBER: _ClassVar[int]
    STORED_HASH_FIELD_NUMBER: _ClassVar[int]
    CLIENT_KEY_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    DEVICE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    account: Account
    password: bytes
    stored_hash: str
    client_key: str
    attempt_id: str
    device_token: str
    def __init__(self, account: _Optional[_Union[Account, _Mapping]] = ..., password: _Optional[bytes] = ..., stored_hash: _Optional[str] = ..., client_key: _Optional[str] = ..., attempt_id: _Optional[str] = ..., device_token: _Optional[str] = ...) -> None: ...

class VerifyResponse(_message.Message):
    __slots__ = ("verdict", "needs_rehash", "device_token", "spray_suspected", "step_up", "network_throttled", "password_breached", "challenge_reason", "challenge_token", "lockout_started", "ceiling_reached")
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    NEEDS_REHASH_FIELD_NUMBER: _ClassVar[int]
    DEVICE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SPRAY_SUSPECTED_FIELD_NUMBER: _ClassVar[int]
    STEP_UP_FIELD_NUMBER: _ClassVar[int]
    NETWORK_THROTTLED_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_BREACHED_FIELD_NUMBER: _ClassVar[int]
    CHALLENGE_REASON_FIELD_NUMBER: _ClassVar[int]
    CHALLENGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LOCKOUT_STARTED_FIELD_NUMBER: _ClassVar[int]
    CEILING_REACHED_FIELD_NUMBER: _ClassVar[int]
    verdict: Verdict
    needs_rehash: bool
    device_token: str
    spray_suspected: bool
    step_up: bool
    network_throttled: bool
    password_breached: bool
    challenge_reason: ChallengeReason
    challenge_token: str
    lockout_started: bool
    ceiling_reached: bool
    def __init__(self, verdict: _Optional[_Union[Verdict, str]] = ..., needs_rehash: _Optional[bool] = ..., device_token: _Optional[str] = ..., spray_suspected: _Optional[bool] = ..., step_up: _Optional[bool] = ..., network_throttled: _Optional[bool] = ..., password_breached: _Optional[bool] = ..., challenge_reason: _Optional[_Union[ChallengeReason, str]] = ..., challenge_token: _Optional[str] = ..., lockout_started: _Optional[bool] = ..., ceiling_reached: _Optional[bool] = ...) -> None: ...

class ConfirmDeviceRequest(_message.Message):
    __slots__ = ("account", "challenge_token", "stored_hash")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    CHALLENGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STORED_HASH_FIELD_NUMBER: _ClassVar[int]
    account: Account
    challenge_token: str
    stored_hash: str
    def __init__(self, account: _Optional[_Union[Account, _Mapping]] = ..., challenge_token: _Optional[str] = ..., stored_hash: _Optional[str] = ...) -> None: ...

class ConfirmDeviceResponse(_message.Message):
    __slots__ = ("device_token",)
    DEVICE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    device_token: str
    def __init__(self, device_token: _Optional[str] = ...) -> None: ...

class ClearAttemptsRequest(_message.Message):
    __slots__ = ("account", "reason", "client_key")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CLIENT_KEY_FIELD_NUMBER: _ClassVar[int]
    account: Account
    reason: ClearReason
    client_key: str
    def __init__(self, account: _Optional[_Union[Account, _Mapping]] = ..., reason: _Optional[_Union[ClearReason, str]] = ..., client_key: _Optional[str] = ...) -> None: ...

class ClearAttemptsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RecordFlowAttemptRequest(_message.Message):
    __slots__ = ("account", "flow", "client_key", "attempt_id")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    FLOW_FIELD_NUMBER: _ClassVar[int]
    CLIENT_KEY_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    account: Account
    flow: Flow
    client_key: str
    attempt_id: str
    def __init__(self, account: _Optional[_Union[Account, _Mapping]] = ..., flow: _Optional[_Union[Flow, str]] = ..., client_key: _Optional[str] = ..., attempt_id: _Optional[str] = ...) -> None: ...

class RecordFlowAttemptResponse(_message.Message):
    __slots__ = ("decision", "lockout_started", "ceiling_reached")
    DECISION_FIELD_NUMBER: _ClassVar[int]
    LOCKOUT_STARTED_FIELD_NUMBER: _ClassVar[int]
    CEILING_REACHED_FIELD_NUMBER: _ClassVar[int]
    decision: Decision
    lockout_started: bool
    ceiling_reached: bool
    def __init__(self, decision: _Optional[_Union[Decision, str]] = ..., lockout_started: _Optional[bool] = ..., ceiling_reached: _Optional[bool] = ...) -> None: ...

class ClearFlowRequest(_message.Message):
    __slots__ = ("account", "flow")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    FLOW_FIELD_NUMBER: _ClassVar[int]
    account: Account
    flow: Flow
    def __init__(self, account: _Optional[_Union[Account, _Mapping]] = ..., flow: _Optional[_Union[Flow, str]] = ...) -> None: ...

class ClearFlowResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CheckPasswordRequest(_message.Message):
    __slots__ = ("account", "password")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_FIELD_NUMBER: _ClassVar[int]
    account: Account
    password: bytes
    def __init__(self, account: _Optional[_Union[Account, _Mapping]] = ..., password: _Optional[bytes] = ...) -> None: ...

class CheckPasswordResponse(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: PasswordCheckReason
    def __init__(self, reason: _Optional[_Union[PasswordCheckReason, str]] = ...) -> None: ...
