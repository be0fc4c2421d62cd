"""Every change to sessions, their mail, continuations and trees (services write, selectors read).

One module per subdomain: ``sessions`` (create, messages, resume, control), ``mail``,
``continuations``, ``tree`` (helpers as child sessions, fork, delete), ``recovery`` (runs whose
worker died) and ``owner`` (what only a session's owner changes). Each service writes its change
in one transaction through ``sessions_app.store`` and sends the work it starts through
``sessions_app.dispatch`` once that transaction commits.
"""
