"""Session and Continuation rows (docs/sessions.md §9).

The conversation itself is the agents-exe session document, stored as TEXT rather than a JSON
column: PostgreSQL's jsonb refuses ``\\u0000`` and reorders keys, and a session file must come
back byte-compatible. Every stored change increments ``version``; writes are fenced with
``UPDATE ... WHERE version = n`` (see ``sessions_app.store``).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import OrderedDict
from typing import Any

from django.conf import settings
from django.db import models

from agentfiles.document import pending_calls
from agentfiles.document_shape import header_problem, turn_problem
from agentfiles.session_text import FileLayout, session_text
from agentfiles.usage import document_totals
from foundation.common import TextJSONField, dump_json_text
from foundation.errors import UnreadableSession


class Session(models.Model):
    """One conversation, its metadata and its run lease.

    The statuses are those of docs/api.md §3. A run is requested by setting ``status=running``
    with a fresh ``run_id``; a worker claims it by writing ``run_owner`` and ``run_lease_until``.
    Without a run, the status is the one the turns imply (``document.status_of``: ``ready``,
    ``idle`` or ``waiting_external``, or ``running`` while a helper session works for it) unless
    it is ``paused`` or ``failed``. Every change of status goes through ``sessions_app.store``,
    which refuses one that is not a row of this table (``sessions_app.transitions``, where the
    table is data; docs/sessions.md §2.1). ``at rest`` is any status of a session without a run
    (``ready``, ``idle``, ``waiting_external``, ``failed``, ``paused``), ``implied`` any status
    the turns imply; ``by`` names functions of ``sessions_app/services/`` and, ``runner.``, of
    the run loop. A store that keeps the status is no change.

    =========  =========  ==========================================================================
    from       to         by
    =========  =========  ==========================================================================
    (new)      ready      ``sessions.session_create`` (no prompt, or ``run: none``)
    (new)      running    ``sessions.session_create``, ``tree.child_create`` (a helper call),
                          ``agentmail.session_spawn``
    (new)      implied    ``sessions.session_import``, ``tree.session_fork``
    at rest    running    ``sessions.message_post``, ``sessions.session_resume``,
                          ``continuations.continuation_complete`` (the last deferred result,
                          with ``resume``), ``mail.request_run`` (mail that wakes it, a Resume
                          control), ``tree.free_stranded_children`` (a ``ready`` helper its
                          parent waits on)
    at rest    ready      ``sessions.message_post`` (with ``run: none``)
    at rest    paused     ``mail.after_mail`` (a Pause control without a run)
    at rest    implied    ``mail.after_mail`` (a Resume control on a paused session),
                          ``continuations.continuation_complete`` (without ``resume``),
                          ``sessions.session_from_file``
    running    implied    ``runner._store_step`` (a step that ends the run), ``runner._finish``,
                          ``continuations.continuation_complete`` (a helper's answer to a parent
                          without a run), ``tree.cancel_helpers``, ``recovery.recover_stale_runs``
                          (a dead worker's run)
    running    paused     ``runner._finish`` (a Pause control), ``recovery.recover_stale_runs``
    running    failed     ``runner._finish`` (a provider error or any exception; ``status_detail``
                          says why), ``runner._fail_unreadable``, ``recovery.recover_stale_runs``
    =========  =========  ==========================================================================
    """

    class Status(models.TextChoices):
        READY = "ready"
        RUNNING = "running"
        WAITING_EXTERNAL = "waiting_external"
        IDLE = "idle"
        FAILED = "failed"
        PAUSED = "paused"

    class RunMode(models.TextChoices):
        """How far a run goes (``run_mode``, docs/sessions.md §4.1): one step, or until the
        session is blocked (a final answer, deferred calls, a pause)."""

        STEP = "step"
        UNTIL_BLOCKED = "until_blocked"

    #: The ``run`` of a request that stores its turn and starts no run (docs/api.md §7.1, §7.5).
    NO_RUN = "none"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent_slug = models.TextField(db_index=True)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="children")
    owner = models.TextField(null=True, blank=True)
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
    run_owner = models.TextField(null=True, blank=True)
    run_lease_until = models.DateTimeField(null=True, blank=True)
    # the seq of the newest mail envelope: a run learns that unread mail exists without a query
    last_mail_seq = models.IntegerField(default=0)
    # how many times the recovery took this session's run over from a worker that died: a
    # helper session is resumed after its first takeovers only (docs/sessions.md §4.8)
    takeovers = models.IntegerField(default=0)
    # the session document without its turns (they are Turn rows), its keys in their order
    header_json = models.TextField()
    turn_count = models.IntegerField(default=0)
    # how the session file it was imported from was laid out (agentfiles.session_text.FileLayout),
    # so that its export gives the same bytes back; null for agents-exe's own layout
    file_layout = TextJSONField(null=True, blank=True)
    # not a column: the session token a create request made, set on the instance its answer
    # renders (shown that once, docs/api.md §10.5); absent on every other instance
    session_token: str

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
        """The session document (agents-exe JSON, turns newest first), to change and store.

        The dict and its ``turns`` list are this caller's own; the turns in it are shared with
        every reader of this version and are never changed in place: a changed turn is a new
        dict (``document.current_partial`` copies the head it changes).
        """
        document = dict(self.parsed_document())
        document["turns"] = list(document["turns"])
        return document

    def parsed_document(self) -> dict[str, Any]:
        """The session document of this version, shared by every reader: read it, never change it.

        Assembled from ``header_json`` and the Turn rows, and kept for the next reader of the
        same version (:data:`DOCUMENTS`); a newer version reads only the turns written since.

        Raises:
            UnreadableSession: a row this server cannot read (``agentfiles.document_shape``).
        """
        return DOCUMENTS.get(self)

    @property
    def usage_totals(self) -> dict[str, int]:
        """Token and byte totals of this version's document (docs/sessions.md §1.11)."""
        return document_totals(self.parsed_document())

    def document_text(self) -> str:
        """The session document as the store keeps it (ASCII JSON text; not a session file: that is
        :meth:`session_file_text`)."""
        return dump_json_text(self.parsed_document())

    def session_file_text(self) -> str:
        """The session file of this version, as agents-exe writes it, in the layout of the file it was
        imported from (docs/sessions.md §1.12)."""
        return session_text(self.parsed_document(), FileLayout.from_json(self.file_layout))

    @property
    def pending_calls(self) -> list[dict[str, Any]]:
        """The deferred calls waiting for a continuation (DeferredCallView dicts)."""
        return pending_calls(self.parsed_document())

    @property
    def params_or_empty(self) -> dict[str, Any]:
        """The stored non-secret parameter values (``{}`` when none)."""
        return self.params or {}


class Turn(models.Model):
    """One turn of a session's document, stored on its own so that a step writes what it adds.

    ``position`` counts from the oldest turn (0); the document lists turns newest first.
    ``version`` is the session version that wrote the row, so a reader holding an older version
    reads only the rows written since. The token columns copy the provider's usage of an
    ``LlmTurn`` (0 for other turns and answers without usage; ``reports_usage`` says which), and
    ``recorded_at`` is when the row was first written, so that usage adds up per agent, owner and
    day without reading documents (docs/sessions.md §1.11).
    """

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="turn_rows")
    position = models.IntegerField()
    version = models.IntegerField()
    turn_json = models.TextField()
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cached_tokens = models.BigIntegerField(default=0)
    reports_usage = models.BooleanField(default=False)
    recorded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "position"], name="turn_position_per_session")]
        indexes = [
            # a newer version's rows, for a reader that holds an older one
            models.Index(fields=["session", "version"]),
            # the usage totals of GET /v1/usage, by day
            models.Index(fields=["recorded_at"], name="turn_usage_recorded", condition=models.Q(reports_usage=True)),
        ]

    def __str__(self) -> str:
        return f"turn {self.position} of {self.session_id}"


