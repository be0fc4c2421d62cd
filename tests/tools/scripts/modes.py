#!/usr/bin/env python3
"""Test tool declaring one argument per transport; `run` echoes what it received as JSON."""

import json
import os
import sys

DESCRIBE = {
    "slug": "modes",
    "description": "Echo every way an argument can arrive",
    "args": [
        {
            "name": "pos",
            "description": "a positional",
            "type": "string",
            "backing_type": "string",
            "arity": "single",
            "mode": "positional",
        },
        {
            "name": "space",
            "description": "--space value",
            "type": "string",
            "backing_type": "string",
            "arity": "optional",
            "mode": "dashdashspace",
        },
        {
            "name": "equal",
            "description": "--equal=value",
            "type": "number",
            "backing_type": "string",
            "arity": "optional",
            "mode": "dashdashequal",
        },
        {
            "name": "body",
            "description": "first stdin part",
            "type": "string",
            "backing_type": "string",
            "arity": "optional",
            "mode": "stdin",
        },
        {
            "name": "note",
            "description": "second stdin part",
            "type": "string",
            "backing_type": "string",
            "arity": "optional",
            "mode": "stdin",
        },
        {
            "name": "api-token",
            "description": "an env var",
            "type": "string",
            "backing_type": "string",
            "arity": "optional",
            "mode": "env",
        },
        {
            "name": "tag",
            "description": "repeated flag",
            "type": "string",
            "backing_type": "string",
            "arity": "multiple",
            "mode": "dashdashspace",
        },
        {
            "name": "extra",
            "description": "repeated positional",
            "type": "string",
            "backing_type": "string",
            "arity": "multiple",
            "mode": "positional",
        },
    ],
}

if len(sys.argv) > 1 and sys.argv[1] == "describe":
    print(json.dumps(DESCRIBE))
elif len(sys.argv) > 1 and sys.argv[1] == "run":
    keys = [
        "API_TOKEN",
        "AGENT_SESSION_ID",
        "AGENT_CONVERSATION_ID",
        "AGENT_TURN_ID",
        "AGENT_AGENT_ID",
        "AGENT_SESSION_JSON",
    ]
    print(
        json.dumps(
            {
                "argv": sys.argv[2:],
                "stdin": sys.stdin.read(),
                "env": {k: os.environ[k] for k in keys if k in os.environ},
            }
        )
    )
else:
    print("usage: modes.py describe|run ...", file=sys.stderr)
    sys.exit(1)
