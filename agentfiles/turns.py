"""The session document and its turns, one Pydantic model each (docs/sessions.md §1).

The models say what a document must hold for this server to read it, and describe it in
``/openapi.json`` (``foundation.openapi.schema_ref``). They are lenient as the readers are
(``agentfiles.document``): every model keeps keys it does not name, and values the readers do
not rely on (prompts, results, ``byteUsage``) may be any JSON. What they check is what the
readers rely on: a known turn tag, ``contents`` objects, tool calls and ``[call, response]``
pairs, tracked calls with a known state. ``agentfiles.document_shape`` answers with the
message of the first thing that fails.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal, Self, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.functional_validators import ModelWrapValidatorHandler

from agentfiles.document import LEGACY_PARTIAL_KEYS
from foundation.openapi import schema_ref

#: The turn tags agents-exe writes (docs/sessions.md §1.2).
TURN_TAGS = ("UserTurn", "LlmTurn", "PartialUserTurn")
#: The states of a tracked call (docs/sessions.md §1.6).
CALL_STATES = ("Ready", "Running", "Deferred", "Completed", "Failed")

_OPEN = ConfigDict(extra="allow")
_JSON = Field(default=None, json_schema_extra={"nullable": True})
# checked by every turn's validator (``_check_contents``): OpenAPI 3.0 cannot say "text, an
# object or null" in a way its validators read
_QUERY = Field(
    default=None,
    description="a string, null, or {text, media} when media is attached",
    json_schema_extra={"nullable": True},
)


class Unreadable(Exception):  # noqa: N818 - the reason a value is refused, not a failure of the code
    """Raised by the models' validators: the message says what makes a document unreadable.

    Not a ``ValueError``, so that Pydantic passes it through with its message untouched.
    """


#: What a validating call returns.
_Validated = TypeVar("_Validated")


def _shaped(handler: Callable[[Any], _Validated], data: Any, message: str) -> _Validated:
    """``handler(data)``, with any shape error Pydantic finds raised as :class:`Unreadable`."""
    try:
        return handler(data)
    except ValidationError:
        raise Unreadable(message) from None


class ToolFunction(BaseModel):
    """The function of a tool call: its ``name`` and JSON-encoded ``arguments``."""

    model_config = _OPEN

    name: Any = Field(default=None, json_schema_extra={"type": "string"})
    arguments: Any = Field(default=None, json_schema_extra={"type": "string"})


class ToolCall(BaseModel):
    """An OpenAI tool call as the model sent it (``function`` may be absent in older files)."""

    model_config = _OPEN

    id: Any = Field(default=None, json_schema_extra={"type": "string"})
    type: Any = Field(default=None, json_schema_extra={"type": "string"})
    function: ToolFunction | None = None

    @field_validator("function", mode="before")
    @classmethod
    def _absent(cls, value: Any) -> Any:
        # the readers take an empty function as none
        return value or None


def _is_call(value: Any) -> bool:
    """Whether a value is a tool call the readers can read."""
    if not isinstance(value, dict):
        return False
    try:
        ToolCall.model_validate(value)
    except ValidationError:
        return False
    return True


ToolResponsePair = Annotated[
    list[Any],
    Field(min_length=2, max_length=2, description="[call, response]: a ToolCall and the tool's response"),
]


class UserContents(BaseModel):
    """The contents of a user turn: the system prompt and tools, the query, the tool responses."""

    model_config = _OPEN

    userPrompt: Any = Field(default=None, json_schema_extra={"type": "string"})
    userTools: Any = Field(default=None, json_schema_extra={"type": "array", "items": {}})
    userQuery: Any = _QUERY
    userToolResponses: list[ToolResponsePair] | None = Field(
        default=None, description="[call, response] pairs, one per call of the LLM turn before"
    )


class LlmContents(BaseModel):
    """The contents of an LLM turn: the response and the tool calls it made."""

    model_config = _OPEN

    llmResponse: Any = Field(
        default=None, description="{rawResponse, responseText, responseThinking} (a string in older files)"
    )
    llmToolCalls: list[ToolCall] | None = None
    userQuery: Any = _QUERY


class TrackedCall(BaseModel):
    """One call of a partial turn: its state, the call, and its result once final."""

    model_config = _OPEN

    tcId: StrictStr
    tcState: Literal["Ready", "Running", "Deferred", "Completed", "Failed"]
    tcCall: ToolCall
    tcResult: Any = _JSON
    tcContinuation: Any = Field(default=None, json_schema_extra={"type": "string", "nullable": True})
    tcPolicy: Any = _JSON


class PartialContents(BaseModel):
    """The contents of a user turn whose calls are not all final: ``trackedCalls``, or in files
    of older agents-exe versions ``completedResponses``, ``pendingCalls`` and
    ``pendingContinuations``."""

    model_config = _OPEN

    userPrompt: Any = Field(default=None, json_schema_extra={"type": "string"})
    userTools: Any = Field(default=None, json_schema_extra={"type": "array", "items": {}})
    userQuery: Any = _QUERY
    trackedCalls: list[TrackedCall] = []
    completedResponses: list[Any] = []
    pendingCalls: list[ToolCall] = []
    pendingContinuations: list[Any] = []

    @model_validator(mode="wrap")
    @classmethod
    def _refuse(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        if not isinstance(data, dict):
            raise Unreadable("the contents of a PartialUserTurn are not a JSON object")
        for key in ("trackedCalls", *LEGACY_PARTIAL_KEYS):
            if key in data and not isinstance(data[key], list):
                raise Unreadable(f"the {key} of a PartialUserTurn are not a list")
        if not all(_is_call(call) for call in data.get("pendingCalls") or []):
            raise Unreadable("the pendingCalls of a PartialUserTurn are not tool calls")
        for index, tc in enumerate(data.get("trackedCalls") or []):
            if not isinstance(tc, dict) or tc.get("tcState") not in CALL_STATES:
                raise Unreadable(
                    f"trackedCalls[{index}] of a PartialUserTurn has no known tcState ({', '.join(CALL_STATES)})"
                )
            _shaped(
                TrackedCall.model_validate,
                tc,
                f"trackedCalls[{index}] of a PartialUserTurn needs a tcId and a tcCall object",
            )
        return _shaped(handler, data, "the contents of a PartialUserTurn are not readable")


def _check_contents(tag: str, data: Any) -> None:
    """The checks every turn's contents share: an object, and a ``userQuery`` text or object."""
    if not isinstance(data, dict) or not isinstance(data.get("contents"), dict):
        raise Unreadable(f"the contents of a {tag} are not a JSON object")
    query = data["contents"].get("userQuery")
    if query is not None and not isinstance(query, str | dict):
        raise Unreadable(f"the userQuery of a {tag} is neither text nor an object")


