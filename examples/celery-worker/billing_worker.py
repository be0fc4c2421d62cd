"""The billing team's Celery worker: answers the billing agent's deferred ``bash_charge-card`` calls.

Run it next to a scaled-out server (the same ``REDIS_URL``), telling it where the server is:

    REDIS_URL=redis://127.0.0.1:6379/0 AGENTS_SERVER_URL=http://127.0.0.1:8080 \\
        celery -A billing_worker worker -Q billing

What ``charge`` returns completes the call and the agent's session goes on; what it raises
reaches the model as an error result.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from celery import Celery

from sessions_app.deferred_worker import DeferredCall, deferred_call_task

app = Celery("billing", broker=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
app.conf.task_default_queue = "billing"


@deferred_call_task(app, acks_late=True)
def charge(call: DeferredCall) -> Any:
    """Charge ``call.arguments["amount"]`` euros to ``call.arguments["customer"]``."""
    if call.tool != "bash_charge-card":
        raise ValueError(f"this worker does not run {call.tool}")
    amount = float(call.arguments["amount"])
    if amount <= 0:
        raise ValueError(f"cannot charge {amount} euros")
    receipt = {"customer": call.arguments["customer"], "charged": amount, "receipt": f"r-{uuid.uuid4().hex[:8]}"}
    return {"type": "json", "content": receipt}
