"""Session and Continuation rows (docs/sessions.md §9).

The conversation itself is the agents-exe session document, stored as TEXT rather than a JSON
column: PostgreSQL's jsonb refuses ``\\u0000`` and reorders keys, and a session file must come
back byte-compatible. Every stored change increments ``version``; writes are fenced with
``UPDATE ... WHERE version = n`` (see ``sessions_app.store``).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.db import models

from agentsite.common import TextJSONField
from sessions_app.document import pending_calls


class Session(models.Model):
    """One conversation, its metadata and its run lease.

    The statuses are those of docs/api.md §3. A run is requested by setting ``status=running``
    with a fresh ``run_id``; a worker claims it by writing ``run_owner`` and ``run_lease_until``.
    Without a run, the status is the one the
    turns imply (``document.status_of``: ``ready``, ``idle`` or ``waiting_external``) unless it is
    ``paused`` or ``failed``. Every change of status goes through ``sessions_app.store`` and is
    made by one of these (services are in ``sessions_app/services/``):

    ============================  =====================  ====================================    """

    class Status(models.TextChoices):
        READY = "ready"
        RUNNING = "running"
        WAITING_EXTERNAL = "waiting_external"
        IDLE = "idle"
        FAILED = "failed"
        PAUSED = "paused"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent_slug = models.CharField(max_length=200, db_index=True)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="children")
    owner = models.CharField(max_length=200, null=True, blank=True)
    status = models.CharField(max_length=32, choices=Status.choices, default=Status.READY)
    status_detail = models.TextField(null=True, blank=True)
    version = models.IntegerField(default=0)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    forked_from = models.UUIDField(null=True, blank=True)
    sealed = models.BooleanField(default=False)
    session_token_sha256 = models.CharField(max_length=64, null=True, blank=True)
    params = TextJSONField(default=dict, blank=True)
    run_id = models.UUIDField(null=True, blank=True)
    run_mode = models.CharField(max_length=32, null=True, blank=True)
    run_owner = models.CharField(max_length=200, null=True, blank=True)
    run_lease_until = models.DateTimeField(null=True, blank=True)
    # the seq of the newest mail envelope: a run learns that unread mail exists without a query
    last_mail_seq = models.IntegerField(default=0)
    document_json = models.TextField()

    class Meta:
        indexes = [
            # the listing filters: by status, by parent, by owner, newest first
            models.Index(fields=["status", "updated_at"]),
            models.Index(fields=["owner", "updated_at"]),
            models.Index(fields=["updated_at"]),
        ]

    def __str__(self) -> str:
        return f"{self.agent_slug} {self.id} ({self.status})"

    @property
    def document(self) -> dict[str, Any]:
        """The session document (agents-exe JSON, turns newest first): a fresh copy to change."""
        return json.loads(self.document_json)

    def parsed_document(self) -> dict[str, Any]:
        """The session document, parsed once per stored version: read it, never change it."""
        cached = self.__dict__.get("_parsed_document")
        if cached is None or cached[0] is not self.document_json:
            cached = (self.document_json, json.loads(self.document_json))
            self.__dict__["_parsed_document"] = cached
        return cached[1]

    @property
    def pending_calls(self) -> list[dict[str, Any]]:
        """The deferred calls waiting for a continuation (DeferredCallView dicts)."""
        return pending_calls(self.parsed_document())

    @property
    def params_or_empty(self) -> dict[str, Any]:
        """The stored non-secret parameter values (``{}`` when none)."""
        return self.params or {}


class Continuation(models.Model):
    """A deferred tool call waiting for an external worker, addressed by its token.

    ``result`` and ``completed_at`` are set when a worker posts the result; ``applied_at`` when the
    result has been written into the session document (at once without a run, or by the run
    before its next step).
    """

    token = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="continuations")
    tool_call_id = models.CharField(max_length=64)
    provider_call_id = models.CharField(max_length=200, blank=True, default="")
    call = TextJSONField()
    disposition = TextJSONField()
    result = TextJSONField(null=True, blank=True)
    created_at = models.DateTimeField()
    completed_at = models.DateTimeField(null=True, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["session", "completed_at"])]

    def __str__(self) -> str:
        return f"continuation {self.token} of {self.session_id}"


class Event(models.Model):
    """One event of the live streams, kept for replay (docs/api.md §9.7).

    ``seq`` is global and increasing. Events are inserted in the transaction of the change they
    report, and on PostgreSQL under a transaction-scoped advisory lock, so they become visible in
    ``seq`` order: a reader that has seen ``seq = n`` never sees a smaller one appear later.
    ``session_id`` is not a foreign key: ``session.deleted`` outlives its session.
    """

    seq = models.BigAutoField(primary_key=True)
    session_id = models.UUIDField(db_index=True)
    owner = models.CharField(max_length=200, null=True, blank=True)
    kind = models.CharField(max_length=64)
    payload_json = models.TextField()
    created_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"{self.seq} {self.kind} {self.session_id}"


class EventRetention(models.Model):
    """A single row: the highest event ``seq`` deleted by retention (replays from below it are
    answered ``Agents-Replay: unavailable``)."""

    pruned_through = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"events pruned through {self.pruned_through}"


class MailEnvelope(models.Model):
    """One piece of mail to a session (docs/sessions.md §6.1).

    ``seq`` is a total order per session; ``mail_id`` makes posting idempotent. Mail with
    ``seq`` at or below the document's ``mailCursor`` has been consumed by a stored step.
    """

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="mail")
    seq = models.IntegerField()
    mail_id = models.UUIDField()
    sender = TextJSONField()
    priority = models.CharField(max_length=16, default="normal")
    hops = models.IntegerField(default=0)
    body = TextJSONField()
    sent_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "seq"], name="mail_seq_per_session"),
            models.UniqueConstraint(fields=["session", "mail_id"], name="mail_id_per_session"),
        ]

    def __str__(self) -> str:
        return f"mail {self.seq} of {self.session_id}"


class BackgroundCall(models.Model):
    """A tool call running outside the step: a ``runAsync`` call (its own Celery task) or a call
    detached by an interrupt (a thread of the worker that started it).

    ``attached`` calls are waited for by the run; a detached call's result is posted to the
    session as ``toolCallFinished`` mail. ``heartbeat_at`` is renewed while the call runs: a
    running call whose heartbeat is older than the lease is orphaned (its process died).
    """

    class State(models.TextChoices):
        RUNNING = "running"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELLED = "cancelled"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="background_calls")
    tool_call_id = models.CharField(max_length=64)
    provider_call_id = models.CharField(max_length=200, blank=True, default="")
    tool = models.CharField(max_length=200)
    call = TextJSONField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.RUNNING)
    result = TextJSONField(null=True, blank=True)
    attached = models.BooleanField(default=True)
    cancel_requested = models.BooleanField(default=False)
    executor = models.CharField(max_length=200, blank=True, default="")
    heartbeat_at = models.DateTimeField()
    created_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.tool} {self.tool_call_id} ({self.state})"
