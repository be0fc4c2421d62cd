"""``GET /v1/usage``: token totals per agent, owner or day, for the caller's sessions
(docs/api.md §7.17, docs/sessions.md §1.11)."""

from __future__ import annotations

from datetime import datetime

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from foundation.api import ApiViewSet, error_responses
from foundation.auth import caller
from foundation.common import render
from foundation.errors import BadRequest
from sessions_app.sse import events_scope
from sessions_app.usage import GROUPS, UsageScope, usage_report


def _instant(name: str, value: str | None) -> datetime | None:
    """An RFC 3339 timestamp with a time zone, or a bare ``YYYY-MM-DD`` (midnight UTC)."""
    if not value:
        return None
    try:
        instant = datetime.fromisoformat(value.replace("Z", "+00:00") if len(value) > 10 else value + "T00:00:00+00:00")
    except ValueError as exc:
        raise BadRequest(f"{name} must be an RFC 3339 timestamp or a YYYY-MM-DD day") from exc
    if instant.tzinfo is None:
        raise BadRequest(f"{name} must be an RFC 3339 timestamp with a time zone")
    return instant


class UsageCountsSerializer(serializers.Serializer):
    """Token counts added up over model answers: the provider's numbers, not estimates."""

    input_tokens = serializers.IntegerField(help_text="prompt tokens the provider reported")
    output_tokens = serializers.IntegerField(help_text="completion tokens the provider reported")
    cached_tokens = serializers.IntegerField(help_text="prompt tokens served from the provider's cache, where given")
    total_tokens = serializers.IntegerField(help_text="input_tokens + output_tokens")
    model_turns = serializers.IntegerField(help_text="model answers that reported usage")
    sessions = serializers.IntegerField(help_text="sessions those answers belong to")


class UsageRowSerializer(UsageCountsSerializer):
    """One group of a usage report."""

    key = serializers.CharField(allow_null=True, help_text="the agent slug, the owner, or the day (YYYY-MM-DD, UTC)")


class UsageReportSerializer(serializers.Serializer):
    """UsageReport: token totals per group, and over all of them."""

    group_by = serializers.ChoiceField(choices=list(GROUPS))
    rows = UsageRowSerializer(many=True)
    totals = UsageCountsSerializer()


class UsageViewSet(ApiViewSet):
    """``/v1/usage``."""

    @extend_schema(
        operation_id="getUsage",
        parameters=[
            OpenApiParameter("group_by", str, enum=list(GROUPS), description="agent (default), owner or day"),
            OpenApiParameter("agent", str, description="only this agent's sessions"),
            OpenApiParameter("since", OpenApiTypes.DATETIME, description="RFC 3339 or YYYY-MM-DD, inclusive"),
            OpenApiParameter("until", OpenApiTypes.DATETIME, description="RFC 3339 or YYYY-MM-DD, exclusive"),
            OpenApiParameter("scope", str, enum=["owner", "all"], description="all: every owner's (admin owners)"),
        ],
        responses={200: UsageReportSerializer, **error_responses(400, 403)},
    )
    def list(self, request: Request) -> Response:
        """Token totals of the caller's sessions (every session with ``scope=all``, for admin owners)."""
        group_by = request.query_params.get("group_by") or "agent"
        if group_by not in GROUPS:
            raise BadRequest(f"group_by must be one of {', '.join(GROUPS)}")
        visible = events_scope(caller(request), request.query_params.get("scope"))
        since = _instant("since", request.query_params.get("since"))
        until = _instant("until", request.query_params.get("until"))
        scope = UsageScope(
            owner=visible.owner,
            everyone=visible.everyone,
            agent=request.query_params.get("agent") or None,
            since=since,
            until=until,
        )
        return Response(render(UsageReportSerializer, usage_report(scope, group_by)))
