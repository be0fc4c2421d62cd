"""``Idempotency-Key`` on the routes that start or change a run (docs/api.md §1.7).

:func:`idempotent` wraps a viewset action: without the header the action runs as always; with
it, the key is claimed (``sessions_app.services.idempotency``), the action's change and its
answer commit in one transaction, and a retry with the same key answers the stored answer with
``Idempotent-Replayed: true``. A ``wait=true`` request's wait happens after that commit (the run
starts only once the change is committed): ``sessions_app.views.session_answer`` hands it back
here as a :class:`DeferredWait`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from drf_spectacular.utils import OpenApiParameter
from rest_framework.request import Request
from rest_framework.response import Response

from foundation.auth import Principal, caller
from foundation.errors import InvalidIdempotencyKey
from sessions_app.services import idempotency

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
#: Characters at most in a key (docs/api.md §1.7).
MAX_KEY_LENGTH = 255
#: Visible ASCII but the double quote and the backslash: a UUID, a ULID, base64 and the like.
KEY_CHARACTERS = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")

#: The header in the OpenAPI document of every operation :func:`idempotent` wraps.
IDEMPOTENCY_KEY_PARAMETER = OpenApiParameter(
    HEADER,
    str,
    OpenApiParameter.HEADER,
    # the bare form only: a client generated from the document needs no other (the server also reads the
    # quoted one)
    pattern=rf"^[\x21\x23-\x5b\x5d-\x7e]{{1,{MAX_KEY_LENGTH}}}$",
    description=(
        "a key unique to this logical request (e.g. a UUID), at most 255 visible ASCII characters without"
        ' `"` or `\\` (a quoted structured-field string is read too); a retry with the same key and body'
        " answers the first answer again, with `Idempotent-Replayed: true` (docs/api.md §1.7)"
    ),
)

def replayed_header(*statuses: int) -> OpenApiParameter:
    """The answer header a replay carries, for the OpenAPI document of answers ``statuses``."""
    return OpenApiParameter(
        REPLAYED_HEADER,
        str,
        OpenApiParameter.HEADER,
        enum=["true"],
        response=list(statuses),
        description="`true` on an answer given again for a retried Idempotency-Key (docs/api.md §1.7)",
    )


_CLAIM_ATTRIBUTE = "idempotency_claim"


@dataclass(frozen=True)
class DeferredWait:
    """An answer whose ``wait`` is left until the request's change has committed: ``finish``
    waits up to ``seconds`` and gives the answer to send."""

    finish: Callable[[], Response]
    seconds: float


def parse_key(raw: str) -> str:
    """The key of an ``Idempotency-Key`` header: a bare token, or a structured-field string
    (``"..."``) as the draft writes it.

    Raises:
        InvalidIdempotencyKey: 400, empty, over :data:`MAX_KEY_LENGTH`, or other characters.
    """
    value = raw.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    if not value:
        raise InvalidIdempotencyKey("is empty")
    if len(value) > MAX_KEY_LENGTH:
        raise InvalidIdempotencyKey(f"is longer than {MAX_KEY_LENGTH} characters")
    if not KEY_CHARACTERS.fullmatch(value):
        raise InvalidIdempotencyKey('may hold only visible ASCII characters, not spaces, `"` or `\\`')
    return value


def key_scope(principal: Principal) -> str:
    """Whose keys these are: ``owner:<owner>`` (``anonymous`` without authentication); a session
    token's keys are its own, ``session:<id>:<owner>``. The prefixes keep any two apart."""
    if principal.is_session_token:
        return f"session:{principal.session_id}:{principal.owner or ''}"
    return f"owner:{principal.owner}" if principal.owner is not None else "anonymous"


def fingerprint(request: Request) -> str:
    """SHA-256 (hex) of the method, the path (not the query) and the body as canonical JSON
    (keys sorted; no body, ``{}`` and ``null`` alike)."""
    data = request.data
    body = json.dumps({} if data is None else data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(f"{request.method}\n{request.path}\n{body}".encode()).hexdigest()


def defers_wait(request: Request) -> bool:
    """Whether the request holds a key, so that its ``wait`` must come after its commit."""
    return getattr(request, _CLAIM_ATTRIBUTE, None) is not None


def _answer(response: Response) -> idempotency.Answer:
    return idempotency.Answer(status=response.status_code, body=response.data, location=response.get("Location"))


def _replay(answer: idempotency.Answer) -> Response:
    headers = {REPLAYED_HEADER: "true"}
    if answer.location:
        headers["Location"] = answer.location
    return Response(answer.body, status=answer.status, headers=headers)


def idempotent(action: Callable[..., Response]) -> Callable[..., Response]:
    """Make a viewset action honour ``Idempotency-Key`` (docs/api.md §1.7).

    Only answers below 400 are stored: a refused request changes nothing, so its key is released
    and a retry runs again (and answers what is true by then); so is a server error's.

    Raises:
        InvalidIdempotencyKey: 400, a malformed key.
        IdempotencyKeyReused: 422, the key was used for another request.
        IdempotencyKeyInProgress: 409, a request with the key is still running.
    """

    @functools.wraps(action)
    def wrapper(view: Any, request: Request, *args: Any, **kwargs: Any) -> Response:
        raw = request.headers.get(HEADER)
        if raw is None:
            return action(view, request, *args, **kwargs)
        key = parse_key(raw)
        outcome = idempotency.begin(scope=key_scope(caller(request)), key=key, fingerprint=fingerprint(request))
        if isinstance(outcome, idempotency.Answer):
            return _replay(outcome)
        setattr(request, _CLAIM_ATTRIBUTE, outcome)
        try:
            with transaction.atomic():
                response = action(view, request, *args, **kwargs)
                deferred: DeferredWait | None = getattr(response, "deferred_wait", None)
                if response.status_code < 400:
                    idempotency.apply(
                        outcome,
                        _answer(response),
                        final=deferred is None,
                        wait_seconds=deferred.seconds if deferred else 0.0,
                    )
        except BaseException:
            idempotency.release(outcome)
            raise
        if response.status_code >= 400:
            idempotency.release(outcome)
            return response
        if deferred is None:
            return response
        response = deferred.finish()
        idempotency.complete(outcome, _answer(response))
        return response

    return wrapper
