from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AclRule(_message.Message):
    __slots__ = ("pattern", "capabilities")
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    pattern: str
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, pattern: _Optional[str] = ..., capabilities: _Optional[_Iterable[str]] = ...) -> None: ...

class AclPolicy(_message.Message):
    __slots__ = ("name", "description", "rules")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    rules: _containers.RepeatedCompositeFieldContainer[AclRule]
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., rules: _Optional[_Iterable[_Union[AclRule, _Mapping]]] = ...) -> None: ...

class AclRole(_message.Message):
    __slots__ = ("name", "description", "policies")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    policies: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., policies: _Optional[_Iterable[str]] = ...) -> None: ...

class AclToken(_message.Message):
    __slots__ = ("accessor", "kind", "description", "roles", "policies", "expires_ms", "max_slots", "created_ms")
    ACCESSOR_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_SLOTS_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    accessor: str
    kind: str
    description: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    policies: _containers.RepeatedScalarFieldContainer[str]
    expires_ms: int
    max_slots: int
    created_ms: int
    def __init__(self, accessor: _Optional[str] = ..., kind: _Optional[str] = ..., description: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ..., policies: _Optional[_Iterable[str]] = ..., expires_ms: _Optional[int] = ..., max_slots: _Optional[int] = ..., created_ms: _Optional[int] = ...) -> None: ...

class TokenSecret(_message.Message):
    __slots__ = ("token", "secret")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    token: AclToken
    secret: str
    def __init__(self, token: _Optional[_Union[AclToken, _Mapping]] = ..., secret: _Optional[str] = ...) -> None: ...

class BootstrapRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class WhoAmIRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WhoAmIResponse(_message.Message):
    __slots__ = ("principal", "kind", "grants", "acl_enabled")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    ACL_ENABLED_FIELD_NUMBER: _ClassVar[int]
    principal: str
    kind: str
    grants: _containers.RepeatedCompositeFieldContainer[AclRule]
    acl_enabled: bool
    def __init__(self, principal: _Optional[str] = ..., kind: _Optional[str] = ..., grants: _Optional[_Iterable[_Union[AclRule, _Mapping]]] = ..., acl_enabled: _Optional[bool] = ...) -> None: ...

