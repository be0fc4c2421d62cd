"""Rows the built-in tools keep: the staged edits of the Developer toolbox's write sessions."""

from __future__ import annotations

import uuid

from django.db import models

from foundation.common import TextJSONField


class StagedWrite(models.Model):
    """A ``write-file-range`` session: edits staged against one file, written on commit.

    The edits are kept in the file's original line numbers, with the MD5 of the file when the
    session started; the staged text is those edits applied to the file as it is on disk, which
    must still have that MD5. Rows live in the database so that a session staged by one worker
    can be read and committed by another.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tool = models.CharField(max_length=200, help_text="the Developer tool's wire name")
    session_id = models.CharField(max_length=64, help_text="the agents session that opened it")
    path = models.TextField(help_text="the canonical path of the file")
    base_snapshot = models.CharField(max_length=32, help_text="MD5 of the file when the session started")
    edits = TextJSONField(default=list, help_text="[start, end, lines] in original line numbers")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    committed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"staged write {self.id} of {self.path}"
