"""``/v1/agents``: list and read agents; store and delete agents for admin owners.

Implements docs/api.md §11 and §12, with the AgentDescriptor of docs/api.md §5.7.
"""

from __future__ import annotations

import logging
from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agentfiles.loader import LoadedAgent
from agentfiles.parameters import AgentParameters
from agents_app import services
from agents_app.registry import get_registry
from agents_app.runtime import runtime_agent
from foundation.api import ApiViewSet, error_responses, json_object_body, require_name
from foundation.auth import caller
from foundation.common import Rfc3339Field, render, rfc3339
from foundation.errors import AgentFailedToLoad, UnknownAgent

log = logging.getLogger("agents.views")


class AgentModelSerializer(serializers.Serializer):
    """The model an agent calls."""

    name = serializers.CharField()
    url = serializers.CharField()
    flavor = serializers.CharField()


class AgentParameterSerializer(serializers.Serializer):
    """A parameter an agent declares (never its value)."""

    name = serializers.CharField()
    description = serializers.CharField(allow_null=True, allow_blank=True)
    scope = serializers.ChoiceField(choices=["process", "session", "message"])
    secret = serializers.BooleanField()
    required = serializers.BooleanField()  # type: ignore[assignment]  # a declared field, not Field.required: DRF's metaclass moves it off the class
    bound = serializers.BooleanField(help_text="the process gives it a value (a process value or a default)")
    pinned = serializers.BooleanField(help_text="the operator pinned it: no client may set it")


class AgentDescriptorSerializer(serializers.Serializer):
    """AgentDescriptor: what a client needs to know about an agent."""

    slug = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    tools = serializers.ListField(child=serializers.CharField())
    model = AgentModelSerializer()
    prompt = serializers.CharField(allow_blank=True)
    parameters = AgentParameterSerializer(many=True)
    helpers = serializers.ListField(child=serializers.CharField())
    source = serializers.ChoiceField(choices=["file", "database"])  # type: ignore[assignment]  # a declared field, not Field.source: DRF's metaclass moves it off the class
    config = serializers.JSONField(required=False, help_text="stored agents: the contents with 'files'")
    version = serializers.IntegerField(
        required=False, help_text="stored agents: the current version (the admin keeps every version)"
    )
    updated_at = Rfc3339Field(required=False, help_text="stored agents")
    updated_by = serializers.CharField(required=False, allow_null=True, help_text="stored agents")

    def to_representation(self, instance: dict[str, Any]) -> dict[str, Any]:
        """The descriptor; the stored agents' fields only for stored agents."""
        return {name: value for name, value in super().to_representation(instance).items() if name in instance}


def agent_descriptor(slug: str) -> dict[str, Any]:
    """The AgentDescriptor of root agent ``slug``.

    Raises:
        ApiError: 404 ``unknown_agent``.
    """

    agent = runtime_agent(slug)
    return _descriptor(agent.loaded, agent.toolset.names(), agent.parameters)


def _descriptor(loaded: LoadedAgent, tools: list[str], parameters: AgentParameters) -> dict[str, Any]:
    """The AgentDescriptor of a loaded agent and its tools' wire names; stored agents add their config."""

    spec = loaded.spec
    descriptor: dict[str, Any] = {
        "slug": spec.slug,
        "description": spec.announce,
        "tools": tools,
        "model": {"name": spec.modelName, "url": spec.modelUrl, "flavor": spec.flavor},
        "prompt": spec.system_prompt_text(),
        "parameters": parameters.descriptors(),
        "helpers": list(loaded.helper_slugs),
        "source": "file",
    }
    info = get_registry().stored_info(spec.slug)
    if info is not None:
        descriptor.update(
            source="database",
            config=info.config(),
            version=info.version,
            updated_at=rfc3339(info.updated_at),
            updated_by=info.updated_by,
        )
    return descriptor


SLUG = OpenApiParameter("slug", str, OpenApiParameter.PATH, description="the agent's slug")


class AgentViewSet(ApiViewSet):
    """``/v1/agents``: every root agent; stored agents are written by admin owners."""

    lookup_url_kwarg = "slug"
    admin_actions = frozenset({"update", "destroy"})

    @extend_schema(
        operation_id="listAgents",
        parameters=[],
        responses={200: AgentDescriptorSerializer(many=True), **error_responses()},
    )
    def list(self, request: Request) -> Response:
        """List the agents, as a bare array; a stored agent whose tools cannot be built now is left
        out and logged (``agents.stored_load_failed``), as ``GET`` of it answers why."""
        descriptors = []
        registry = get_registry()
        with registry.one_look():
            for agent in registry.roots():
                try:
                    descriptors.append(agent_descriptor(agent.spec.slug))
                except AgentFailedToLoad as error:
                    log.warning(
                        "stored agent failed to load",
                        extra={"kind": "agents.stored_load_failed", "agent": agent.spec.slug, "reason": error.message},
                    )
        return Response([render(AgentDescriptorSerializer, descriptor) for descriptor in descriptors])

    @extend_schema(
        operation_id="getAgent", parameters=[SLUG], responses={200: AgentDescriptorSerializer, **error_responses(404)}
    )
    def retrieve(self, request: Request, slug: str) -> Response:
        """One agent."""
        if get_registry().get(slug) is None:
            raise UnknownAgent(slug)
        return Response(render(AgentDescriptorSerializer, agent_descriptor(slug)))

    @extend_schema(
        operation_id="putAgent",
        parameters=[SLUG],
        request={"application/json": {"$ref": "#/components/schemas/StoredAgentBody"}},
        description="The agent's contents plus an optional 'files' object (relative path -> text). Admin owners.",
        responses={
            200: AgentDescriptorSerializer,
            201: AgentDescriptorSerializer,
            **error_responses(400, 403, 409, 413),
        },
    )
    def update(self, request: Request, slug: str) -> Response:
        """Store an agent: 201 the first time, 200 when it replaces the stored one.

        Storing runs nothing (docs/agents.md §9), so the answer lists no tools: they are known once
        the agent is built for use (``GET /v1/agents/:slug``, a run).
        """
        body = json_object_body(request)
        prepared, _, created = services.stored_agent_put(
            require_name(slug, "slug"), body, updated_by=caller(request).owner
        )
        descriptor = _descriptor(prepared.loaded, [], prepared.parameters)
        return Response(render(AgentDescriptorSerializer, descriptor), status=201 if created else 200)

    @extend_schema(
        operation_id="deleteAgent",
        parameters=[SLUG],
        responses={200: AgentDescriptorSerializer, **error_responses(403, 404, 409)},
    )
    def destroy(self, request: Request, slug: str) -> Response:
        """Delete a stored agent; the answer is its descriptor as it was."""
        before = agent_descriptor(slug) if get_registry().source(slug) == "database" else None
        row = services.stored_agent_delete(slug)
        if before is None:
            # stored but not usable in this process (e.g. skipped): what was stored is all there is
            contents = row.contents
            before = {
                "slug": row.slug,
                "description": str(contents.get("announce") or ""),
                "tools": [],
                "model": {
                    "name": str(contents.get("modelName") or ""),
                    "url": str(contents.get("modelUrl") or ""),
                    "flavor": str(contents.get("flavor") or ""),
                },
                "prompt": "",
                "parameters": [],
                "helpers": list(row.helpers),
                "source": "database",
                "config": {**contents, "files": row.files},
                "version": row.version,
            }
        return Response(render(AgentDescriptorSerializer, before))