class DocumentCache:
    """The documents of the sessions this process read or wrote lately, by session and version.

    A step of a run reads and writes the same session again and again: keeping its document
    saves parsing the whole history at every step. Bounded by the size of the cached turns'
    JSON (``AGENTS_DOCUMENT_CACHE_BYTES``, 8 MiB by default; the parsed documents take a few
    times that in memory), least recently used first out.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # session id -> (version, document, size in bytes)
        self._entries: OrderedDict[Any, tuple[int, dict[str, Any], int]] = OrderedDict()
        self._bytes = 0

    def get(self, session: Session) -> dict[str, Any]:
        """The document of ``session`` at its version (loading what is missing from the database)."""
        with self._lock:
            entry = self._entries.get(session.pk)
            if entry is not None:
                self._entries.move_to_end(session.pk)
        if entry is not None and entry[0] == session.version:
            return entry[1]
        document, size = _load_document(session, entry)
        self.put(session.pk, session.version, document, size)
        return document

    def put(self, session_id: Any, version: int, document: dict[str, Any], size: int) -> None:
        """Keep ``document`` as version ``version`` of the session (``size``: its turns' bytes)."""
        with self._lock:
            old = self._entries.pop(session_id, None)
            if old is not None:
                self._bytes -= old[2]
            self._entries[session_id] = (version, document, size)
            self._bytes += size
            while self._bytes > settings.AGENTS["DOCUMENT_CACHE_BYTES"] and len(self._entries) > 1:
                _, (_, _, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped

    def size_of(self, session_id: Any) -> int | None:
        """The bytes counted for a cached session, or ``None``."""
        with self._lock:
            entry = self._entries.get(session_id)
        return entry[2] if entry is not None else None

    def forget(self, session_id: Any) -> None:
        """Drop a session (deleted)."""
        with self._lock:
            old = self._entries.pop(session_id, None)
            if old is not None:
                self._bytes -= old[2]


def _load_document(session: Session, known: tuple[int, dict[str, Any], int] | None) -> tuple[dict[str, Any], int]:
    """Assemble a session's document: its header, then its turns newest first.

    With ``known`` (an older version's document and its size), only the rows written after that
    version are read; the other turns are the known document's.

    Returns:
        The document, and the bytes of JSON it was read from (for the cache's bound).
    """
    document = _parse(session, session.header_json, "the document")
    problem = header_problem(document)
    if problem is not None:
        raise UnreadableSession(session.pk, problem)
    rows = Turn.objects.filter(session_id=session.pk, position__lt=session.turn_count)
    oldest_first: list[Any] = [None] * session.turn_count
    size = len(session.header_json)
    if known is not None and known[0] < session.version:
        old_turns = known[1]["turns"]
        for position in range(min(len(old_turns), session.turn_count)):
            oldest_first[position] = old_turns[len(old_turns) - 1 - position]
        rows = rows.filter(version__gt=known[0])
        size = known[2]
    for position, text in rows.values_list("position", "turn_json"):
        where = f"turns[{session.turn_count - 1 - position}]"
        turn = oldest_first[position] = _parse(session, text, where)
        problem = turn_problem(turn)
        if problem is not None:
            raise UnreadableSession(session.pk, f"{where}: {problem}")
        size += len(text)
    if any(turn is None for turn in oldest_first):
        # a row the known document did not have and no newer row wrote: read them all again
        return _load_document(session, None)
    document["turns"] = oldest_first[::-1]
    return document, size


def _parse(session: Session, text: str, where: str) -> Any:
    """JSON text of a session's row.

    Raises:
        UnreadableSession: it is not JSON.
    """
    try:
        return json.loads(text)
    except ValueError as error:
        raise UnreadableSession(session.pk, f"{where} is not JSON ({error})") from None


#: The documents this process holds (see :class:`DocumentCache`).
DOCUMENTS = DocumentCache()


class Continuation(models.Model):
    """A deferred tool call waiting for an external worker, addressed by its token.

    ``result`` and ``completed_at`` are set when a worker posts the result; ``applied_at`` when the
    result has been written into the session document (at once without a run, or by the run
    before its next step).
    """

    token = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="continuations")
    tool_call_id = models.TextField()
    provider_call_id = models.TextField(blank=True, default="")
    # the called tool's name as the model wrote it, kept apart from ``call`` for the admin's filter
    tool = models.TextField(blank=True, default="")
    call = TextJSONField()
    disposition = TextJSONField()
    result = TextJSONField(null=True, blank=True)
    created_at = models.DateTimeField()
    completed_at = models.DateTimeField(null=True, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    # the W3C traceparent of the call's execute_tool span: its completion links to it
    # (docs/observability.md §1.2); empty when tracing was off
    traceparent = models.TextField(blank=True, default="")

    class Meta:
        indexes = [
            models.Index(fields=["session", "completed_at"]),
            # the admin's queue of calls waiting for an answer, oldest first
            models.Index(fields=["completed_at", "created_at"], name="continuation_queue"),
        ]
        permissions = [("answer_continuation", "Can answer pending calls")]
        verbose_name = "deferred call"

    def __str__(self) -> str:
        return f"continuation {self.token} of {self.session_id}"


class Event(models.Model):
    """One event of the live streams, kept for replay (docs/api.md §9.7).

    ``seq`` is global and increasing. Events are inserted in the transaction of the change they
    report; on PostgreSQL with a provisional negative ``seq``, numbered just before commit under
    a transaction-scoped advisory lock, so they become visible in ``seq`` order: a reader that
    has seen ``seq = n`` never sees a smaller one appear later (docs/api.md §9.7).
    ``session_id`` is not a foreign key: ``session.deleted`` outlives its session.
    """

    seq = models.BigAutoField(primary_key=True)
    session_id = models.UUIDField(db_index=True)
    owner = models.TextField(null=True, blank=True)
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


class PeriodicLease(models.Model):
    """One row per periodic task (``sessions.sweep``, ``events.prune``, ``idempotency.prune``):
    which process runs it now and when it last ran (docs/sessions.md §4.9).

    Every worker and embedded server tries to take the row with one conditional UPDATE when the
    task is due (``started_at`` a period ago) and nobody holds it (``held_until`` passed); the
    one that changed the row runs the task, renewing ``held_until`` while it runs, then writes
    ``finished_at``. So exactly one process runs each task at a time, on SQLite as on PostgreSQL,
    and a holder that dies frees the row when its hold expires.
    """

    #: The task names, the rows' keys.
    SWEEP = "sessions.sweep"
    PRUNE = "events.prune"
    PRUNE_IDEMPOTENCY_KEYS = "idempotency.prune"

    name = models.CharField(max_length=64, primary_key=True)
    holder = models.TextField(null=True, blank=True)
    held_until = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} (last finished {self.finished_at})"


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
    tool_call_id = models.TextField()
    provider_call_id = models.TextField(blank=True, default="")
    tool = models.TextField()
    call = TextJSONField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.RUNNING)
    result = TextJSONField(null=True, blank=True)
    attached = models.BooleanField(default=True)
    cancel_requested = models.BooleanField(default=False)
    executor = models.TextField(blank=True, default="")
    heartbeat_at = models.DateTimeField()
    created_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.tool} {self.tool_call_id} ({self.state})"


