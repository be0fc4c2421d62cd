"""The console's webhook and schedule pages in one process (docs/webhooks.md): subscriptions are
shown without their secret, deliveries with their attempts and "send again" (only with the
permission), schedules with their next firing times."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone

from hooks_app import schedules, services
from hooks_app.models import Attempt, Delivery, Webhook


def _client(*permissions: str, superuser: bool = False) -> Client:
    if superuser:
        user = User.objects.create_superuser("root", "root@example.com", "pw")
    else:
        user = User.objects.create_user("-".join(permissions) or "nobody", password="pw", is_staff=True)
        for permission in permissions:
            app, codename = permission.split(".")
            user.user_permissions.add(Permission.objects.get(content_type__app_label=app, codename=codename))
    client = Client()
    client.force_login(user)
    return client


def _failed_delivery() -> tuple[Webhook, Delivery]:
    webhook = services.webhook_create(owner="alice", url="http://127.0.0.1:9/hook", events=["run.stopped"])
    now = timezone.now()
    delivery = Delivery.objects.create(
        id=f"msg_{uuid.uuid4().hex}",
        webhook=webhook,
        event_kind="run.stopped",
        event_seq=7,
        session_id=uuid.uuid4(),
        body="{}",
        state=Delivery.State.FAILED,
        attempts=1,
        created_at=now,
    )
    Attempt.objects.create(
        delivery=delivery, number=1, started_at=now, status_code=404, latency_ms=12, response_head="nope"
    )
    return webhook, delivery


@pytest.mark.django_db
def test_the_pages_show_subscriptions_without_secret_and_deliveries_with_attempts() -> None:
    webhook, delivery = _failed_delivery()
    client = _client(superuser=True)
    for page in ("/admin/hooks_app/webhook/", "/admin/hooks_app/delivery/", "/admin/hooks_app/schedule/"):
        assert client.get(page).status_code == 200, page
    shown = client.get(f"/admin/hooks_app/webhook/{webhook.pk}/change/")
    assert shown.status_code == 200 and webhook.secret not in shown.content.decode()
    page = client.get(f"/admin/hooks_app/delivery/{delivery.pk}/change/").content.decode()
    assert "nope" in page and "404" in page


@pytest.mark.django_db
def test_send_again_needs_the_permission_and_makes_the_delivery_pending() -> None:
    _, delivery = _failed_delivery()
    form = {"action": "send_again", "_selected_action": [delivery.pk]}
    refused = _client("hooks_app.view_delivery").post("/admin/hooks_app/delivery/", form)
    assert refused.status_code == 200
    assert Delivery.objects.get(pk=delivery.pk).state == Delivery.State.FAILED
    allowed = _client("hooks_app.view_delivery", "hooks_app.change_delivery").post("/admin/hooks_app/delivery/", form)
    assert allowed.status_code == 302
    assert Delivery.objects.get(pk=delivery.pk).state == Delivery.State.PENDING


@pytest.mark.django_db
def test_a_schedule_page_shows_its_next_firing_times() -> None:
    schedule = schedules.schedule_create(
        owner=None, data={"agent": "asker", "prompt": "hi", "cron": "30 6 * * 1", "timezone": "UTC"}
    )
    page = _client(superuser=True).get(f"/admin/hooks_app/schedule/{schedule.pk}/change/").content.decode()
    upcoming = schedules.upcoming(schedule)
    assert len(upcoming) == 5 and all(moment.isoformat() in page for moment in upcoming)
    assert all(moment.weekday() == 0 and (moment.hour, moment.minute) == (6, 30) for moment in upcoming)
