"""The JSON values of the sessions API, one Pydantic model each: tool results, media parts, mail
bodies and mail senders (docs/api.md §5.4, §5.5; docs/sessions.md §6).

Each model both checks what a client posts and describes the value in ``/openapi.json``
(``foundation.openapi.schema_ref`` renders the models as named components), so the document
cannot say something the validation does not. Unions are named models: those whose wire format
carries a tag (``type`` for results and parts, ``tag`` for mail) are discriminated on it; a tool
result may also be a bare string, which has no tag.

A refusal is raised as :class:`~foundation.errors.BadRequest` from inside the validators (it is not
a ``ValueError``, so Pydantic lets it through unchanged), with the messages docs/api.md gives.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal, Self, TypeVar, get_args

from django.conf import settings
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    StrictBool,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.functional_validators import ModelWrapValidatorHandler

from foundation.api import require_name, require_unicode
from foundation.common import base64_size, is_base64
from foundation.errors import BadRequest, PayloadTooLarge
from foundation.openapi import schema_ref

Base64 = Annotated[StrictStr, Field(json_schema_extra={"format": "byte"})]


def _tag_of(model: type[BaseModel], field: str) -> str:
    """The one value of a model's ``Literal`` tag field."""
    annotation = model.model_fields[field].annotation
    return str(get_args(annotation)[0])


def _where(info: ValidationInfo, default: str) -> str:
    """Where the value being checked sits in the request, as its messages name it."""
    context = info.context or {}
    return str(context.get("where", default))


#: What a validating call returns.
_Validated = TypeVar("_Validated")


def _checked(handler: Callable[[Any], _Validated], data: Any, message: str) -> _Validated:
    """``handler(data)``, with any shape error Pydantic finds answered as ``message``."""
    try:
        return handler(data)
    except ValidationError:
        raise BadRequest(message) from None


def refuse_large_attachment(data: str, name: str) -> None:
    """Refuse an attachment whose strict base64 ``data`` decodes to more than
    ``AGENTS_MAX_ATTACHMENT_BYTES``, wherever it arrives: a message, mail, a tool result
    (docs/api.md §1.1). ``name`` (its file name, else its MIME type) is named in the message.

    Raises:
        PayloadTooLarge: 413 ``payload_too_large``, naming the file and both sizes.
    """
    size, limit = base64_size(data), settings.AGENTS["MAX_ATTACHMENT_BYTES"]
    if size > limit:
        raise PayloadTooLarge.attachment(repr(name), size, limit)


# --- tool results (docs/api.md §5.4) --------------------------------------------------------------


class MediaPart(BaseModel):
    """A media result or part: ``{"type": "media", "mimeType", "base64Data", "filename"?}``."""

    model_config = ConfigDict(title="MediaPart")

    type: Literal["media"]
    mimeType: StrictStr
    base64Data: Base64
    filename: StrictStr | None = None

    @model_validator(mode="wrap")
    @classmethod
    def _refuse(cls, data: Any, handler: ModelWrapValidatorHandler[Self], info: ValidationInfo) -> Self:
        where = _where(info, "result")
        part = _checked(handler, data, f'{where}: a media part needs string "mimeType" and "base64Data"')
        if not is_base64(part.base64Data):
            raise BadRequest(f"{where}: base64Data is not valid base64")
        require_name(part.mimeType, f"{where}.mimeType")
        if part.filename is not None:
            require_name(part.filename, f"{where}.filename")
        refuse_large_attachment(part.base64Data, part.filename or part.mimeType)
        return part

    def document_form(self) -> dict[str, Any]:
        """The part as the session document stores it (no ``filename`` key when none was given)."""
        return self.model_dump(exclude_none=True)


class TextPart(BaseModel):
    """A text part of a mixed result: ``{"type": "text", "text"}``."""

    type: Literal["text"]
    text: StrictStr

    def document_form(self) -> dict[str, Any]:
        """The part as the session document stores it."""
        return {"type": "text", "text": self.text}


class MixedPart(RootModel[Annotated[TextPart | MediaPart, Field(discriminator="type")]]):
    """One part of a mixed result: a text part or a media part, by ``type``."""

    @model_validator(mode="wrap")
    @classmethod
    def _refuse(cls, data: Any, handler: ModelWrapValidatorHandler[Self], info: ValidationInfo) -> Self:
        if isinstance(data, cls):
            return data
        where = _where(info, "parts[0]")
        message = f'{where} must be {{"type": "text", "text"}} or a media part'
        if not isinstance(data, dict) or data.get("type") not in (_tag_of(TextPart, "type"), "media"):
            raise BadRequest(message)
        return _checked(handler, data, message)


