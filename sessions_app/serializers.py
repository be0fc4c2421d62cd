"""Input and output shapes of the sessions API (docs/api.md §5, §7).

Input serializers are strict about JSON types: a number where a string is expected is a
``bad_request``, not silently converted. Names and identifiers refuse NUL characters; text for
the model keeps them (docs/api.md §1.6). Output serializers render every answer from the rows
(or the service's result), and the OpenAPI document is generated from the same classes, so
the two cannot drift apart.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.core.validators import ProhibitNullCharactersValidator
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agentfiles.turns import SESSION_DOCUMENT_REF, TOOL_CALL_REF
from foundation.api import parse_uuid
from foundation.common import Rfc3339Field, is_base64, render
from foundation.errors import BadRequest, UnknownSession
from foundation.openapi import BASE64_PATTERN, component_rule
from sessions_app import selectors
from sessions_app.models import Session
from sessions_app.services.params import secret_names
from sessions_app.values import MAIL_BODY_REF, MAIL_SENDER_REF, TOOL_RESULT_REF, refuse_large_attachment


class StrictCharField(serializers.CharField):
    """A string field that refuses numbers, booleans and other non-strings."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictCharFieldSchema(OpenApiSerializerFieldExtension):
    """A name or identifier's schema in the OpenAPI document: its string schema, and a pattern
    that says what ``ProhibitNullCharactersValidator`` refuses (docs/api.md §1.6)."""

    target_class = StrictCharField

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> Any:
        """The field's generated schema, with ``pattern`` added."""
        schema = auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        return {**schema, "pattern": "^[^\\x00]*$"}


class TextCharField(StrictCharField):
    """A string of text for the model (a prompt): stored as sent, NUL characters included.

    Names and identifiers (``StrictCharField``) refuse NUL; text does not (docs/api.md §1.6).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.validators = [v for v in self.validators if not isinstance(v, ProhibitNullCharactersValidator)]


class StrictUUIDField(serializers.UUIDField):
    """A UUID field that takes the UUID's string only (DRF's also takes an integer)."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            self.fail("invalid", value=data)
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """A boolean field that accepts only JSON ``true`` and ``false``."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


@extend_schema_field(SESSION_DOCUMENT_REF)
class SessionDocumentField(serializers.JSONField):
    """The agents-exe session document (turns newest first)."""


@extend_schema_field({"$ref": "#/components/schemas/Params"})
class ParamsField(serializers.JSONField):
    """Parameter values by name."""


@extend_schema_field({"$ref": "#/components/schemas/Params"})
class ParamsInputField(serializers.JSONField):
    """A request's ``params`` (docs/api.md §7.15): an object of name -> JSON value (``null`` clears)."""

    def to_internal_value(self, data: Any) -> Any:
        if data is not None and not isinstance(data, dict):
            raise serializers.ValidationError("must be an object of parameter name -> value")
        return data


@extend_schema_field(TOOL_CALL_REF)
class ToolCallField(serializers.JSONField):
    """An OpenAI tool call as the model sent it."""


@extend_schema_field({"$ref": "#/components/schemas/Disposition"})
class DispositionField(serializers.JSONField):
    """What the tool-call policy decided for a call."""


@extend_schema_field(TOOL_RESULT_REF)
class ToolResultField(serializers.JSONField):
    """A tool result: a string (text) or a typed object."""


@extend_schema_field(MAIL_BODY_REF)
class MailBodyField(serializers.JSONField):
    """A MailBody, tagged by ``tag``."""


@extend_schema_field(MAIL_SENDER_REF)
class MailSenderField(serializers.JSONField):
    """Who sent a piece of mail, tagged by ``tag``."""