class StartedCall(models.Model):
    """A tool call a step started running, recorded (and committed) before it runs.

    The step's store deletes its session's rows. A row found by a later step of the same head
    is a call whose process died before its result was stored: it may or may not have run, so
    it is reported to the model as interrupted rather than run again, unless its tool is safe to
    retry (docs/sessions.md §3.2). ``turn`` is the position (oldest first) of the LlmTurn whose
    call it is, ``call_index`` the call's place in it.
    """

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="started_calls")
    turn = models.IntegerField()
    call_index = models.IntegerField()
    provider_call_id = models.TextField(blank=True, default="")
    tool = models.TextField()
    started_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "turn", "call_index"], name="started_call_per_turn")]

    def __str__(self) -> str:
        return f"{self.tool} {self.provider_call_id} started in {self.session_id}"


class SessionWatch(models.Model):
    """A session's ``watch-session``: events of ``watched`` forwarded to ``watcher`` as
    ``watchedEvent`` mail until ``expires_at`` (docs/guide-sessions.md §3).

    Kept in the database, so a watch outlives the process that made it and every worker forwards
    it; it dies with either session (cascade) or at its deadline.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    watcher = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="watches")
    watched = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="watchers")
    events = TextJSONField(default=list)
    tool = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        indexes = [
            # events.emit asks, for every event, whether the event's session has a live watch
            models.Index(fields=["watched", "expires_at"], name="watch_watched_deadline"),
        ]

    def __str__(self) -> str:
        return f"{self.watcher_id} watches {self.watched_id}"


class IdempotencyKey(models.Model):
    """One ``Idempotency-Key`` a client sent on a route that starts or changes a run (docs/api.md §1.7).

    ``scope`` is whom the key belongs to (``sessions_app.idempotent.key_scope``: the owner, or a
    session token of the owner's) and ``key_sha256`` the key's digest, never the key itself: the
    unique constraint on both is what lets only one request claim a key. The row is inserted
    ``in_progress`` in its own transaction before the request runs; the request's change and the
    move to ``applied`` (the answer as the change left it) commit together, and the answer after
    a ``wait`` makes it ``completed``. ``claim`` is the request holding the key: a request that
    takes over an abandoned ``in_progress`` key (its server died before changing anything)
    writes a new one, so the first can no longer commit.

    ``in_progress -> applied -> completed``; ``in_progress -> completed`` without a wait;
    ``in_progress`` rows are deleted when the request fails, so that a retry can run.
    """

    class State(models.TextChoices):
        IN_PROGRESS = "in_progress"
        APPLIED = "applied"
        COMPLETED = "completed"

    scope = models.TextField()
    key_sha256 = models.CharField(max_length=64)
    fingerprint = models.CharField(max_length=64)
    state = models.CharField(max_length=16, choices=State.choices, default=State.IN_PROGRESS)
    claim = models.UUIDField(default=uuid.uuid4)
    lease_until = models.DateTimeField()
    response_status = models.IntegerField(null=True, blank=True)
    response_body = models.TextField(null=True, blank=True)
    location = models.TextField(null=True, blank=True)
    # a session token the answer showed, encrypted with a key derived from the Idempotency-Key
    sealed_secret = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["scope", "key_sha256"], name="idempotency_key_per_scope")]
        indexes = [
            # idempotency.prune (beat) deletes the rows whose time is over
            models.Index(fields=["expires_at"], name="idempotency_key_expiry"),
        ]

    def __str__(self) -> str:
        return f"idempotency key {self.key_sha256[:12]} of {self.scope or 'anonymous'} ({self.state})"


class StepTiming(models.Model):
    """How long one stored step took, for the operators' dashboard (docs/console.md §2).

    ``kind`` is ``model`` (the step asked the model: ``duration_ms`` is the model call) or
    ``tools`` (the step ran a round of tool calls). Written in the transaction that stores the
    step; deleted with the events past their retention (``periodic.prune``).
    """

    class Kind(models.TextChoices):
        MODEL = "model"
        TOOLS = "tools"

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="step_timings")
    agent_slug = models.TextField()
    owner = models.TextField(null=True, blank=True)
    kind = models.CharField(max_length=8, choices=Kind.choices)
    duration_ms = models.IntegerField()
    finished_at = models.DateTimeField()

    class Meta:
        indexes = [
            # the dashboard's window, and the retention's delete
            models.Index(fields=["finished_at"], name="step_timing_finished"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} step of {self.session_id}: {self.duration_ms} ms"
