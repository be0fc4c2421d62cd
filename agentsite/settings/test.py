"""Settings for the test suite's own process (pytest-django): the production ones and a fixed key.

The servers and workers the integration tests start are real processes with the production
settings (``agentsite.settings``), configured through the environment like any deployment.
"""

from agentsite.settings.base import *  # noqa: F403
from agentsite.settings.base import BASE_DIR, DATABASES

SECRET_KEY = "agents-server-tests-only"  # noqa: S105 - the test settings' own key, used by no server

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # a file, not the shared-cache memory database, so that tests with several threads see the
    # same locking as the server does
    DATABASES = {"default": {**DATABASES["default"], "TEST": {"NAME": str(BASE_DIR / ".pytest-db.sqlite3")}}}

# Views run on the test client's own thread, inside the test's transaction (the servers that the
# integration tests start use the thread pool of foundation.threads).
AGENTS = {**AGENTS, "HTTP_THREADS": 0}  # noqa: F405
