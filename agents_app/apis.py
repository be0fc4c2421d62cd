"""``/v1/agents``: list and read agents; store and delete agents for admin owners.

Implements spec/server-api.md §1.1 #4-7, §1.3 (AgentDescriptor) and §6 (stored agents).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents_app import services
from agents_app.loader import LoadedAgent
from agents_app.registry import get_registry
from agents_app.runtime import runtime_agent
from agentsite.access import principal_of
from agentsite.common import rfc3339
from agentsite.errors import Forbidden, UnknownAgent
from tools_app.toolset import ToolSet


class AgentDescriptorSerializer(serializers.Serializer):
    """AgentDescriptor: what a client needs to know about an agent."""

    slug = serializers.CharField()
    description = serializers.CharField()
    tools = serializers.ListField(child=serializers.CharField())
    model = serializers.JSONField()
    prompt = serializers.CharField()
    parameters = serializers.JSONField()
    helpers = serializers.ListField(child=serializers.CharField())
    source = serializers.ChoiceField(choices=["file", "database"])
    config = serializers.JSONField(required=False, help_text="stored agents: the contents with 'files'")
    updated_at = serializers.DateTimeField(required=False, help_text="stored agents")
    updated_by = serializers.CharField(required=False, allow_null=True, help_text="stored agents")


def agent_descriptor(slug: str) -> dict[str, Any]:
    """The AgentDescriptor of root agent ``slug``.

    Raises:
        ApiError: 404 ``unknown_agent``.
    """

    agent = runtime_agent(slug)
    return _descriptor(agent.loaded, agent.toolset)


def _descriptor(loaded: LoadedAgent, toolset: ToolSet) -> dict[str, Any]:
    """The AgentDescriptor of a loaded agent and its tools; stored agents add their config."""

    spec = loaded.spec
    descriptor = {
        "slug": spec.slug,
        "description": spec.announce,
        "tools": [tool.name for tool in toolset.tools],
        "model": {"name": spec.modelName, "url": spec.modelUrl, "flavor": spec.flavor},
        "prompt": spec.system_prompt_text(),
        "parameters": [
            {
                "name": p.name,
                "description": p.description,
                "scope": p.scope,
                "secret": p.secret,
                "required": p.required,
                "bound": p.default is not None,
                "pinned": False,
            }
            for p in spec.parameters
        ],
        "helpers": list(loaded.helper_slugs),
        "source": "file",
    }
    info = get_registry().stored_info(spec.slug)
    if info is not None:
        descriptor.update(
            source="database", config=info.config(), updated_at=rfc3339(info.updated_at), updated_by=info.updated_by
        )
    return descriptor


def _require_admin(request: Request) -> str:
    """The admin owner making a stored-agent edit (spec §6: editing is off without admin owners).

    Raises:
        ApiError: 403 ``forbidden`` for anyone else, and for everyone without authentication.
    """
    principal = principal_of(request)
    if not principal.admin or principal.owner is None:
        raise Forbidden("storing and deleting agents is for admin owners (--admin-owners)")
    return principal.owner


class AgentListApi(APIView):
    """``GET /v1/agents``: every root agent, as a bare array."""

    @extend_schema(operation_id="listAgents", responses={200: AgentDescriptorSerializer(many=True)})
    def get(self, request: Request) -> Response:
        """List the agents."""
        return Response([agent_descriptor(agent.spec.slug) for agent in get_registry().roots()])


class AgentDetailApi(APIView):
    """``GET``, ``PUT`` and ``DELETE /v1/agents/:slug``."""

    @extend_schema(operation_id="getAgent", responses={200: AgentDescriptorSerializer})
    def get(self, request: Request, slug: str) -> Response:
        """One agent."""
        if get_registry().get(slug) is None:
            raise UnknownAgent(slug)
        return Response(agent_descriptor(slug))

    @extend_schema(
        operation_id="putAgent",
        request=OpenApiTypes.OBJECT,
        description="The agent's contents plus an optional 'files' object (relative path -> text). Admin owners.",
        responses={200: AgentDescriptorSerializer, 201: AgentDescriptorSerializer},
    )
    def put(self, request: Request, slug: str) -> Response:
        """Store an agent: 201 the first time, 200 when it replaces the stored one."""
        owner = _require_admin(request)
        prepared, _, created = services.stored_agent_put(slug, request.data, updated_by=owner)
        return Response(_descriptor(prepared.loaded, prepared.toolset), status=201 if created else 200)

    @extend_schema(operation_id="deleteAgent", responses={200: AgentDescriptorSerializer})
    def delete(self, request: Request, slug: str) -> Response:
        """Delete a stored agent; the answer is its descriptor as it was."""
        _require_admin(request)
        before = agent_descriptor(slug) if get_registry().source(slug) == "database" else None
        row = services.stored_agent_delete(slug)
        if before is None:
            # stored but not usable in this process (e.g. skipped): what was stored is all there is
            before = {"slug": row.slug, "source": "database", "config": {**row.contents, "files": row.files}}
        return Response(before)
