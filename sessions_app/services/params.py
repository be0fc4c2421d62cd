"""Parameter values of sessions and runs: the checks of a request's ``params`` and where values go
(docs/api.md §7.15, docs/sessions.md §10).

A session's values are its non-secret session-scope values (the ``params`` column) and the values
it holds outside the database (``sessions_app.secrets``): its secret session-scope values, the
message-scope values of its run, and, for a helper session, the narrowing its caller gave it.
Services check a request with :func:`check_request` and :func:`require`, before they write
anything, and hand the values over with :func:`hold_on_commit` once their transaction commits
(before the run task they send, which is registered after it). The run loop reads them with
:func:`run_values` at every step.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from agentfiles.parameters import ParamValue, RequestParams
from agents_app.narrowing import Narrowing
from agents_app.runtime import RuntimeAgent
from foundation.errors import ForbiddenParams, ParamsRequired
from sessions_app.models import Session
from sessions_app.secrets import names_of, store

#: Field prefixes of the held values: secret session values, a run's message-scope values.
SECRET = "p:"  # noqa: S105 - a name or a code, not a credential
RUN = "r:"
#: The field of a helper session's narrowing.
NARROWING = "n"


@dataclass
class RunValues:
    """A session's parameter values for one step.

    Attributes:
        values: every parameter with a value, for the tool calls (``ToolContext.params``).
        visible: the same without message-scope values, which decide what exposed arguments the
            model sees (docs/tools.md §8.2).
        narrowing: the helper session's narrowing, ``None`` for others.
        narrowing_lost: the session was narrowed but its narrowing is no longer held.
    """

    values: dict[str, ParamValue]
    visible: dict[str, ParamValue]
    narrowing: Narrowing | None = None
    narrowing_lost: bool = False


def check_request(
    agent: RuntimeAgent, params: Mapping[str, Any] | None, *, session: Session | None = None, caller: str | None = None
) -> RequestParams:
    """Check a request's ``params`` against the session's agent (docs/api.md §7.15, first rows).

    Args:
        agent: the session's agent.
        params: the request's ``params`` (``None``: none).
        session: the session, for a request on an existing one: a sealed session takes
            ``params`` from its owner only.
        caller: the caller's owner (``None`` without authentication).
    Raises:
        ApiError: 403 ``forbidden_params``; 422 ``unknown_params`` / ``invalid_params``.
    """
    if params and session is not None and session.sealed and caller != session.owner:
        raise ForbiddenParams("the session is sealed: only its owner may set its parameters")
    return agent.parameters.check_request(params)


def given_values(session: Session, fields: Mapping[str, Any]) -> dict[str, ParamValue]:
    """A session's own values: the stored non-secret ones and the secret ones of its held ``fields``."""
    given = {name: ParamValue(value) for name, value in (session.params or {}).items()}
    for name in names_of(fields, SECRET):
        given[name] = ParamValue(fields[SECRET + name], secret=True)
    return given


def merged(agent: RuntimeAgent, given: dict[str, ParamValue], changes: Mapping[str, Any]) -> dict[str, ParamValue]:
    """``given`` with a request's session-scope ``changes`` (``None`` removes a value)."""
    result = dict(given)
    for name, value in changes.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = ParamValue(value, agent.parameters.decls[name].secret)
    return result


def message_values(agent: RuntimeAgent, values: Mapping[str, Any]) -> dict[str, ParamValue]:
    """A request's message-scope values as :class:`ParamValue` (secret when their parameter is)."""
    return {name: ParamValue(value, agent.parameters.decls[name].secret) for name, value in values.items()}


def require(
    agent: RuntimeAgent,
    given: Mapping[str, ParamValue],
    message: Mapping[str, ParamValue],
    scopes: Iterable[str],
) -> None:
    """Refuse a request that leaves a required parameter of ``scopes`` without value.

    Raises:
        ApiError: 422 ``params_required`` naming them.
    """
    missing = agent.parameters.unbound_required(agent.resolve_params(dict(given), dict(message)), scopes)
    if missing:
        raise ParamsRequired(", ".join(missing))


