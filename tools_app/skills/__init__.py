"""Skills (docs/guide-toolboxes.md §3; docs/tools.md §12): packages of instructions, scripts and reference
documents an agent enables when it needs them.

``sources`` finds the skill directories of ``skillSources`` (a local directory, or a git
repository cloned to a cache), ``skill`` reads one skill (``SKILL.md`` front matter, ``scripts/``,
``references/``) and ``tools`` makes its tools.
"""
