"""The base of the console's pages over rows that only the server writes."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest


class ReadOnlyAdmin(admin.ModelAdmin):
    """Browse, never add, edit or delete: runs, stores and the API own these rows (sessions,
    deferred calls, mail, events, agent versions); the pages that act on them have forms of
    their own that go through the services."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Rows are made by the server."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Rows change through services only."""
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Deleting goes through the API (sessions cascade and emit events) or not at all."""
        return False
