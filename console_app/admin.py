"""Registers the console's pages with the admin site (Django's admin autodiscovery imports this)."""

from console_app import agents_admin, calls_admin, hooks_admin, sessions_admin, versions_admin

__all__ = ["agents_admin", "calls_admin", "hooks_admin", "sessions_admin", "versions_admin"]