def stored_params(agent: RuntimeAgent, current: Mapping[str, Any] | None, changes: Mapping[str, Any]) -> dict[str, Any]:
    """The session row's ``params`` after ``changes``: non-secret values only."""
    result = dict(current or {})
    for name, value in changes.items():
        if agent.parameters.decls[name].secret:
            continue
        if value is None:
            result.pop(name, None)
        else:
            result[name] = value
    return result


def hold_on_commit(
    session_id: Any,
    *,
    secrets: Mapping[str, Any] | None = None,
    message: Mapping[str, ParamValue] | None = None,
    narrowing: Narrowing | None = None,
) -> None:
    """Once the transaction commits, hold a session's values outside the database.

    Call it before the writes that send a run task: callbacks run in the order they were
    registered, so the values are held before the run can look for them.

    Args:
        session_id: the session.
        secrets: secret session-scope values (``None`` removes one).
        message: message-scope values for the session's run as of the commit (the one the request
            started or fed), added to those that run holds.
        narrowing: a helper session's narrowing.
    """
    updates: dict[str, Any] = {SECRET + name: value for name, value in (secrets or {}).items()}
    if narrowing is not None:
        updates[NARROWING] = narrowing.to_json()
    if not updates and not message:
        return
    sid = str(session_id)

    def hold() -> None:
        if message:
            run_id = Session.objects.filter(pk=sid).values_list("run_id", flat=True).first()
            if run_id is not None:
                field_name = RUN + str(run_id)
                held_now = store().read(sid).get(field_name) or {}
                updates[field_name] = {**held_now, **{name: value.to_json() for name, value in message.items()}}
        if updates:
            store().change(sid, updates)

    transaction.on_commit(hold)


def secret_updates(agent: RuntimeAgent, changes: Mapping[str, Any]) -> dict[str, Any]:
    """The secret ones of a request's session-scope ``changes``."""
    return {name: value for name, value in changes.items() if agent.parameters.decls[name].secret}


def held(session_id: Any) -> dict[str, Any]:
    """Every value a session holds outside the database."""
    return store().read(str(session_id))


def secret_names(session_id: Any) -> list[str]:
    """The names of the secret parameters a session holds (never their values), for its view."""
    return names_of(held(session_id), SECRET)


def active_run_values(session: Session, fields: Mapping[str, Any] | None = None) -> dict[str, ParamValue]:
    """The message-scope values the session's current run holds (``{}`` without a run)."""
    if session.run_id is None:
        return {}
    fields = held(session.pk) if fields is None else fields
    return {name: ParamValue.from_json(value) for name, value in (fields.get(RUN + str(session.run_id)) or {}).items()}


def run_values(agent: RuntimeAgent, session: Session) -> RunValues:
    """The session's values for a step of its current run (resolved again at each step)."""
    fields = held(session.pk)
    given = given_values(session, fields)
    message = active_run_values(session, fields)
    narrowed = bool(session.parsed_document().get("narrowed"))
    narrowing = Narrowing.from_json(fields[NARROWING]) if NARROWING in fields else None
    return RunValues(
        values=agent.resolve_params(given, message),
        visible=agent.resolve_params(given),
        narrowing=narrowing,
        narrowing_lost=narrowed and narrowing is None,
    )


def missing_session_values(agent: RuntimeAgent, session: Session) -> list[str]:
    """The required session-scope parameters the session has lost (a secret after a restart)."""
    given = given_values(session, held(session.pk))
    return agent.parameters.unbound_required(agent.resolve_params(given), ["session"])


def drop_run_on_commit(session_id: Any, run_id: Any) -> None:
    """Once the transaction commits, drop the message-scope values of a run that stopped."""
    if run_id is None:
        return
    sid, field_name = str(session_id), RUN + str(run_id)
    transaction.on_commit(lambda: store().change(sid, {field_name: None}))


def forget_on_commit(session_ids: Iterable[Any]) -> None:
    """Once the transaction commits, forget what deleted sessions held."""
    ids = [str(sid) for sid in session_ids]

    def forget() -> None:
        for sid in ids:
            store().forget(sid)

    transaction.on_commit(forget)
