"""factory_boy factories for the in-process tests: turns, sessions, continuations, mail, stored
agents and owners.

Rows are written through the product's own store and services (``insert_session``,
``adopt_deferred_calls``, ``append_mail``, ``stored_agent_put``), so that a factory-made row is
one the server could have written: a session's Turn rows, header and document cache agree, a
waiting session has the Continuation rows of its deferred calls, mail takes the next ``seq``.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from typing import Any

import factory
from django.db import transaction

from agentfiles import document as doc
from agents_app import services as agent_services
from agents_app.models import StoredAgent
from foundation.auth import Principal
from sessions_app.models import Continuation, MailEnvelope, Session
from sessions_app.services.continuations import adopt_deferred_calls
from sessions_app.services.mail import append_mail
from sessions_app.store import insert_session

#: The slug of the agent the service tests load (tests/services/conftest.py).
AGENT_SLUG = "single"
#: A model URL nothing listens on: the in-process tests never reach an LLM.
UNREACHABLE_MODEL_URL = "http://127.0.0.1:9/v1"


class ToolCallFactory(factory.DictFactory):
    """An OpenAI tool call as an LLM turn holds it: ``{"id", "type", "function": {"name", "arguments"}}``."""

    id = factory.Sequence(lambda n: f"call_{n:04d}")
    type = "function"
    function = factory.Dict({"name": "lookup", "arguments": factory.LazyFunction(lambda: json.dumps({"q": "x"}))})


class UserTurnFactory(factory.Factory):
    """A full ``UserTurn`` (docs/sessions.md §1.3) with a text query."""

    class Meta:
        model = doc.user_turn

    system_prompt = "You are single."
    system_tools = factory.LazyFunction(list)
    query = factory.Faker("sentence")


class LlmTurnFactory(factory.Factory):
    """An ``LlmTurn``: a final answer, or tool calls with ``tool_calls=[ToolCallFactory(), ...]``."""

    class Meta:
        model = doc.llm_turn

    text = factory.Faker("sentence")
    thinking = None
    tool_calls = factory.LazyFunction(list)
    usage = factory.LazyFunction(lambda: {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
    raw_response = factory.LazyAttribute(
        lambda o: {
            "id": f"chatcmpl-{uuid.uuid4().hex[:8]}",
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": o.text, "tool_calls": o.tool_calls or None},
                    "finish_reason": "tool_calls" if o.tool_calls else "stop",
                }
            ],
            "usage": o.usage,
        }
    )


def deferred_head(calls: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    """A ``PartialUserTurn`` whose every call of ``calls`` is deferred on a fresh continuation token.

    Returns:
        The turn and the tokens, in the calls' order.
    """
    tokens = [str(uuid.uuid4()) for _ in calls]
    tracked = [
        doc.tracked_call(call, "Deferred", {"tag": "defer"}, continuation=token)
        for call, token in zip(calls, tokens, strict=True)
    ]
    return doc.partial_turn("You are single.", [], tracked), tokens


class SessionFactory(factory.django.DjangoModelFactory):
    """A stored session of :data:`AGENT_SLUG`, written through ``sessions_app.store``.

    Args (besides the Session columns):
        turns: the document's turns, newest first (default: one user turn, so ``ready``).
        status: the stored status; by default the one the turns imply (``document.status_of``).
        deferred: a number of tool calls to leave waiting for continuations: an LLM turn asking
            for them is pushed over ``turns``, and a partial head defers each one; the
            Continuation rows are created as for an imported document.
    """

    class Meta:
        model = Session

    agent_slug = AGENT_SLUG
    owner = None
    turns = factory.LazyFunction(lambda: [UserTurnFactory()])
    deferred = 0

    @classmethod
    def _create(cls, model_class: type[Session], *args: Any, **kwargs: Any) -> Session:
        turns = list(kwargs.pop("turns"))
        deferred = kwargs.pop("deferred", 0)
        session_id = kwargs.pop("id", None) or uuid.uuid4()
        document = doc.new_document(str(session_id))
        if deferred:
            calls = [ToolCallFactory() for _ in range(deferred)]
            head, _ = deferred_head(calls)
            turns = [head, LlmTurnFactory(text="", tool_calls=calls), *turns]
        document["turns"] = turns
        kwargs.setdefault("status", doc.status_of(document))
        with transaction.atomic():
            session = insert_session(document, id=session_id, **kwargs)
            adopt_deferred_calls(session, document)
        return session


class ContinuationFactory(factory.django.DjangoModelFactory):
    """The continuation of a session waiting on one deferred call (that session is made with it)."""

    class Meta:
        model = Continuation

    session = factory.SubFactory(SessionFactory, deferred=1)

    @classmethod
    def _create(cls, model_class: type[Continuation], *args: Any, session: Session, **kwargs: Any) -> Continuation:
        return model_class.objects.filter(session=session).order_by("created_at").first()


class MailFactory(factory.django.DjangoModelFactory):
    """One mail envelope, appended as the mail service appends it (next ``seq`` of the session)."""

    class Meta:
        model = MailEnvelope

    session = factory.SubFactory(SessionFactory)
    body = factory.LazyFunction(lambda: {"tag": "userMessage", "query": "a message in the mailbox"})
    priority = "normal"
    sender = factory.LazyAttribute(lambda o: {"tag": "user", "owner": o.session.owner})

    @classmethod
    def _create(cls, model_class: type[MailEnvelope], *args: Any, session: Session, **kwargs: Any) -> MailEnvelope:
        with transaction.atomic():
            envelope, _ = append_mail(session, kwargs["body"], priority=kwargs["priority"], sender=kwargs["sender"])
        return envelope


def agent_contents(**extra: Any) -> dict[str, Any]:
    """The ``contents`` of an OpenAI agent file that never reaches a model, with ``extra`` keys."""
    return {
        "apiKeyId": "test",
        "flavor": "OpenAIv1",
        "modelUrl": UNREACHABLE_MODEL_URL,
        "modelName": "scripted",
        "announce": "a stored test agent",
        "systemPrompt": ["You are a stored agent."],
        **extra,
    }


class StoredAgentFactory(factory.django.DjangoModelFactory):
    """A stored agent, put through ``agents_app.services.stored_agent_put`` (checked and loaded)."""

    class Meta:
        model = StoredAgent

    slug = factory.Sequence(lambda n: f"stored-{n}")
    contents = factory.LazyFunction(agent_contents)
    files = factory.LazyFunction(dict)
    updated_by = "root"

    @classmethod
    def _create(cls, model_class: type[StoredAgent], *args: Any, **kwargs: Any) -> StoredAgent:
        body = {**kwargs["contents"], "files": kwargs["files"]} if kwargs["files"] else kwargs["contents"]
        _, row, _ = agent_services.stored_agent_put(kwargs["slug"], body, kwargs["updated_by"])
        return row


@dataclass(frozen=True)
class Owner:
    """An owner of sessions and their bearer token (docs/api.md §10.2)."""

    name: str
    token: str

    def entry(self) -> dict[str, str]:
        """The owner's entry in a tokens file, as a SHA-256 digest."""
        return {"owner": self.name, "sha256": hashlib.sha256(self.token.encode()).hexdigest()}

    def principal(self, *, admin: bool = False) -> Principal:
        """The principal a request with this owner's token has."""
        return Principal(kind="owner", owner=self.name, admin=admin)


class OwnerFactory(factory.Factory):
    """An :class:`Owner` with a unique name and a random token."""

    class Meta:
        model = Owner

    name = factory.Sequence(lambda n: f"owner-{n}")
    token = factory.Faker("sha256")
