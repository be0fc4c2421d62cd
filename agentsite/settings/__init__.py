"""The server's settings, ``DJANGO_SETTINGS_MODULE=agentsite.settings``: those of :mod:`agentsite.settings.base`.

The test suite uses :mod:`agentsite.settings.test` instead.
"""

from agentsite.settings.base import *  # noqa: F403
