"""mock-llm: a scripted, OpenAI-compatible chat-completions server.

It lets the demo run without an API key (``agents mock-llm --script FILE --port P``) and gives the
test suite a real HTTP endpoint to talk to. It speaks just enough of the OpenAI chat-completions
API for the agents server (docs/agents.md §7): plain and streamed answers, tool calls,
reasoning text, usage, and error answers. Point an agent at it with
``"modelUrl": "http://127.0.0.1:PORT/v1"``; any ``modelName`` and any API key (or none) work.

Endpoints
---------
- ``POST /v1/chat/completions`` (``/chat/completions`` too): answer from the script.
- ``GET /v1/models``: the model names the script mentions, plus ``mock-model``.
- ``GET /_mock/requests``: a JSON list of every chat-completions request body received so far.
- ``GET /_mock/cancelled``: the numbers (from 1) of the requests whose client hung up during
  their ``delay`` (a cancelled request is not answered).
- ``POST /_mock/reset``: forget the recorded requests and the ``times`` counters.

Script format
-------------
A JSON object with a list of rules::

    {"rules": [
      {"when": {"last_role": "user", "last_contains": "Paris"},
       "reply": {"content": "Let me check.", "reasoning": "optional thinking",
                 "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}},
      {"when": {"last_role": "tool"}, "reply": {"content": "Here is what I found: {last_content}"}},
      {"when": {"any_contains": "crash"}, "reply": {"status": 500, "error": "scripted failure"}},
      {"when": {"last_contains": "slow"}, "reply": {"delay": 2.5, "content": "done"}},
      {"when": {"last_contains": "garbage"}, "reply": {"malformed": true}},
      {"reply": {"content": "default answer"}}
    ]}

For each request the rules are tried in order and the first one that matches answers, so the
same conversation always gets the same answer, however many sessions run at once. When no rule
matches, the answer is the text ``(mock-llm: no rule matched)``.

A rule is ``{"when": {...}, "reply": {...}, "times": N}``; only ``reply`` is required.

``when`` (every condition given must hold; a missing ``when`` matches everything):

- ``last_role``: the role of the last message (``"user"``, ``"tool"``, ``"assistant"``, ``"system"``).
- ``last_contains``: a substring of the last message's text. The text of a message is its string
  ``content``, or the ``text`` parts of a list ``content`` joined with newlines.
- ``any_contains``: a substring of the text of any message, the system prompt included.
- ``model``: the request's ``model`` equals this.
- ``has_tool``: a tool with this name is offered in the request's ``tools``.
- ``tool_results``: an integer; the number of ``tool`` messages after the last ``user`` message
  (after the start of the conversation when there is no user message) equals it.

``times`` (a positive integer): the rule answers at most that many requests, then it is skipped.
The counters belong to one server and are cleared by ``POST /_mock/reset``.

``reply``:

- ``content``: the answer text. ``{last_content}`` in it is replaced by the last message's text.
- ``reasoning``: thinking text, sent as ``message.reasoning_content`` (as Moonshot/Kimi do).
- ``tool_calls``: a list of ``{"name": ..., "arguments": <object or JSON string>, "id": ...}``;
  ``id`` defaults to a server-unique ``call_<n>``. The ``finish_reason`` is ``"tool_calls"`` when
  there are tool calls, ``"stop"`` otherwise.
- ``status`` and ``error``: answer with this HTTP status (400-599) and an OpenAI-style error body
  ``{"error": {"message": error, "type": ..., "code": status}}``.
- ``delay``: seconds to wait before answering (to exercise timeouts and concurrency).
- ``malformed``: ``true`` answers 200 with a body that is not JSON (a stream of non-JSON events
  when the request asked for streaming).
- ``stream_error``: when streaming, send the content, then this message as an ``{"error": ...}``
  event instead of finishing; without streaming, answer HTTP 500 with it.
- ``cut``: when streaming, close the connection part-way, with no ``finish_reason`` and no
  ``[DONE]``: ``"after_text"`` after the first content piece (the role and reasoning chunks
  sent), ``"mid_tool_call"`` after the first tool call's fragment with its id and name and the
  first fragment of its arguments (``tool_calls`` required), ``"before_finish"`` after every
  content piece and tool call fragment. Without streaming, the answer announces the whole
  completion's ``Content-Length`` and sends half of it. Not with ``status``, ``malformed`` or
  ``stream_error``.
- ``cut_half_event`` (with ``cut``): ``true`` also sends the first half of the next event's
  ``data:`` line, without its line end, before closing.

- ``usage``: the token counts to report, ``{"prompt_tokens"?, "completion_tokens"?,
  "cached_tokens"?}`` (integers >= 0); ``cached_tokens`` is sent as
  ``prompt_tokens_details.cached_tokens``.

Every successful answer carries a ``usage`` object: the reply's ``usage`` counts where given,
rough estimates (about four characters per token) for the others.

Streaming
---------
When the request has ``"stream": true`` the answer is ``text/event-stream`` in the OpenAI chunk
format: a first chunk with the role, the reasoning as ``delta.reasoning_content`` pieces, the
content in word-sized pieces (they concatenate back to the exact text), each tool call by
``index`` with its id and name in the first fragment and its ``arguments`` in two or more
fragments, a chunk with the ``finish_reason``, a usage chunk (``"choices": []``) only when the
request has ``stream_options.include_usage: true``, and ``data: [DONE]``.

The package uses the standard library only, so the CLI can run it without Django:
``script`` loads and checks scripts, ``matching`` picks the rule, ``answers`` builds the
completion and its stream, ``server`` serves them over HTTP, and ``command`` is the command line
(``python -m devtools.mockllm``).
"""

from devtools.mockllm.answers import DEFAULT_MODEL, NO_MATCH_CONTENT
from devtools.mockllm.command import main, serve_forever
from devtools.mockllm.matching import message_text
from devtools.mockllm.script import load_script, validate_script
from devtools.mockllm.server import MockLlmServer

__all__ = [
    "DEFAULT_MODEL",
    "NO_MATCH_CONTENT",
    "MockLlmServer",
    "load_script",
    "main",
    "message_text",
    "serve_forever",
    "validate_script",
]
