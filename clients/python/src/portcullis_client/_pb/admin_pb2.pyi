from . import governor_pb2 as _governor_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DoorState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DOOR_STATE_UNSPECIFIED: _ClassVar[DoorState]
    DOOR_STATE_OPEN: _ClassVar[DoorState]
    DOOR_STATE_CLOSED: _ClassVar[DoorState]

class ShutBy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SHUT_BY_UNSPECIFIED: _ClassVar[ShutBy]
    SHUT_BY_WINDOW: _ClassVar[ShutBy]
    SHUT_BY_CEILING: _ClassVar[ShutBy]

class UnlockReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UNLOCK_REASON_UNSPECIFIED: _ClassVar[UnlockReason]
    UNLOCK_REASON_OWNER_VERIFIED: _ClassVar[UnlockReason]
    UNLOCK_REASON_ATTACK_MITIGATED: _ClassVar[UnlockReason]
    UNLOCK_REASON_OTHER: _ClassVar[UnlockReason]
DOOR_STATE_UNSPECIFIED: DoorState
DOOR_STATE_OPEN: DoorState
DOOR_STATE_CLOSED: DoorState
SHUT_BY_UNSPECIFIED: ShutBy
SHUT_BY_WINDOW: ShutBy
SHUT_BY_CEILING: ShutBy
UNLOCK_REASON_UNSPECIFIED: UnlockReason
UNLOCK_REASON_OWNER_VERIFIED: UnlockReason
UNLOCK_REASON_ATTACK_MITIGATED: UnlockReason
UNLOCK_REASON_OTHER: UnlockReason

class InspectRequest(_message.Message):
    __slots__ = ("account", "flow")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    FLOW_FIELD_NUMBER: _ClassVar[int]
    account: _governor_pb2.Account
    flow: _governor_pb2.Flow
    def __init__(self, account: _Optional[_Union[_governor_pb2.Account, _Mapping]] = ..., flow: _Optional[_Union[_governor_pb2.Flow, str]] = ...) -> None: ...

class InspectResponse(_message.Message):
    __slots__ = ("door", "failures", "step", "seconds_until_open", "window_seconds", "repeats_forgiven", "consecutive_failures", "max_consecutive_failures", "ceiling_reached", "door_shut_unix_ms", "shut_by", "candidate_door", "device_failures", "device_lanes", "distinct_networks")
    DOOR_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    SECONDS_UNTIL_OPEN_FIELD_NUMBER: _ClassVar[int]
    WINDOW_SECONDS_FIELD_NUMBER: _ClassVar[int]
    REPEATS_FORGIVEN_FIELD_NUMBER: _ClassVar[int]
    CONSECUTIVE_FAILURES_FIELD_NUMBER: _ClassVar[int]
    MAX_CONSECUTIVE_FAILURES_FIELD_NUMBER: _ClassVar[int]
    CEILING_REACHED_FIELD_NUMBER: _ClassVar[int]
    DOOR_SHUT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    SHUT_BY_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_DOOR_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FAILURES_FIELD_NUMBER: _ClassVar[int]
    DEVICE_LANES_FIELD_NUMBER: _ClassVar[int]
    DISTINCT_NETWORKS_FIELD_NUMBER: _ClassVar[int]
    door: DoorState
    failures: int
    step: int
    seconds_until_open: int
    window_seconds: int
    repeats_forgiven: int
    consecutive_failures: int
    max_consecutive_failures: int
    ceiling_reached: bool
    door_shut_unix_ms: int
    shut_by: ShutBy
    candidate_door: DoorState
    device_failures: int
    device_lanes: int
    distinct_networks: int
    def __init__(self, door: _Optional[_Union[DoorState, str]] = ..., failures: _Optional[int] = ..., step: _Optional[int] = ..., seconds_until_open: _Optional[int] = ..., window_seconds: _Optional[int] = ..., repeats_forgiven: _Optional[int] = ..., consecutive_failures: _Optional[int] = ..., max_consecutive_failures: _Optional[int] = ..., ceiling_reached: _Optional[bool] = ..., door_shut_unix_ms: _Optional[int] = ..., shut_by: _Optional[_Union[ShutBy, str]] = ..., candidate_door: _Optional[_Union[DoorState, str]] = ..., device_failures: _Optional[int] = ..., device_lanes: _Optional[int] = ..., distinct_networks: _Optional[int] = ...) -> None: ...

class UnlockRequest(_message.Message):
    __slots__ = ("account", "reason", "flow", "note")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    FLOW_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    account: _governor_pb2.Account
    reason: UnlockReason
    flow: _governor_pb2.Flow
    note: str
    def __init__(self, account: _Optional[_Union[_governor_pb2.Account, _Mapping]] = ..., reason: _Optional[_Union[UnlockReason, str]] = ..., flow: _Optional[_Union[_governor_pb2.Flow, str]] = ..., note: _Optional[str] = ...) -> None: ...

class UnlockResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RevokeDevicesRequest(_message.Message):
    __slots__ = ("account", "note")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    account: _governor_pb2.Account
    note: str
    def __init__(self, account: _Optional[_Union[_governor_pb2.Account, _Mapping]] = ..., note: _Optional[str] = ...) -> None: ...

class RevokeDevicesResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SprayStatusRequest(_message.Message):
    __slots__ = ("realm",)
    REALM_FIELD_NUMBER: _ClassVar[int]
    realm: str
    def __init__(self, realm: _Optional[str] = ...) -> None: ...

class SprayEpisode(_message.Message):
    __slots__ = ("began_unix_ms", "ended_unix_ms", "peak_fingerprints")
    BEGAN_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    ENDED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    PEAK_FINGERPRINTS_FIELD_NUMBER: _ClassVar[int]
    began_unix_ms: int
    ended_unix_ms: int
    peak_fingerprints: int
    def __init__(self, began_unix_ms: _Optional[int] = ..., ended_unix_ms: _Optional[int] = ..., peak_fingerprints: _Optional[int] = ...) -> None: ...

class SprayStatusResponse(_message.Message):
    __slots__ = ("fingerprints_over_threshold", "episodes")
    FINGERPRINTS_OVER_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    EPISODES_FIELD_NUMBER: _ClassVar[int]
    fingerprints_over_threshold: int
    episodes: _containers.RepeatedCompositeFieldContainer[SprayEpisode]
    def __init__(self, fingerprints_over_threshold: _Optional[int] = ..., episodes: _Optional[_Iterable[_Union[SprayEpisode, _Mapping]]] = ...) -> None: ...

class InspectNetworkRequest(_message.Message):
    __slots__ = ("realm", "client_key")
    REALM_FIELD_NUMBER: _ClassVar[int]
    CLIENT_KEY_FIELD_NUMBER: _ClassVar[int]
    realm: str
    client_key: str
    def __init__(self, realm: _Optional[str] = ..., client_key: _Optional[str] = ...) -> None: ...

class InspectNetworkResponse(_message.Message):
    __slots__ = ("tokens", "capacity", "seconds_until_full", "network", "trusted")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    SECONDS_UNTIL_FULL_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    TRUSTED_FIELD_NUMBER: _ClassVar[int]
    tokens: int
    capacity: int
    seconds_until_full: int
    network: str
    trusted: bool
    def __init__(self, tokens: _Optional[int] = ..., capacity: _Optional[int] = ..., seconds_until_full: _Optional[int] = ..., network: _Optional[str] = ..., trusted: _Optional[bool] = ...) -> None: ...

class ReleaseNetworkRequest(_message.Message):
    __slots__ = ("realm", "client_key", "note")
    REALM_FIELD_NUMBER: _ClassVar[int]
    CLIENT_KEY_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    realm: str
    client_key: str
    note: str
    def __init__(self, realm: _Optional[str] = ..., client_key: _Optional[str] = ..., note: _Optional[str] = ...) -> None: ...

class ReleaseNetworkResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EffectiveConfigRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EffectiveConfigResponse(_message.Message):
    __slots__ = ("settings_json", "settings_sha256", "file_sha256", "loaded_unix_ms", "restart_pending", "secrets")
    SETTINGS_JSON_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_SHA256_FIELD_NUMBER: _ClassVar[int]
    FILE_SHA256_FIELD_NUMBER: _ClassVar[int]
    LOADED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    RESTART_PENDING_FIELD_NUMBER: _ClassVar[int]
    SECRETS_FIELD_NUMBER: _ClassVar[int]
    settings_json: str
    settings_sha256: str
    file_sha256: str
    loaded_unix_ms: int
    restart_pending: _containers.RepeatedScalarFieldContainer[str]
    secrets: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, settings_json: _Optional[str] = ..., settings_sha256: _Optional[str] = ..., file_sha256: _Optional[str] = ..., loaded_unix_ms: _Optional[int] = ..., restart_pending: _Optional[_Iterable[str]] = ..., secrets: _Optional[_Iterable[str]] = ...) -> None: ...

class RealmStatusRequest(_message.Message):
    __slots__ = ("realm",)
    REALM_FIELD_NUMBER: _ClassVar[int]
    realm: str
    def __init__(self, realm: _Optional[str] = ...) -> None: ...