class MediaSerializer(serializers.Serializer):
    """An attachment: ``{"mime", "base64", "filename"?}``."""

    # docs/decisions.md §2: the HTTP API says mime/base64, the session document mimeType/base64Data
    mime = StrictCharField(min_length=1)
    base64 = StrictCharField(allow_blank=True, trim_whitespace=False)
    filename = StrictCharField(required=False, allow_null=True, min_length=1)

    def validate_base64(self, value: str) -> str:
        """Refuse data that is not base64."""
        if not is_base64(value):
            raise serializers.ValidationError("is not valid base64")
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """Refuse an attachment over ``AGENTS_MAX_ATTACHMENT_BYTES`` once decoded (docs/api.md §1.1).

        Raises:
            PayloadTooLarge: 413 ``payload_too_large``, naming the file and both sizes.
        """
        refuse_large_attachment(attrs["base64"], attrs.get("filename") or attrs["mime"])
        return attrs


class MessageAliasSerializer(serializers.Serializer):
    """``message: {text, media}``, accepted on create in place of ``prompt`` and ``media``."""

    text = TextCharField(required=False, allow_blank=True, trim_whitespace=False)
    media = MediaSerializer(many=True, required=False)


RUN_CHOICES = [Session.NO_RUN, *Session.RunMode.values]


class SessionListQuerySerializer(serializers.Serializer):
    """The query of ``GET /v1/sessions`` (docs/api.md §7.2): ``agent``, ``status`` (comma-separated),
    ``parent``, ``limit`` (1..500, default 50), ``before`` (RFC 3339, with a time zone), ``q`` (a
    word or phrase of the conversation; present but empty is refused, unlike the others).

    The fields are checked in that order and the first bad one answers, as a 400 ``bad_request``
    naming it in its own words (raised from its ``validate_`` method, not collected); ``parent``
    is also checked visible to the caller with the ``visible`` callable of the context (404
    ``unknown_session`` otherwise), before ``limit`` and ``before`` are read. Empty values are
    absent ones. Use :meth:`filters` for the cleaned values.
    """

    agent = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    status = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    parent = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)  # type: ignore[assignment]  # a declared field, not Field.parent: DRF's metaclass moves it off the class
    limit = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    before = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    q = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)

    def validate_agent(self, value: str) -> str | None:
        return value or None

    def validate_status(self, value: str) -> list[str] | None:
        if not value:
            return None
        statuses = [s.strip() for s in value.split(",") if s.strip()]
        unknown = [s for s in statuses if s not in Session.Status.values]
        if unknown:
            raise BadRequest(f"unknown status {unknown[0]!r}; expected one of {', '.join(Session.Status.values)}")
        return statuses

    def validate_parent(self, value: str) -> uuid.UUID | None:
        if not value:
            return None
        parent = parse_uuid(value, UnknownSession(value))
        self.context["visible"](parent)
        return parent

    def validate_limit(self, value: str) -> int:
        try:
            limit = int(value)
        except ValueError as exc:
            raise BadRequest("limit must be an integer between 1 and 500") from exc
        if not 1 <= limit <= 500:
            raise BadRequest("limit must be an integer between 1 and 500")
        return limit

    def validate_before(self, value: str) -> datetime | None:
        if not value:
            return None
        try:
            before = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as exc:
            raise BadRequest("before must be an RFC 3339 timestamp") from exc
        if before.tzinfo is None:
            raise BadRequest("before must be an RFC 3339 timestamp with a time zone")
        return before

    def validate_q(self, value: str) -> str:
        return selectors.search_text(value)

    def filters(self) -> dict[str, Any]:
        """``{agent, statuses, parent, limit, before, search}`` for ``selectors.session_list``.

        Raises:
            ApiError: 400 ``bad_request`` or 404 ``unknown_session``, as the class says.
        """
        self.is_valid(raise_exception=True)
        data = self.validated_data
        return {
            "agent": data.get("agent"),
            "statuses": data.get("status"),
            "parent": data.get("parent"),
            "limit": data.get("limit", 50),
            "before": data.get("before"),
            "search": data.get("q"),
        }


