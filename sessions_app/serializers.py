"""Input and output shapes of the sessions API (spec/server-api.md §1).

Input serializers are strict about JSON types: a number where a string is expected is a
``bad_request``, not silently converted. Output serializers describe the views for the OpenAPI
document; the views themselves are built by ``sessions_app.selectors``.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from agentsite.common import is_base64
from agentsite.errors import BadRequest


class StrictCharField(serializers.CharField):
    """A string field that refuses numbers, booleans and other non-strings."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """A boolean field that accepts only JSON ``true`` and ``false``."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class MediaSerializer(serializers.Serializer):
    """An attachment: ``{"mime", "base64", "filename"?}``."""

    # spec/DECISIONS.md 2: the HTTP API says mime/base64, the session document mimeType/base64Data
    mime = StrictCharField()
    base64 = StrictCharField(allow_blank=True, trim_whitespace=False)
    filename = StrictCharField(required=False, allow_null=True)

    def validate_base64(self, value: str) -> str:
        """Refuse data that is not base64."""
        if not is_base64(value):
            raise serializers.ValidationError("is not valid base64")
        return value


class MessageAliasSerializer(serializers.Serializer):
    """``message: {text, media}``, accepted on create in place of ``prompt`` and ``media``."""

    text = StrictCharField(required=False, allow_blank=True, trim_whitespace=False)
    media = MediaSerializer(many=True, required=False)


RUN_CHOICES = ["none", "step", "until_blocked"]


class SessionCreateSerializer(serializers.Serializer):
    """Body of ``POST /v1/sessions``."""

    agent = StrictCharField()
    prompt = StrictCharField(required=False, allow_null=True, allow_blank=True, trim_whitespace=False)
    message = MessageAliasSerializer(required=False)
    media = MediaSerializer(many=True, required=False)
    run = serializers.ChoiceField(choices=RUN_CHOICES, default="until_blocked")
    parent = StrictCharField(required=False, allow_null=True)
    seal = StrictBooleanField(required=False)
    session_token = StrictBooleanField(required=False)


class MessageSerializer(serializers.Serializer):
    """Body of ``POST /v1/sessions/:id/messages``."""

    prompt = StrictCharField(required=False, allow_null=True, allow_blank=True, trim_whitespace=False)
    media = MediaSerializer(many=True, required=False)
    run = serializers.ChoiceField(choices=RUN_CHOICES, default="until_blocked")
    interrupt = StrictBooleanField(required=False, default=False)


class ResumeSerializer(serializers.Serializer):
    """Body of ``POST /v1/sessions/:id/resume`` (optional)."""

    mode = serializers.ChoiceField(choices=["step", "until_blocked"], default="until_blocked")


class ContinuationSerializer(serializers.Serializer):
    """Body of ``POST /v1/continuations/:token``.

    ``result`` is a string (a text result) or ``{"type": "text", "content": str}``,
    ``{"type": "json", "content": any}``, ``{"type": "media", "mimeType", "base64Data",
    "filename"?}`` or ``{"type": "mixed", "parts": [{"type": "text", "text"} | media...]}``.
    """

    result = serializers.JSONField()
    resume = StrictBooleanField(required=False, default=True)


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


# --- output shapes, for the OpenAPI document --------------------------------------------------


class ErrorSerializer(serializers.Serializer):
    """Every error answer: ``{"error": code, "message": text}``."""

    error = serializers.CharField()
    message = serializers.CharField()


class DeferredCallSerializer(serializers.Serializer):
    """DeferredCallView: a deferred call waiting for its continuation."""

    tool_call_id = serializers.CharField()
    continuation_token = serializers.UUIDField()
    tool = serializers.CharField()
    disposition = serializers.JSONField()
    call = serializers.JSONField()


class SessionMetaSerializer(serializers.Serializer):
    """SessionMetaView."""

    session_id = serializers.UUIDField()
    agent = serializers.CharField()
    parent_session_id = serializers.UUIDField(allow_null=True)
    owner = serializers.CharField(allow_null=True)
    status = serializers.ChoiceField(choices=["ready", "running", "waiting_external", "idle", "failed", "paused"])
    status_detail = serializers.CharField(allow_null=True)
    version = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    sealed = serializers.BooleanField()
    params = serializers.JSONField()


class SessionViewSerializer(SessionMetaSerializer):
    """SessionView: the metadata plus the session document and the pending calls."""

    session = serializers.JSONField(help_text="the agents-exe session document, turns newest first")
    pending = DeferredCallSerializer(many=True)


class SessionListSerializer(serializers.Serializer):
    """A page of sessions."""

    sessions = SessionMetaSerializer(many=True)
    next_before = serializers.DateTimeField(allow_null=True)


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

    body = serializers.JSONField()
    priority = serializers.ChoiceField(choices=["normal", "interrupt"], default="normal")
    id = serializers.UUIDField(required=False)


class ReceiptSerializer(serializers.Serializer):
    """The receipt of accepted mail."""

    id = serializers.UUIDField()
    seq = serializers.IntegerField()
    duplicate = serializers.BooleanField()


class MailListSerializer(serializers.Serializer):
    """``GET /v1/sessions/:id/mail``: envelopes, oldest first."""

    mail = serializers.ListField(child=serializers.JSONField())


class StrictIntegerField(serializers.IntegerField):
    """An integer field that refuses strings, booleans and fractions."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class ForkSerializer(serializers.Serializer):
    """Body of ``POST /v1/sessions/:id/fork`` (optional): ``at_turn`` (newest first) and ``agent``."""

    at_turn = StrictIntegerField(required=False, allow_null=True)
    agent = StrictCharField(required=False, allow_null=True)


class DeletionPlanSerializer(serializers.Serializer):
    """What a delete removes: session ids deepest first, the continuation count, and the mode."""

    sessions = serializers.ListField(child=serializers.UUIDField())
    continuations = serializers.IntegerField()
    dry_run = serializers.BooleanField()