class PutPolicyRequest(_message.Message):
    __slots__ = ("policy", "request_id")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    policy: AclPolicy
    request_id: str
    def __init__(self, policy: _Optional[_Union[AclPolicy, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class PutRoleRequest(_message.Message):
    __slots__ = ("role", "request_id")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    role: AclRole
    request_id: str
    def __init__(self, role: _Optional[_Union[AclRole, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class CreateTokenRequest(_message.Message):
    __slots__ = ("kind", "description", "roles", "policies", "ttl_ms", "max_slots", "request_id")
    KIND_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_SLOTS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    kind: str
    description: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    policies: _containers.RepeatedScalarFieldContainer[str]
    ttl_ms: int
    max_slots: int
    request_id: str
    def __init__(self, kind: _Optional[str] = ..., description: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ..., policies: _Optional[_Iterable[str]] = ..., ttl_ms: _Optional[int] = ..., max_slots: _Optional[int] = ..., request_id: _Optional[str] = ...) -> None: ...

class AclName(_message.Message):
    __slots__ = ("name", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    request_id: str
    def __init__(self, name: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class AclDeleted(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListAclRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListPoliciesResponse(_message.Message):
    __slots__ = ("policies", "anonymous_policy")
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    ANONYMOUS_POLICY_FIELD_NUMBER: _ClassVar[int]
    policies: _containers.RepeatedCompositeFieldContainer[AclPolicy]
    anonymous_policy: str
    def __init__(self, policies: _Optional[_Iterable[_Union[AclPolicy, _Mapping]]] = ..., anonymous_policy: _Optional[str] = ...) -> None: ...

class ListRolesResponse(_message.Message):
    __slots__ = ("roles",)
    ROLES_FIELD_NUMBER: _ClassVar[int]
    roles: _containers.RepeatedCompositeFieldContainer[AclRole]
    def __init__(self, roles: _Optional[_Iterable[_Union[AclRole, _Mapping]]] = ...) -> None: ...

class ListTokensResponse(_message.Message):
    __slots__ = ("tokens",)
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedCompositeFieldContainer[AclToken]
    def __init__(self, tokens: _Optional[_Iterable[_Union[AclToken, _Mapping]]] = ...) -> None: ...

class SetAnonymousRequest(_message.Message):
    __slots__ = ("policy", "request_id")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    policy: str
    request_id: str
    def __init__(self, policy: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class SetAnonymousResponse(_message.Message):
    __slots__ = ("policy",)
    POLICY_FIELD_NUMBER: _ClassVar[int]
    policy: str
    def __init__(self, policy: _Optional[str] = ...) -> None: ...

class AuditRecord(_message.Message):
    __slots__ = ("seq", "time_ms", "principal", "source", "action", "target", "outcome", "request_id", "log_index", "detail", "suppressed", "hash", "shard")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    SUPPRESSED_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    seq: int
    time_ms: int
    principal: str
    source: str
    action: str
    target: str
    outcome: str
    request_id: str
    log_index: int
    detail: str
    suppressed: int
    hash: str
    shard: int
    def __init__(self, seq: _Optional[int] = ..., time_ms: _Optional[int] = ..., principal: _Optional[str] = ..., source: _Optional[str] = ..., action: _Optional[str] = ..., target: _Optional[str] = ..., outcome: _Optional[str] = ..., request_id: _Optional[str] = ..., log_index: _Optional[int] = ..., detail: _Optional[str] = ..., suppressed: _Optional[int] = ..., hash: _Optional[str] = ..., shard: _Optional[int] = ...) -> None: ...

class ListAuditRequest(_message.Message):
    __slots__ = ("since_ms", "principal", "target", "action", "outcome", "limit", "until_ms", "newest_first", "before_seq", "shard")
    SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    NEWEST_FIRST_FIELD_NUMBER: _ClassVar[int]
    BEFORE_SEQ_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    since_ms: int
    principal: str
    target: str
    action: str
    outcome: str
    limit: int
    until_ms: int
    newest_first: bool
    before_seq: int
    shard: int
    def __init__(self, since_ms: _Optional[int] = ..., principal: _Optional[str] = ..., target: _Optional[str] = ..., action: _Optional[str] = ..., outcome: _Optional[str] = ..., limit: _Optional[int] = ..., until_ms: _Optional[int] = ..., newest_first: _Optional[bool] = ..., before_seq: _Optional[int] = ..., shard: _Optional[int] = ...) -> None: ...

class ListAuditResponse(_message.Message):
    __slots__ = ("records", "anchor_seq", "anchor_hash", "head", "answered_by")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    ANCHOR_SEQ_FIELD_NUMBER: _ClassVar[int]
    ANCHOR_HASH_FIELD_NUMBER: _ClassVar[int]
    HEAD_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_BY_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[AuditRecord]
    anchor_seq: int
    anchor_hash: str
    head: str
    answered_by: str
    def __init__(self, records: _Optional[_Iterable[_Union[AuditRecord, _Mapping]]] = ..., anchor_seq: _Optional[int] = ..., anchor_hash: _Optional[str] = ..., head: _Optional[str] = ..., answered_by: _Optional[str] = ...) -> None: ...

class VerifyAuditRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class VerifyAuditResponse(_message.Message):
    __slots__ = ("ok", "broken_at_seq", "records", "head", "answered_by")
    OK_FIELD_NUMBER: _ClassVar[int]
    BROKEN_AT_SEQ_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    HEAD_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_BY_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    broken_at_seq: int
    records: int
    head: str
    answered_by: str
    def __init__(self, ok: _Optional[bool] = ..., broken_at_seq: _Optional[int] = ..., records: _Optional[int] = ..., head: _Optional[str] = ..., answered_by: _Optional[str] = ...) -> None: ...

class ConfigureAuditRequest(_message.Message):
    __slots__ = ("max_age_ms", "max_records", "denied_burst", "denied_refill_ms", "request_id")
    MAX_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_RECORDS_FIELD_NUMBER: _ClassVar[int]
    DENIED_BURST_FIELD_NUMBER: _ClassVar[int]
    DENIED_REFILL_MS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    max_age_ms: int
    max_records: int
    denied_burst: int
    denied_refill_ms: int
    request_id: str
    def __init__(self, max_age_ms: _Optional[int] = ..., max_records: _Optional[int] = ..., denied_burst: _Optional[int] = ..., denied_refill_ms: _Optional[int] = ..., request_id: _Optional[str] = ...) -> None: ...

class AuditConfig(_message.Message):
    __slots__ = ("max_age_ms", "max_records", "denied_burst", "denied_refill_ms")
    MAX_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_RECORDS_FIELD_NUMBER: _ClassVar[int]
    DENIED_BURST_FIELD_NUMBER: _ClassVar[int]
    DENIED_REFILL_MS_FIELD_NUMBER: _ClassVar[int]
    max_age_ms: int
    max_records: int
    denied_burst: int
    denied_refill_ms: int
    def __init__(self, max_age_ms: _Optional[int] = ..., max_records: _Optional[int] = ..., denied_burst: _Optional[int] = ..., denied_refill_ms: _Optional[int] = ...) -> None: ...

class AuditNoteRequest(_message.Message):
    __slots__ = ("note", "request_id")
    NOTE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    note: str
    request_id: str
    def __init__(self, note: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class AuditNoteResponse(_message.Message):
    __slots__ = ("record",)
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: AuditRecord
    def __init__(self, record: _Optional[_Union[AuditRecord, _Mapping]] = ...) -> None: ...

class LoginLinkRequest(_message.Message):
    __slots__ = ("url_only",)
    URL_ONLY_FIELD_NUMBER: _ClassVar[int]
    url_only: bool
    def __init__(self, url_only: _Optional[bool] = ...) -> None: ...

class LoginLinkResponse(_message.Message):
    __slots__ = ("link", "dashboard_url", "expires_in_ms")
    LINK_FIELD_NUMBER: _ClassVar[int]
    DASHBOARD_URL_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_IN_MS_FIELD_NUMBER: _ClassVar[int]
    link: str
    dashboard_url: str
    expires_in_ms: int
    def __init__(self, link: _Optional[str] = ..., dashboard_url: _Optional[str] = ..., expires_in_ms: _Optional[int] = ...) -> None: ...