class UserTurn(BaseModel):
    """A user turn: what the model was sent."""

    model_config = _OPEN

    tag: Literal["UserTurn"]
    contents: UserContents
    byteUsage: Any = Field(default=None, json_schema_extra={"type": "object"})

    @model_validator(mode="wrap")
    @classmethod
    def _refuse(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        _check_contents("UserTurn", data)
        pairs = data["contents"].get("userToolResponses") or []
        if not isinstance(pairs, list) or not all(
            isinstance(pair, list) and len(pair) == 2 and _is_call(pair[0]) for pair in pairs
        ):
            raise Unreadable("the userToolResponses of a UserTurn are not a list of [call, response] pairs")
        return _shaped(handler, data, "the contents of a UserTurn are not readable")


class LlmTurn(BaseModel):
    """An LLM turn: what the model answered."""

    model_config = _OPEN

    tag: Literal["LlmTurn"]
    contents: LlmContents
    byteUsage: Any = Field(default=None, json_schema_extra={"type": "object"})

    @model_validator(mode="wrap")
    @classmethod
    def _refuse(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        _check_contents("LlmTurn", data)
        calls = data["contents"].get("llmToolCalls") or []
        if not isinstance(calls, list) or not all(_is_call(call) for call in calls):
            raise Unreadable("the llmToolCalls of an LlmTurn are not a list of tool calls")
        return _shaped(handler, data, "the contents of an LlmTurn are not readable")


class PartialUserTurn(BaseModel):
    """A user turn whose tool calls are not all final."""

    model_config = _OPEN

    tag: Literal["PartialUserTurn"]
    contents: PartialContents

    @model_validator(mode="wrap")
    @classmethod
    def _refuse(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        _check_contents("PartialUserTurn", data)
        return handler(data)


class Turn(RootModel[Annotated[UserTurn | LlmTurn | PartialUserTurn, Field(discriminator="tag")]]):
    """One turn of a session document, tagged by ``tag``."""

    @model_validator(mode="wrap")
    @classmethod
    def _refuse(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        if not isinstance(data, dict):
            raise Unreadable("a turn is not a JSON object")
        if data.get("tag") not in TURN_TAGS:
            raise Unreadable(f"unknown turn tag {data.get('tag')!r} (expected {', '.join(TURN_TAGS)})")
        return handler(data)


class _Header(BaseModel):
    """The keys of a session document's top level."""

    model_config = _OPEN

    sessionId: Any = Field(default=None, json_schema_extra={"type": "string"})
    turnId: Any = Field(default=None, json_schema_extra={"type": "string", "nullable": True})
    forkedFromSessionId: Any = Field(default=None, json_schema_extra={"type": "string", "nullable": True})
    sessionVersion: Any = Field(default=None, json_schema_extra={"type": "integer"})
    mailCursor: StrictInt | None = None
    controlCursor: StrictInt | None = None


class DocumentHeader(_Header):
    """The top level of a session document without its turns (a stored header holds
    ``"turns": null``, ``sessions_app.store``)."""

    @model_validator(mode="wrap")
    @classmethod
    def _refuse(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        if not isinstance(data, dict):
            raise Unreadable("the document is not a JSON object")
        if not isinstance(data.get("turns") or [], list):
            raise Unreadable("turns is not a list")
        for key in ("mailCursor", "controlCursor"):
            value = data.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise Unreadable(f"{key} is not an integer")
        header = {key: value for key, value in data.items() if key != "turns"}
        return _shaped(handler, header, "the document is not readable")


class SessionDocument(_Header):
    """The agents-exe session document, as its session files hold it; turns newest first."""

    turns: list[Turn]

    @model_validator(mode="wrap")
    @classmethod
    def _refuse(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        DocumentHeader.model_validate(data)
        for index, turn in enumerate(data.get("turns") or []):
            try:
                Turn.model_validate(turn)
            except Unreadable as error:
                raise Unreadable(f"turns[{index}]: {error}") from None
        return handler({**data, "turns": data.get("turns") or []})


SESSION_DOCUMENT_REF = schema_ref(SessionDocument)
TOOL_CALL_REF = schema_ref(ToolCall)
TRACKED_CALL_REF = schema_ref(TrackedCall)