class SessionCreateSerializer(serializers.Serializer):
    """Body of ``POST /v1/sessions``."""

    # min_length says in the OpenAPI document what blank's refusal already enforces
    agent = StrictCharField(min_length=1)
    prompt = TextCharField(required=False, allow_null=True, allow_blank=True, trim_whitespace=False)
    message = MessageAliasSerializer(required=False)
    media = MediaSerializer(many=True, required=False)
    run = serializers.ChoiceField(choices=RUN_CHOICES, default=Session.RunMode.UNTIL_BLOCKED)
    parent = StrictCharField(required=False, allow_null=True, min_length=1)  # type: ignore[assignment]  # a declared field, not Field.parent: DRF's metaclass moves it off the class
    seal = StrictBooleanField(required=False)
    session_token = StrictBooleanField(required=False)
    params = ParamsInputField(required=False, allow_null=True)
    webhook = StrictCharField(
        required=False,
        min_length=1,
        max_length=2048,
        help_text="a URL told once when this run stops (docs/webhooks.md §10)",
    )


class SessionImportSerializer(serializers.Serializer):
    """Body of ``POST /v1/sessions/import``: an agents-exe session document and the agent it runs with."""

    agent = StrictCharField(min_length=1)
    session = SessionDocumentField()


#: A message's prompt may be empty, but not missing or null without media (docs/api.md §7.5).
NEEDS_PROMPT_OR_MEDIA = {
    # said as "not (no prompt and no media)": a union at the top of an object would make
    # generated clients give up on the model
    "not": {
        "allOf": [
            {"anyOf": [{"not": {"required": ["prompt"]}}, {"properties": {"prompt": {"enum": [None]}}}]},
            {"anyOf": [{"not": {"required": ["media"]}}, {"properties": {"media": {"maxItems": 0}}}]},
        ]
    }
}
component_rule("Message", NEEDS_PROMPT_OR_MEDIA)
component_rule("Media", {"properties": {"base64": {"pattern": BASE64_PATTERN}}})


class MessageSerializer(serializers.Serializer):
    """Body of ``POST /v1/sessions/:id/messages``."""

    prompt = TextCharField(required=False, allow_null=True, allow_blank=True, trim_whitespace=False)
    media = MediaSerializer(many=True, required=False)
    run = serializers.ChoiceField(choices=RUN_CHOICES, default=Session.RunMode.UNTIL_BLOCKED)
    interrupt = StrictBooleanField(required=False, default=False)
    params = ParamsInputField(required=False, allow_null=True)
    webhook = StrictCharField(
        required=False,
        min_length=1,
        max_length=2048,
        help_text="a URL told once when this run stops (docs/webhooks.md §10)",
    )


class ResumeSerializer(serializers.Serializer):
    """Body of ``POST /v1/sessions/:id/resume`` (optional)."""

    mode = serializers.ChoiceField(choices=Session.RunMode.choices, default=Session.RunMode.UNTIL_BLOCKED)
    params = ParamsInputField(required=False, allow_null=True)
    webhook = StrictCharField(
        required=False,
        min_length=1,
        max_length=2048,
        help_text="a URL told once when this run stops (docs/webhooks.md §10)",
    )


class ContinuationSerializer(serializers.Serializer):
    """Body of ``POST /v1/continuations/:token``.

    ``result`` is a string (a text result) or ``{"type": "text", "content": str}``,
    ``{"type": "json", "content": any}``, ``{"type": "media", "mimeType", "base64Data",
    "filename"?}`` or ``{"type": "mixed", "parts": [{"type": "text", "text"} | media...]}``.
    """

    result = ToolResultField()
    resume = StrictBooleanField(required=False, default=True)
    params = ParamsInputField(required=False, allow_null=True)


def validated(serializer_class: type[serializers.Serializer], data: dict[str, Any]) -> dict[str, Any]:
    """Validate ``data`` and return the cleaned values.

    Raises:
        ApiError: 400 ``bad_request`` whose message names each bad field.
    """
    serializer = serializer_class(data=data)
    if serializer.is_valid():
        return dict(serializer.validated_data)
    raise BadRequest("; ".join(_flatten(serializer.errors)))


