"""The graphs the peers (LangGraph's API server, Aegra) serve in ``bench/runs.py``.

This module runs inside a peer's virtual environment (.bench-peers/<peer>), never in the project's.

- ``plain``: one node asks the scripted model once (``langchain-openai``'s ChatOpenAI pointed at
  the mock's URL) and stores its answer; the same work as the product's ``bench`` agent.
- ``tool``: the usual LangGraph agent loop: the model node with the tool bound, a ToolNode that
  runs ``bash_hello`` (the product's bash tool file, run as ``<tool> run`` in a subprocess, as the
  product runs it), and back to the model, which answers; the same work as ``bench-tool``.

``BENCH_MODEL_URL`` (the mock's ``.../v1``) and ``BENCH_TOOL`` (the tool's path) are set by
``bench/runs.py`` in the peer's environment.
"""

import os
import subprocess
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AnyMessage, SystemMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition


class State(TypedDict):
    """The conversation."""

    messages: Annotated[list[AnyMessage], add_messages]


model = ChatOpenAI(
    model="scripted",
    base_url=os.environ["BENCH_MODEL_URL"],
    api_key="none",  # type: ignore[arg-type]
    max_retries=0,
    timeout=300,
)


@tool
def bash_hello() -> str:
    """Says hello."""
    done = subprocess.run([os.environ["BENCH_TOOL"], "run"], capture_output=True, text=True, timeout=600)
    return done.stdout


tools = [bash_hello]
#: The product's benchmark agents have this system prompt too.
SYSTEM = SystemMessage("You are a benchmark.")
model_with_tools = model.bind_tools(tools)


async def ask(state: State) -> dict[str, Any]:
    """Ask the model once."""
    return {"messages": [await model.ainvoke([SYSTEM, *state["messages"]])]}


async def ask_with_tools(state: State) -> dict[str, Any]:
    """Ask the model, offering the tool."""
    return {"messages": [await model_with_tools.ainvoke([SYSTEM, *state["messages"]])]}


_plain = StateGraph(State)
_plain.add_node("model", ask)
_plain.add_edge(START, "model")
_plain.add_edge("model", END)
plain = _plain.compile()

_tool = StateGraph(State)
_tool.add_node("model", ask_with_tools)
_tool.add_node("tools", ToolNode(tools))
_tool.add_edge(START, "model")
_tool.add_conditional_edges("model", tools_condition)
_tool.add_edge("tools", "model")
tool_graph = _tool.compile()
