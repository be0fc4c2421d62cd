"""Agent-to-agent mail, the rules (issue 16, acceptance 6): scopes, hops, the unread limit, wake
rules, spawn refusals and watch forwarding, through the services the System toolbox calls."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.db import close_old_connections

from agentfiles.loader import load_agent_files
from agents_app.registry import AgentRegistry, set_registry
from agents_app.runtime import reset_runtime_agents
from devtools.mockllm import MockLlmServer
from foundation.common import db_now
from foundation.errors import MailboxFull
from sessions_app import background, events, mailbox
from sessions_app.event_types import EventKind, RunStopped
from sessions_app.models import BackgroundCall, MailEnvelope, Session, SessionWatch
from sessions_app.ports import DbSessionsPort
from sessions_app.services import agentmail, sessions
from sessions_app.services.mail import mail_send
from sessions_app.store import store
from tests.harness import write_agent
from tools_app.ports import SendRefused, ToolCallNotFound, WaitOutcome


@pytest.fixture
def agents(tmp_path: Path, llm_server: Callable[..., MockLlmServer]) -> Iterator[None]:
    llm = llm_server({"rules": [{"reply": {"content": "ok"}}]})
    files = [
        write_agent(tmp_path, "kid", llm.url),
        write_agent(tmp_path, "narrowed", llm.url, parameters=[{"name": "team", "scope": "session"}]),
        write_agent(
            tmp_path,
            "boss",
            llm.url,
            extraAgents=[
                {"slug": "kid", "path": "kid.json"},
                {"slug": "narrowed", "path": "narrowed.json", "with": {"team": {"tag": "Literal", "contents": "a"}}},
            ],
        ),
        write_agent(tmp_path, "peer", llm.url),
        write_agent(tmp_path, "loner", llm.url, mailScope="own"),
        write_agent(tmp_path, "capped", llm.url, maxWaitSeconds=1),
        write_agent(
            tmp_path,
            "eager",
            llm.url,
            wakeOn=["user", "peer"],
            mailScope="all",
            interruptScope="all",
            mailboxMaxUnread=2,
            maxMailHops=1,
        ),
    ]
    set_registry(AgentRegistry(load_agent_files(files), {}))
    reset_runtime_agents()
    yield
    set_registry(None)
    reset_runtime_agents()


def _session(slug: str, parent: Session | None = None, owner: str | None = None) -> Session:
    return sessions.session_create(
        agent_slug=slug, prompt=None, media=None, run="none", parent_id=parent.pk if parent else None, owner=owner
    )


def _send(sender: Session, to: Session | str, **options) -> dict:
    values = {"text": "hello", "in_reply_to": None, "expects_reply": False, "interrupt": False, **options}
    return agentmail.message_send(sender_id=str(sender.pk), to=str(getattr(to, "pk", to)), **values)


def _refusal(call: Callable[[], object]) -> str:
    with pytest.raises(SendRefused) as raised:
        call()
    return raised.value.code


@pytest.mark.django_db
def test_a_message_is_mail_from_the_sending_session(agents: None) -> None:
    boss = _session("boss")
    kid = _session("kid", boss)
    receipt = _send(boss, kid, text="do the thing", expects_reply=True)
    envelope = MailEnvelope.objects.get(session=kid, mail_id=receipt["id"])
    assert envelope.sender == {"tag": "session", "sessionId": str(boss.pk), "agent": "boss"}
    assert envelope.body == {"tag": "agentMessage", "text": "do the thing", "inReplyTo": None, "expectsReply": True}
    assert (envelope.priority, envelope.hops, receipt["hops"], receipt["duplicate"]) == ("normal", 0, 0, False)
    text, _ = mailbox.render(envelope)
    assert text.startswith(f'[mail {envelope.mail_id} from session {boss.pk} (agent "boss"), expects reply]\n')


@pytest.mark.django_db
def test_mail_wakes_a_session_only_when_its_sender_kind_is_in_wake_on(agents: None) -> None:
    boss = _session("boss")
    kid = _session("kid", boss)
    peer, eager, other = _session("peer"), _session("eager"), _session("eager")
    Session.objects.filter(pk__in=[kid.pk, peer.pk, eager.pk]).update(status=Session.Status.IDLE)
    assert _send(kid, boss)["recipient_status"] == "running"  # a child: in the default wakeOn
    assert _send(eager, peer)["recipient_status"] == "idle"  # a peer: not in the default wakeOn
    assert _send(other, eager)["recipient_status"] == "running"  # eager lists peer in its wakeOn
    assert MailEnvelope.objects.filter(session=peer).count() == 1


@pytest.mark.django_db
def test_scopes_decide_whom_an_agent_may_mail_and_interrupt(agents: None) -> None:
    boss = _session("boss")
    kid = _session("kid", boss)
    grandkid = _session("kid", kid)
    stranger = _session("peer")
    assert _send(grandkid, boss)["seq"] == 1  # subtree: an ancestor
    assert _send(boss, grandkid)["seq"] == 1  # subtree: a descendant
    assert _refusal(lambda: _send(boss, stranger)) == "not_permitted"
    assert _refusal(lambda: _send(kid, boss, interrupt=True)) == "not_permitted"  # interruptScope: children
    assert _send(boss, grandkid, interrupt=True)["seq"] == 2
    assert MailEnvelope.objects.get(session=grandkid, seq=2).priority == "interrupt"
    loner = _session("loner", boss)
    assert _refusal(lambda: _send(loner, boss)) == "not_permitted"  # own: itself only
    assert _send(loner, loner)["seq"] == 1
    assert MailEnvelope.objects.filter(session=stranger).count() == 0


@pytest.mark.django_db
def test_unknown_recipients_include_other_owners_sessions_and_non_ids(agents: None) -> None:
    boss = _session("boss", owner="alice")
    theirs = _session("eager", owner="bob")
    assert _refusal(lambda: _send(boss, theirs)) == "unknown_recipient"
    assert _refusal(lambda: _send(boss, "not-a-session")) == "unknown_recipient"
    assert _refusal(lambda: _send(boss, str(uuid.uuid4()))) == "unknown_recipient"
    assert MailEnvelope.objects.count() == 0


@pytest.mark.django_db
def test_a_reply_counts_one_hop_more_and_max_mail_hops_stops_the_chain(agents: None) -> None:
    eager, peer = _session("eager"), _session("eager")
    first = _send(eager, peer)
    assert first["hops"] == 0
    second = _send(peer, eager, in_reply_to=first["id"])
    assert second["hops"] == 1
    # maxMailHops is 1: answering a hop-1 message would be hop 2
    assert _refusal(lambda: _send(eager, peer, in_reply_to=second["id"])) == "too_many_hops"
    assert MailEnvelope.objects.filter(session=peer).count() == 1
    # user mail resets the count: it is not session mail
    user = mail_send(session_id=eager.pk, body={"tag": "userMessage", "query": "hi"}, sender={"tag": "user"})
    assert _send(eager, peer, in_reply_to=user["id"])["hops"] == 0


@pytest.mark.django_db
def test_a_full_mailbox_refuses_messages_but_not_controls(agents: None) -> None:
    boss, eager, other = _session("boss"), _session("eager"), _session("eager")
    Session.objects.filter(pk=eager.pk).update(status=Session.Status.PAUSED)
    for _ in range(2):
        _send(other, eager)
    assert _refusal(lambda: _send(boss, eager)) == "not_permitted"  # outside the boss's subtree
    assert _refusal(lambda: _send(other, eager)) == "mailbox_full"
    with pytest.raises(MailboxFull) as raised:
        mail_send(session_id=eager.pk, body={"tag": "userMessage", "query": "hi"}, sender={"tag": "user"})
    assert raised.value.status == 429
    assert raised.value.body()["error"] == "mailbox_full"
    assert mail_send(session_id=eager.pk, body=mailbox.RESUME, sender={"tag": "user"})["seq"] == 3
    assert MailEnvelope.objects.filter(session=eager).count() == 3


@pytest.mark.django_db
def test_spawn_starts_a_child_of_a_helper_and_refuses_others(agents: None) -> None:
    boss = _session("boss")
    spawned = agentmail.session_spawn(parent_id=str(boss.pk), agent="kid", message="count to three")
    child = Session.objects.get(pk=spawned["session_id"])
    assert (child.parent_id, child.agent_slug, child.status) == (boss.pk, "kid", "running")
    assert child.document["spawnedBy"] == str(boss.pk)
    assert child.document["turns"][0]["contents"]["userQuery"] == "count to three"
    assert _refusal(lambda: agentmail.session_spawn(parent_id=str(boss.pk), agent="peer", message="x")) == (
        "not_permitted"
    )
    assert _refusal(lambda: agentmail.session_spawn(parent_id=str(boss.pk), agent="narrowed", message="x")) == (
        "not_permitted"
    )
    assert Session.objects.filter(parent=boss).count() == 1


@pytest.mark.django_db
def test_a_spawned_child_answers_its_parent_by_mail(agents: None) -> None:
    boss = _session("boss")
    spawned = agentmail.session_spawn(parent_id=str(boss.pk), agent="kid", message="go")
    child = Session.objects.get(pk=spawned["session_id"])
    document = child.document
    document["turns"].insert(0, {"tag": "LlmTurn", "contents": {"llmResponse": {"responseText": "three"}}})
    store(child, document, status=Session.Status.IDLE, run_id=None, run_mode=None)
    agentmail.spawned_answer(child.pk)
    envelope = MailEnvelope.objects.get(session=boss)
    assert envelope.sender == {"tag": "session", "sessionId": str(child.pk), "agent": "kid"}
    assert envelope.body["text"] == "three"


@pytest.mark.django_db
def test_watches_forward_matching_events_and_end_with_unwatch(agents: None) -> None:
    boss = _session("boss")
    kid = _session("kid", boss)
    watch = agentmail.watch_create(
        watcher_id=str(boss.pk), session=str(kid.pk), events=["run.stopped", "tool.completed"], tool="bash_*", ttl=60
    )
    assert watch["events"] == ["run.stopped", "tool.completed"]
    stopped = events.emit(EventKind.RUN_STOPPED, kid.pk, None, RunStopped(status="idle"))
    other_tool = events.emit(EventKind.TOOL_COMPLETED, kid.pk, None, {"tool_call_id": "c1", "tool": "mcp_x"})
    updated = events.emit(EventKind.SESSION_UPDATED, kid.pk, None, {})
    assert [agentmail.watched_event_forward(e.seq) for e in (stopped, other_tool, updated)] == [1, 0, 0]
    envelope = MailEnvelope.objects.get(session=boss)
    assert envelope.sender == {"tag": "system", "source": "watch"}
    assert envelope.body == {
        "tag": "watchedEvent",
        "sessionId": str(kid.pk),
        "event": "run.stopped",
        "data": {"status": "idle"},
    }
    text, _ = mailbox.render(envelope)
    assert text == f"[mail {envelope.mail_id}: watched session {kid.pk} run.stopped]\n" + json.dumps({"status": "idle"})
    assert agentmail.watch_delete(watcher_id=str(boss.pk), session=str(kid.pk)) == {
        "session": str(kid.pk),
        "removed": 1,
    }
    again = events.emit(EventKind.RUN_STOPPED, kid.pk, None, RunStopped(status="idle"))
    assert agentmail.watched_event_forward(again.seq) == 0


@pytest.mark.django_db
def test_watch_refusals(agents: None) -> None:
    boss = _session("boss")
    stranger = _session("peer")
    kid = _session("kid", boss)

    def watch(target: str) -> object:
        return agentmail.watch_create(watcher_id=str(boss.pk), session=target, events=["run.stopped"], tool=None, ttl=5)

    assert _refusal(lambda: watch(str(stranger.pk))) == "not_permitted"
    assert _refusal(lambda: watch(str(boss.pk))) == "not_permitted"
    assert _refusal(lambda: watch("nope")) == "unknown_recipient"
    watch(str(kid.pk))
    watch(str(kid.pk))
    assert SessionWatch.objects.filter(watcher=boss).count() == 1  # the second replaced the first


def _running_call(session: Session, call_id: str) -> BackgroundCall:
    tracked = {"tcId": f"tc-{call_id}", "tcCall": {"id": call_id, "function": {"name": "bash_slow", "arguments": "{}"}}}
    return background.create(session, tracked, attached=False)


def _later(seconds: float, action: Callable[[], object]) -> threading.Thread:
    def run() -> None:
        time.sleep(seconds)
        try:
            action()
        finally:
            close_old_connections()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
def test_wait_returns_on_mail_on_a_final_call_or_at_its_timeout(agents: None) -> None:
    session, other = _session("eager"), _session("eager")
    port = DbSessionsPort(str(session.pk))
    assert port.wait(None, 0.3) == WaitOutcome(woken_by="timeout", tool_call_id=None, unread=0)
    slow, fast = _running_call(session, "call_slow"), _running_call(session, "call_fast")

    def finish(row: BackgroundCall) -> None:
        BackgroundCall.objects.filter(pk=row.pk).update(state=BackgroundCall.State.COMPLETED, finished_at=db_now())

    thread = _later(0.5, lambda: finish(fast))
    started = time.monotonic()
    assert port.wait("any-call", 30) == WaitOutcome(woken_by="call", tool_call_id="call_fast", unread=0)
    assert time.monotonic() - started >= 0.4
    thread.join()
    thread = _later(0.5, lambda: finish(slow))
    assert port.wait(["call_slow"], 30).tool_call_id == "call_slow"
    thread.join()
    with pytest.raises(ToolCallNotFound):
        port.wait(["call_nobody_made"], 1)
    thread = _later(0.5, lambda: _send(other, session, text="wake up"))
    started = time.monotonic()
    assert port.wait(None, 30) == WaitOutcome(woken_by="mail", tool_call_id=None, unread=1)
    assert time.monotonic() - started >= 0.4
    thread.join()
    # it only looks: the mail is still unread, and a wait on a call sees it at once
    assert port.wait("any-call", 30).woken_by == "mail"
    assert MailEnvelope.objects.filter(session=session).count() == 1


@pytest.mark.django_db(transaction=True)
def test_wait_is_capped_by_max_wait_seconds(agents: None) -> None:
    session = _session("capped")
    started = time.monotonic()
    assert DbSessionsPort(str(session.pk)).wait(None, 60).woken_by == "timeout"
    assert time.monotonic() - started < 30


@pytest.mark.django_db(transaction=True)
def test_a_new_watch_is_seen_by_this_process_at_once_and_an_expired_one_is_dropped(agents: None) -> None:
    boss = _session("boss")
    kid = _session("kid", boss)
    assert not events._watched(kid.pk, "run.stopped")
    agentmail.watch_create(watcher_id=str(boss.pk), session=str(kid.pk), events=["run.stopped"], tool=None, ttl=0)
    # a watch that has expired forwards nothing and is deleted by the next forwarding
    stopped = events.emit(EventKind.RUN_STOPPED, kid.pk, None, RunStopped(status="idle"))
    assert agentmail.watched_event_forward(stopped.seq) == 0
    assert not SessionWatch.objects.exists()
    agentmail.watch_create(watcher_id=str(boss.pk), session=str(kid.pk), events=["run.stopped"], tool=None, ttl=60)
    assert events._watched(kid.pk, "run.stopped")
    assert not events._watched(kid.pk, "text.delta")
    assert not events._watched(boss.pk, "run.stopped")


@pytest.mark.django_db
def test_forwarded_events_count_hops_so_sessions_watching_each_other_stop(agents: None) -> None:
    boss = _session("boss")
    kid = _session("kid", boss)
    agentmail.watch_create(watcher_id=str(boss.pk), session=str(kid.pk), events=["run.stopped"], tool=None, ttl=60)

    def kid_last_read(hops: int) -> None:
        mail = [{"from": agentmail.WATCH_SENDER, "hops": hops, "body": {"tag": "watchedEvent"}}]
        turns = [
            {"tag": "LlmTurn", "contents": {"llmResponse": {"responseText": "seen"}}},
            {"tag": "UserTurn", "contents": {"userQuery": "x", "userTools": [], "userMail": mail}},
        ]
        current = Session.objects.get(pk=kid.pk)
        store(current, {**current.document, "turns": turns})

    kid_last_read(3)
    first = events.emit(EventKind.RUN_STOPPED, kid.pk, None, RunStopped(status="idle"))
    assert agentmail.watched_event_forward(first.seq) == 1
    assert MailEnvelope.objects.get(session=boss).hops == 4
    kid_last_read(16)  # boss's maxMailHops is 16: hop 17 is not forwarded
    second = events.emit(EventKind.RUN_STOPPED, kid.pk, None, RunStopped(status="idle"))
    assert agentmail.watched_event_forward(second.seq) == 0
    assert MailEnvelope.objects.filter(session=boss).count() == 1