def _flatten(errors: Any, prefix: str = "") -> list[str]:
    if isinstance(errors, dict):
        lines = []
        for key, value in errors.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            lines.extend(_flatten(value, name))
        return lines
    if isinstance(errors, list):
        lines = []
        for index, value in enumerate(errors):
            if isinstance(value, dict | list):
                lines.extend(_flatten(value, f"{prefix}[{index}]"))
            else:
                lines.append(f"{prefix}: {value}" if prefix else str(value))
        return lines
    return [f"{prefix}: {errors}"]


# --- output shapes: they render the answers and describe them in the OpenAPI document -------


class DeferredCallSerializer(serializers.Serializer):
    """DeferredCallView: a deferred call waiting for its continuation."""

    tool_call_id = serializers.CharField()
    continuation_token = serializers.UUIDField()
    tool = serializers.CharField()
    disposition = DispositionField()
    call = ToolCallField()


class SessionMetaSerializer(serializers.Serializer):
    """SessionMetaView: a session's metadata without its turns."""

    session_id = serializers.UUIDField(source="pk")
    agent = serializers.CharField(source="agent_slug")
    parent_session_id = serializers.UUIDField(source="parent_id", allow_null=True)
    owner = serializers.CharField(allow_null=True)
    status = serializers.ChoiceField(choices=Session.Status.values)
    status_detail = serializers.CharField(allow_null=True)
    version = serializers.IntegerField()
    created_at = Rfc3339Field()
    updated_at = Rfc3339Field()
    sealed = serializers.BooleanField()
    params = ParamsField(source="params_or_empty")


def meta_view(session: Session) -> dict[str, Any]:
    """The SessionMetaView of a session as a plain dict (the payload of session events)."""
    return render(SessionMetaSerializer, session)


class SessionUsageSerializer(serializers.Serializer):
    """SessionUsage: the session's token totals (the provider's counts of its model answers) and
    byte totals (its turns' ``byteUsage``), docs/sessions.md §1.11."""

    inputTokens = serializers.IntegerField()  # noqa: N815 - the session file's casing
    outputTokens = serializers.IntegerField()  # noqa: N815
    cachedTokens = serializers.IntegerField()  # noqa: N815
    modelTurns = serializers.IntegerField(help_text="model answers that reported usage")  # noqa: N815
    inputBytes = serializers.IntegerField()  # noqa: N815
    outputBytes = serializers.IntegerField()  # noqa: N815
    reasoningBytes = serializers.IntegerField()  # noqa: N815
    toolBytes = serializers.IntegerField()  # noqa: N815
    totalBytes = serializers.IntegerField()  # noqa: N815


class SessionViewSerializer(SessionMetaSerializer):
    """SessionView: the metadata plus the session document, the pending deferred calls and the
    usage totals.

    On create with ``session_token: true`` the answer also carries ``session_token`` (once).
    ``secret_params`` names the secret parameters the session holds, never their values.
    """

    secret_params = serializers.SerializerMethodField(
        help_text="the secret parameters the session holds (names only; docs/api.md §7.15)"
    )
    session = SessionDocumentField(source="parsed_document")
    pending = DeferredCallSerializer(many=True, source="pending_calls")
    usage = SessionUsageSerializer(source="usage_totals")
    session_token = serializers.CharField(
        required=False, help_text="only in the answer to a create that asked for a session token"
    )

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_secret_params(self, session: Session) -> list[str]:
        """The names of the secret parameters the session holds."""
        return secret_names(session.pk)


class SessionListRowSerializer(SessionMetaSerializer):
    """A row of ``GET /v1/sessions``: the SessionMetaView and ``title``, the first words of the
    conversation (``null`` before anything was said; docs/api.md §7.2), which the list's view
    sets on each row from ``selectors.session_titles``."""

    title = serializers.CharField(allow_null=True)


