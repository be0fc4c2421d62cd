"""``GET /v1/agents`` and ``GET /v1/agents/:slug`` (spec/server-api.md §1.1 #4-5, §1.3)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents_app.registry import get_registry
from agentsite.errors import unknown_agent


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


def agent_descriptor(slug: str) -> dict[str, Any]:
    """The AgentDescriptor of root agent ``slug``.

    Raises:
        ApiError: 404 ``unknown_agent``.
    """
    from sessions_app.runtime import runtime_agent

    agent = runtime_agent(slug)
    spec = agent.loaded.spec
    return {
        "slug": spec.slug,
        "description": spec.announce,
        "tools": [tool.name for tool in agent.toolset.tools],
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
        "helpers": list(agent.loaded.helper_slugs),
        "source": "file",
    }


class AgentListApi(APIView):
    """``GET /v1/agents``: every root agent, as a bare array."""

    @extend_schema(operation_id="listAgents", responses={200: AgentDescriptorSerializer(many=True)})
    def get(self, request: Request) -> Response:
        """List the agents."""
        return Response([agent_descriptor(agent.spec.slug) for agent in get_registry().roots()])


class AgentDetailApi(APIView):
    """``GET /v1/agents/:slug``."""

    @extend_schema(operation_id="getAgent", responses={200: AgentDescriptorSerializer})
    def get(self, request: Request, slug: str) -> Response:
        """One agent."""
        if get_registry().get(slug) is None:
            raise unknown_agent(slug)
        return Response(agent_descriptor(slug))