class RealmStatusResponse(_message.Message):
    __slots__ = ("accounts_locked", "lockout_minutes", "accounts_at_ceiling", "networks_throttled", "network_minutes", "sprayed_fingerprints", "spray_minutes", "challenges_issued", "devices_confirmed", "accounts_on_grace_logins", "flow_refusals", "estimate_error", "lag_seconds", "store_time_unix_ms")
    ACCOUNTS_LOCKED_FIELD_NUMBER: _ClassVar[int]
    LOCKOUT_MINUTES_FIELD_NUMBER: _ClassVar[int]
    ACCOUNTS_AT_CEILING_FIELD_NUMBER: _ClassVar[int]
    NETWORKS_THROTTLED_FIELD_NUMBER: _ClassVar[int]
    NETWORK_MINUTES_FIELD_NUMBER: _ClassVar[int]
    SPRAYED_FINGERPRINTS_FIELD_NUMBER: _ClassVar[int]
    SPRAY_MINUTES_FIELD_NUMBER: _ClassVar[int]
    CHALLENGES_ISSUED_FIELD_NUMBER: _ClassVar[int]
    DEVICES_CONFIRMED_FIELD_NUMBER: _ClassVar[int]
    ACCOUNTS_ON_GRACE_LOGINS_FIELD_NUMBER: _ClassVar[int]
    FLOW_REFUSALS_FIELD_NUMBER: _ClassVar[int]
    ESTIMATE_ERROR_FIELD_NUMBER: _ClassVar[int]
    LAG_SECONDS_FIELD_NUMBER: _ClassVar[int]
    STORE_TIME_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    accounts_locked: int
    lockout_minutes: int
    accounts_at_ceiling: int
    networks_throttled: int
    network_minutes: int
    sprayed_fingerprints: int
    spray_minutes: int
    challenges_issued: int
    devices_confirmed: int
    accounts_on_grace_logins: int
    flow_refusals: _containers.RepeatedCompositeFieldContainer[FlowRefusals]
    estimate_error: float
    lag_seconds: int
    store_time_unix_ms: int
    def __init__(self, accounts_locked: _Optional[int] = ..., lockout_minutes: _Optional[int] = ..., accounts_at_ceiling: _Optional[int] = ..., networks_throttled: _Optional[int] = ..., network_minutes: _Optional[int] = ..., sprayed_fingerprints: _Optional[int] = ..., spray_minutes: _Optional[int] = ..., challenges_issued: _Optional[int] = ..., devices_confirmed: _Optional[int] = ..., accounts_on_grace_logins: _Optional[int] = ..., flow_refusals: _Optional[_Iterable[_Union[FlowRefusals, _Mapping]]] = ..., estimate_error: _Optional[float] = ..., lag_seconds: _Optional[int] = ..., store_time_unix_ms: _Optional[int] = ...) -> None: ...

class FlowRefusals(_message.Message):
    __slots__ = ("flow", "refused")
    FLOW_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    flow: _governor_pb2.Flow
    refused: int
    def __init__(self, flow: _Optional[_Union[_governor_pb2.Flow, str]] = ..., refused: _Optional[int] = ...) -> None: ...

class CandidateReportRequest(_message.Message):
    __slots__ = ("realm",)
    REALM_FIELD_NUMBER: _ClassVar[int]
    realm: str
    def __init__(self, realm: _Optional[str] = ...) -> None: ...

class CandidateReportResponse(_message.Message):
    __slots__ = ("loaded", "candidate_id", "since_unix_ms", "would_refuse", "would_allow", "users_locked_out", "guesses_stopped", "step_up_added", "step_up_dropped", "lag_seconds", "defences")
    LOADED_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    SINCE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    WOULD_REFUSE_FIELD_NUMBER: _ClassVar[int]
    WOULD_ALLOW_FIELD_NUMBER: _ClassVar[int]
    USERS_LOCKED_OUT_FIELD_NUMBER: _ClassVar[int]
    GUESSES_STOPPED_FIELD_NUMBER: _ClassVar[int]
    STEP_UP_ADDED_FIELD_NUMBER: _ClassVar[int]
    STEP_UP_DROPPED_FIELD_NUMBER: _ClassVar[int]
    LAG_SECONDS_FIELD_NUMBER: _ClassVar[int]
    DEFENCES_FIELD_NUMBER: _ClassVar[int]
    loaded: bool
    candidate_id: str
    since_unix_ms: int
    would_refuse: int
    would_allow: int
    users_locked_out: int
    guesses_stopped: int
    step_up_added: int
    step_up_dropped: int
    lag_seconds: int
    defences: _containers.RepeatedCompositeFieldContainer[CandidateDefenceReport]
    def __init__(self, loaded: _Optional[bool] = ..., candidate_id: _Optional[str] = ..., since_unix_ms: _Optional[int] = ..., would_refuse: _Optional[int] = ..., would_allow: _Optional[int] = ..., users_locked_out: _Optional[int] = ..., guesses_stopped: _Optional[int] = ..., step_up_added: _Optional[int] = ..., step_up_dropped: _Optional[int] = ..., lag_seconds: _Optional[int] = ..., defences: _Optional[_Iterable[_Union[CandidateDefenceReport, _Mapping]]] = ...) -> None: ...

class CandidateDefenceReport(_message.Message):
    __slots__ = ("defence", "would_refuse", "would_allow", "users_locked_out", "guesses_stopped")
    DEFENCE_FIELD_NUMBER: _ClassVar[int]
    WOULD_REFUSE_FIELD_NUMBER: _ClassVar[int]
    WOULD_ALLOW_FIELD_NUMBER: _ClassVar[int]
    USERS_LOCKED_OUT_FIELD_NUMBER: _ClassVar[int]
    GUESSES_STOPPED_FIELD_NUMBER: _ClassVar[int]
    defence: str
    would_refuse: int
    would_allow: int
    users_locked_out: int
    guesses_stopped: int
    def __init__(self, defence: _Optional[str] = ..., would_refuse: _Optional[int] = ..., would_allow: _Optional[int] = ..., users_locked_out: _Optional[int] = ..., guesses_stopped: _Optional[int] = ...) -> None: ...
