"""The platform every app builds on, the ground floor of docs/architecture.md §1.

Nothing here imports another package of the project: the apps import it, never the other way.
A module belongs here when an app needs it and it knows no app's models:

* the API's shape: ``errors`` (the one error catalogue and answer), ``api`` (the viewsets' base),
  ``routers``, ``parsers``, ``openapi`` (the document's schema class and hooks), ``common``
  (shared field types and the database clock);
* who is calling: ``auth`` (tokens, owners, origins), ``access`` (identifying a request; the
  sessions app registers the session rules through its ``SessionAccess`` port), ``permissions``
  (the REST API's authentication and permission classes), ``middleware`` and ``http_limits``;
* the process's surroundings: ``env`` (reading the environment), ``toolenv`` (the environment of
  tool processes), ``isolation`` (the ``--isolate-tools`` value), ``threads``, ``redaction`` and
  ``logging`` (secrets kept out of logs, JSON log lines).

The wiring that imports the apps (settings, URLs, ASGI, the Celery app, the command line, the
embedded worker, the server) stays in ``agentsite``.
"""