class TextResult(BaseModel):
    """A text result: ``{"type": "text", "content"}`` (stored as the bare string)."""

    type: Literal["text"]
    content: StrictStr

    @model_validator(mode="wrap")
    @classmethod
    def _refuse(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        return _checked(handler, data, 'a "text" result needs a string "content"')

    def document_form(self) -> str:
        """The result as the session document stores it: the text itself, as agents-exe writes it."""
        return self.content


class JsonResult(BaseModel):
    """A JSON result: ``{"type": "json", "content"}``, any JSON value (``null`` included)."""

    type: Literal["json"]
    content: Any = Field(json_schema_extra={"nullable": True})

    @model_validator(mode="wrap")
    @classmethod
    def _refuse(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        return _checked(handler, data, 'a "json" result needs "content"')

    def document_form(self) -> dict[str, Any]:
        """The result as the session document stores it."""
        return {"type": "json", "content": self.content}


class MixedResult(BaseModel):
    """A result of several parts: ``{"type": "mixed", "parts": [text or media part, ...]}``."""

    type: Literal["mixed"]
    parts: list[MixedPart]

    @model_validator(mode="wrap")
    @classmethod
    def _refuse(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        return _checked(handler, data, 'a "mixed" result needs a list of "parts"')

    @field_validator("parts", mode="before")
    @classmethod
    def _each_part(cls, value: Any) -> Any:
        # each part is checked with its index, which its messages name
        if not isinstance(value, list):
            return value
        return [MixedPart.model_validate(part, context={"where": f"parts[{i}]"}) for i, part in enumerate(value)]

    def document_form(self) -> dict[str, Any]:
        """The result as the session document stores it."""
        return {"type": "mixed", "parts": [part.root.document_form() for part in self.parts]}


TYPED_RESULTS: tuple[type[TextResult | JsonResult | MediaPart | MixedResult], ...] = (
    TextResult,
    JsonResult,
    MediaPart,
    MixedResult,
)


class TypedToolResult(
    RootModel[Annotated[TextResult | JsonResult | MediaPart | MixedResult, Field(discriminator="type")]]
):
    """A tool result given as an object, typed by ``type``: text, json, media or mixed."""

    @model_validator(mode="wrap")
    @classmethod
    def _refuse(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        if not isinstance(data, dict) or "type" not in data:
            raise BadRequest('result must be a string or an object with "type" (text, json, media or mixed)')
        if data["type"] not in {_tag_of(model, "type") for model in TYPED_RESULTS}:
            raise BadRequest(f"unknown result type {data['type']!r}; expected text, json, media or mixed")
        return handler(data)


class ToolResult(RootModel[StrictStr | TypedToolResult]):
    """A tool result as a continuation posts it (docs/api.md §5.4): a string is a text result;
    otherwise an object typed text, json, media or mixed."""

    @model_validator(mode="wrap")
    @classmethod
    def _refuse(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        require_unicode(data, "result")
        if isinstance(data, str):
            return cls.model_construct(data)
        return cls.model_construct(TypedToolResult.model_validate(data))

    def document_form(self) -> Any:
        """The result as the session document stores it: text as a bare string, else the object."""
        return self.root if isinstance(self.root, str) else self.root.root.document_form()


def normalize_tool_result(result: Any) -> Any:
    """Check a continuation ``result`` and return it in document form (docs/api.md §5.4).

    Returns:
        A string for a text result, else ``{"type": "json"|"media"|"mixed", ...}``.
    Raises:
        ApiError: 400 ``bad_request`` naming what is wrong.
    """
    return ToolResult.model_validate(result).document_form()


# --- mail (docs/sessions.md §6, docs/api.md §5.5) ------------------------------------------------


class Control(StrEnum):
    """The control messages a run consumes (``{"tag": "control", "message": {"tag": ...}}``)."""

    PAUSE = "pause"
    RESUME = "resume"
    STOP_RUN = "stopRun"
    CANCEL_ALL_ATTACHED = "cancelAllAttached"
    CANCEL_CALLS = "cancelCalls"


class QueryMedia(BaseModel):
    """A file attached to a ``userMessage`` query: ``{"mimeType", "base64Data", "filename"?}``.
    Keys the server does not read are kept as sent."""

    model_config = ConfigDict(extra="allow")

    mimeType: StrictStr
    base64Data: Base64
    filename: StrictStr | None = None

    @model_validator(mode="wrap")
    @classmethod
    def _refuse(cls, data: Any, handler: ModelWrapValidatorHandler[Self], info: ValidationInfo) -> Self:
        where = _where(info, "query.media[0]")
        message = f"{where} needs a string mimeType and base64 base64Data"
        item = _checked(handler, data, message)
        if not is_base64(item.base64Data):
            raise BadRequest(message)
        require_name(item.mimeType, f"{where}.mimeType")
        if item.filename is not None:
            require_name(item.filename, f"{where}.filename")
        refuse_large_attachment(item.base64Data, item.filename or item.mimeType)
        return item


class QueryWithMedia(BaseModel):
    """A ``userMessage`` query with files: ``{"text"?, "media"?}``."""

    text: StrictStr = ""
    media: list[QueryMedia] = []

    @model_validator(mode="wrap")
    @classmethod
    def _refuse(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        if not isinstance(data, dict) or not isinstance(data.get("text", ""), str):
            raise BadRequest('a userMessage needs "query": a string or {"text", "media"}')
        return handler(data)

    @field_validator("media", mode="before")
    @classmethod
    def _each_item(cls, value: Any) -> Any:
        # an absent, null or empty media is no media; each item is checked with its index
        value = value or []
        if not isinstance(value, list):
            raise BadRequest("query.media must be a list")
        return [QueryMedia.model_validate(item, context={"where": f"query.media[{i}]"}) for i, item in enumerate(value)]


class UserQuery(RootModel[StrictStr | QueryWithMedia]):
    """The query of a ``userMessage``: a string, or text with media."""


class UserMessage(BaseModel):
    """``{"tag": "userMessage", "query"}``: a string, or text with media."""

    tag: Literal["userMessage"]
    query: UserQuery

    @model_validator(mode="wrap")
    @classmethod
    def _refuse(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        if isinstance(data, dict) and not isinstance(data.get("query"), str):
            # the query's own checks name what is wrong in it
            QueryWithMedia.model_validate(data.get("query"))
        return handler(data)

    def wire(self) -> dict[str, Any]:
        """The body as stored: ``query`` a string or ``{"text", "media": [...]}``."""
        query = self.query.root
        if isinstance(query, str):
            return {"tag": self.tag, "query": query}
        media = [item.model_dump(exclude_unset=True) for item in query.media]
        return {"tag": self.tag, "query": {"text": query.text, "media": media}}


class AgentMessage(BaseModel):
    """``{"tag": "agentMessage", "text", "inReplyTo"?, "expectsReply"?}``: mail from an agent."""

    tag: Literal["agentMessage"]
    text: StrictStr
    inReplyTo: StrictStr | None = None
    expectsReply: StrictBool = False

    @model_validator(mode="wrap")
    @classmethod
    def _refuse(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        if not isinstance(data, dict) or not isinstance(data.get("text"), str):
            raise BadRequest('an agentMessage needs a string "text"')
        if not isinstance(data.get("expectsReply", False), bool):
            raise BadRequest("expectsReply must be true or false")
        message = _checked(handler, data, "inReplyTo must be a string or null")
        if message.inReplyTo is not None:
            require_name(message.inReplyTo, "inReplyTo")
        return message

    def wire(self) -> dict[str, Any]:
        """The body as stored, every key present."""
        return {"tag": self.tag, "text": self.text, "inReplyTo": self.inReplyTo, "expectsReply": self.expectsReply}


_CONTROL_REFUSAL = f'a control needs "message": {{"tag": one of {", ".join(sorted(Control))}}}'


class ControlMessage(BaseModel):
    """What a control asks: ``{"tag": pause|resume|stopRun|cancelAllAttached|cancelCalls,
    "toolCallIds"?}`` (``toolCallIds`` with ``cancelCalls`` only)."""

    tag: Control
    toolCallIds: list[StrictStr] | None = None

    @model_validator(mode="wrap")
    @classmethod
    def _refuse(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        if not isinstance(data, dict) or data.get("tag") not in set(Control):
            raise BadRequest(_CONTROL_REFUSAL)
        if data["tag"] != Control.CANCEL_CALLS:
            return cls.model_construct(tag=Control(data["tag"]))
        message = _checked(handler, data, "cancelCalls needs a list of toolCallIds")
        if message.toolCallIds is None:
            raise BadRequest("cancelCalls needs a list of toolCallIds")
        for tool_call_id in message.toolCallIds:
            require_name(tool_call_id, "toolCallIds")
        return message

    def wire(self) -> dict[str, Any]:
        """The message as stored."""
        if self.tag == Control.CANCEL_CALLS:
            return {"tag": self.tag.value, "toolCallIds": self.toolCallIds}
        return {"tag": self.tag.value}


class ControlMail(BaseModel):
    """``{"tag": "control", "message"}``: consumed by the run, never shown to the model."""

    tag: Literal["control"]
    message: ControlMessage

    @model_validator(mode="wrap")
    @classmethod
    def _refuse(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        ControlMessage.model_validate(data.get("message") if isinstance(data, dict) else None)
        return handler(data)

    def wire(self) -> dict[str, Any]:
        """The body as stored."""
        return {"tag": self.tag, "message": self.message.wire()}


class ToolCallFinished(BaseModel):
    """Server mail: a background call of the session ended (its result in document form)."""

    model_config = ConfigDict(extra="allow")
    posted: ClassVar[bool] = False

    tag: Literal["toolCallFinished"]
    toolCallId: str
    providerCallId: str | None = None
    tool: str | None = None
    state: Literal["Completed", "Failed"]
    result: Any = Field(default=None, json_schema_extra={"nullable": True})


class ContinuationResult(BaseModel):
    """Server mail: a result for a continuation, as an object of its own."""

    model_config = ConfigDict(extra="allow")
    posted: ClassVar[bool] = False

    tag: Literal["continuationResult"]


class WatchedEvent(BaseModel):
    """Server mail: an event of a watched session (``sessionId``, ``event`` kind, ``data``)."""

    model_config = ConfigDict(extra="allow")
    posted: ClassVar[bool] = False

    tag: Literal["watchedEvent"]
    sessionId: str | None = None
    event: str | None = None
    data: Any = Field(default=None, json_schema_extra={"nullable": True})


MAIL_MODELS = (UserMessage, AgentMessage, ControlMail, ToolCallFinished, ContinuationResult, WatchedEvent)
#: Every mail tag, and those a client may post.
BODY_TAGS = frozenset(_tag_of(model, "tag") for model in MAIL_MODELS)
POSTED_TAGS = frozenset(_tag_of(model, "tag") for model in MAIL_MODELS if getattr(model, "posted", True))


class MailBody(
    RootModel[
        Annotated[
            UserMessage | AgentMessage | ControlMail | ToolCallFinished | ContinuationResult | WatchedEvent,
            Field(discriminator="tag"),
        ]
    ]
):
    """A piece of mail, tagged by ``tag``; clients post userMessage, agentMessage and control."""

    @model_validator(mode="wrap")
    @classmethod
    def _refuse(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        if not isinstance(data, dict) or not isinstance(data.get("tag"), str):
            raise BadRequest('body must be a MailBody object with a "tag"')
        tag = data["tag"]
        if tag not in BODY_TAGS:
            raise BadRequest(f"unknown mail tag {tag!r}; expected one of {', '.join(sorted(BODY_TAGS))}")
        if tag not in POSTED_TAGS:
            raise BadRequest(f"{tag} mail is produced by the server and cannot be posted")
        return handler(data)


def validate_body(body: Any) -> dict[str, Any]:
    """Check a MailBody posted by a client and return it as stored: its text is kept as sent, NUL
    characters included; its names and ids refuse them (docs/api.md §1.6).

    Raises:
        ApiError: 400 ``bad_request`` naming what is wrong.
    """
    posted = MailBody.model_validate(body).root
    assert isinstance(posted, UserMessage | AgentMessage | ControlMail)  # noqa: S101 - POSTED_TAGS admits no other
    return posted.wire()


class UserSender(BaseModel):
    """Mail from the user (``owner``: the owner's name, when tokens name owners)."""

    tag: Literal["user"]
    owner: str | None = None


class SessionSender(BaseModel):
    """Mail from another session (``agent``: its agent)."""

    tag: Literal["session"]
    sessionId: str
    agent: str | None = None


class ToolCallSender(BaseModel):
    """Mail from a background tool call of the session."""

    tag: Literal["toolCall"]
    toolCallId: str


class SystemSender(BaseModel):
    """Mail from the server itself (``source`` names what sent it)."""

    tag: Literal["system"]
    source: str | None = None


class MailSender(
    RootModel[Annotated[UserSender | SessionSender | ToolCallSender | SystemSender, Field(discriminator="tag")]]
):
    """Who sent a piece of mail, tagged by ``tag``."""


TOOL_RESULT_REF = schema_ref(ToolResult)
MAIL_BODY_REF = schema_ref(MailBody)
MAIL_SENDER_REF = schema_ref(MailSender)
