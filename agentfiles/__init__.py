"""agents-exe's file language: what an agent file, its tools' declarations and the files around
it say, read into plain Python (docs/architecture.md §1).

No models, no Django app: reading a file needs no database, so the tools app, the agents app and
the command line all read agent files through here. ``schema`` is the agent file's shape,
``loader`` reads and checks one, ``parameters`` and ``bindings`` are its declared parameters and
the values bound to them, ``builtins`` the declarations of the built-in toolboxes, ``keys`` the
API keys file and ``project_config`` where ``agents-exe.cfg.json``, the config directory and the
agent files are found. The session file: ``document`` (its JSON navigated by free functions),
``session_document`` (the object the run loop holds), ``turns`` (the Pydantic models of its
turns), ``document_shape`` (the check a stored or imported document passes) and
``tool_responses`` (how a stored tool response reads as text). The agent at work (the runtime,
narrowing, stored agents) is ``agents_app``.
"""
