"""Stored agents (docs/api.md §12): agents defined over the API or in the admin, not by files.

Every process (servers and workers) builds its stored agents from these rows, and checks one
counter before each use (:class:`StoredAgentsGeneration`) so that an edit made through any
process is seen by all of them at once, without a restart.
"""

from __future__ import annotations

from django.db import models

from foundation.common import TextJSONField


class StoredAgent(models.Model):
    """One stored agent: its ``contents`` (as under ``contents`` in an agent file) and its files.

    ``files`` maps a relative path to UTF-8 text; each version's files are written to a fresh
    directory of the process that loads it, every file executable. ``helpers`` repeats the slugs
    of ``extraAgents`` so that the in-use and cycle rules are checked without parsing.
    ``version`` counts the stores of this slug.
    """

    slug = models.CharField(primary_key=True, max_length=200)
    contents = TextJSONField()
    files = TextJSONField(default=dict, blank=True)
    helpers = TextJSONField(default=list, blank=True)
    version = models.IntegerField(default=1)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    updated_by = models.TextField(null=True, blank=True)

    class Meta:
        ordering = ["slug"]
        verbose_name = "stored agent"

    def __str__(self) -> str:
        return self.slug


class StoredAgentsGeneration(models.Model):
    """A single row (``pk=1``): incremented in the transaction of every store and delete.

    A process that has seen generation ``n`` knows its stored agents are current while the row
    still says ``n``; the row is also locked by writers, which serialises the helper checks.
    """

    generation = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"stored agents generation {self.generation}"


class StoredAgentVersion(models.Model):
    """One stored version of a stored agent (docs/guide-console.md §1): kept at every store.

    ``version`` matches :attr:`StoredAgent.version` at the time of the store, so the row whose
    ``version`` equals the agent's is the current one. ``changes`` lists what differs from the
    previous version (top-level keys of ``contents``, then ``files/<path>``); ``restored_from``
    names the version a restore copied. Versions outlive their agent: a slug deleted and stored
    again continues its numbering from its last kept version.
    """

    slug = models.CharField(max_length=200, db_index=True)
    version = models.IntegerField()
    contents = TextJSONField()
    files = TextJSONField(default=dict, blank=True)
    changes = TextJSONField(default=list, blank=True)
    restored_from = models.IntegerField(null=True, blank=True)
    created_at = models.DateTimeField()
    created_by = models.TextField(null=True, blank=True)

    class Meta:
        ordering = ["slug", "-version"]
        verbose_name = "agent version"
        constraints = [models.UniqueConstraint(fields=["slug", "version"], name="one_row_per_agent_version")]

    def __str__(self) -> str:
        return f"{self.slug} v{self.version}"