class SessionListSerializer(serializers.Serializer):
    """A page of sessions, newest first; ``next_before`` pages on (``null`` on the last page)."""

    sessions = SessionListRowSerializer(many=True)
    next_before = Rfc3339Field(allow_null=True)


class PendingSerializer(serializers.Serializer):
    """``GET /v1/sessions/:id/pending``."""

    calls = DeferredCallSerializer(many=True)


class MailSerializer(serializers.Serializer):
    """Body of ``POST /v1/sessions/:id/mail``: a MailBody, its priority, and an optional id.

    ``body`` is tagged JSON: ``userMessage`` (``query``: text or ``{"text", "media"}``),
    ``agentMessage`` (``text``, ``inReplyTo``, ``expectsReply``) or ``control`` (``message``:
    ``pause``, ``resume``, ``stopRun``, ``cancelAllAttached``, or ``cancelCalls`` with
    ``toolCallIds``). Posting the same ``id`` twice stores the mail once.
    """

    body = MailBodyField()
    priority = serializers.ChoiceField(choices=["normal", "interrupt"], default="normal")
    id = StrictUUIDField(required=False)


class ReceiptSerializer(serializers.Serializer):
    """The receipt of accepted mail."""

    id = serializers.UUIDField()
    seq = serializers.IntegerField()
    duplicate = serializers.BooleanField()


class EnvelopeSerializer(serializers.Serializer):
    """One piece of mail as stored: the Envelope of docs/guide-sessions.md §2."""

    id = serializers.UUIDField(source="mail_id")
    seq = serializers.IntegerField()
    priority = serializers.ChoiceField(choices=["normal", "interrupt"])
    hops = serializers.IntegerField()
    sentAt = Rfc3339Field(source="sent_at")  # noqa: N815 - the wire name
    body = MailBodyField()

    def get_fields(self) -> dict[str, serializers.Field]:
        """The fields, with ``from`` (a Python keyword) second to ``seq`` as on the wire."""
        fields = super().get_fields()
        ordered: dict[str, serializers.Field] = {}
        for name, field in fields.items():
            ordered[name] = field
            if name == "seq":
                ordered["from"] = MailSenderField(source="sender")
        return ordered


class MailListSerializer(serializers.Serializer):
    """``GET /v1/sessions/:id/mail``: envelopes, oldest first."""

    mail = EnvelopeSerializer(many=True)


class StrictIntegerField(serializers.IntegerField):
    """An integer field that refuses strings, booleans and fractions."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class ForkSerializer(serializers.Serializer):
    """Body of ``POST /v1/sessions/:id/fork`` (optional): ``at_turn`` (newest first), ``agent``, ``params``."""

    at_turn = StrictIntegerField(required=False, allow_null=True)
    agent = StrictCharField(required=False, allow_null=True)
    params = ParamsInputField(required=False, allow_null=True)


class DeletionPlanSerializer(serializers.Serializer):
    """What a delete removes: session ids deepest first, the continuation count, and the mode."""

    sessions = serializers.ListField(child=serializers.UUIDField())
    continuations = serializers.IntegerField()
    dry_run = serializers.BooleanField()


class RecoveryHealthSerializer(serializers.Serializer):
    """Whether some process sweeps runs (docs/api.md §13, docs/sessions.md §4.9)."""

    last_sweep_at = serializers.DateTimeField(
        allow_null=True, help_text="when the last sweep finished (database clock); null: never"
    )
    sweep_every_seconds = serializers.FloatField(help_text="the sweep's period (AGENTS_SWEEP_EVERY_SECONDS)")
    stale = serializers.BooleanField(
        help_text="no sweep finished for 3 periods and none is going on: no worker is up, or sweeps fail"
    )


class HealthSerializer(serializers.Serializer):
    """``GET /healthz``."""

    ok = serializers.BooleanField()
    live_sessions = serializers.IntegerField(help_text="sessions that are neither idle nor failed")
    active_runs = serializers.IntegerField(help_text="sessions whose status is running")
    recovery = RecoveryHealthSerializer()
