"""The SQLite toolbox in process: rows as JSON, read-only refusals, threads, interrupted queries."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from tests.tools.conftest import make_agent, make_ctx
from tools_app.toolset import build_toolset

SLOW = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"


def sqlite_tool(tmp_path: Path, tag: str = "SqliteReadWrite", path: str = "data.db"):
    agent = make_agent(
        tmp_path,
        builtinToolboxes=[
            {
                "tag": "SqliteToolbox",
                "contents": {"Name": "mem", "Description": "notes", "Versioning": {"tag": tag, "path": path}},
            }
        ],
    )
    [tool] = build_toolset(agent).tools
    return tool


@pytest.fixture
def facts_db(tmp_path: Path) -> Path:
    path = tmp_path / "facts.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE facts (id INTEGER PRIMARY KEY, text TEXT, weight REAL, raw BLOB)")
        connection.executemany(
            "INSERT INTO facts (text, weight, raw) VALUES (?, ?, ?)",
            [("sky is blue", 1.5, b"\x00\x01"), ("grass is green", 2.0, None)],
        )
    return path


def test_the_tool_is_named_and_declared(tmp_path: Path) -> None:
    tool = sqlite_tool(tmp_path)
    assert tool.name == "sqlite_mem_query"
    assert tool.parameters["required"] == ["sql"]
    assert "read-write SQLite database" in tool.description


def test_rows_come_back_as_json(tmp_path: Path, facts_db: Path) -> None:
    tool = sqlite_tool(tmp_path, "SqliteReadOnly", str(facts_db))
    result = tool.call({"sql": "SELECT id, text, weight, raw FROM facts ORDER BY id"}, make_ctx())
    assert not result.is_error
    assert result.response == {
        "type": "json",
        "content": {
            "columns": ["id", "text", "weight", "raw"],
            "rows": [[1, "sky is blue", 1.5, {"base64": "AAE="}], [2, "grass is green", 2.0, None]],
            "rowCount": 2,
        },
    }


@pytest.mark.parametrize("sql", ["INSERT INTO facts (text) VALUES ('x')", "DROP TABLE facts", "CREATE TABLE t (x)"])
def test_a_write_on_a_read_only_database_is_an_error_the_model_sees(tmp_path: Path, facts_db: Path, sql: str) -> None:
    tool = sqlite_tool(tmp_path, "SqliteReadOnly", str(facts_db))
    result = tool.call({"sql": sql}, make_ctx())
    assert result.is_error
    assert result.response.startswith("Error: sqlite_mem_query: the database is read-only (SqliteReadOnly)")
    with sqlite3.connect(facts_db) as connection:
        assert connection.execute("SELECT count(*) FROM facts").fetchone() == (2,)


def test_a_read_write_database_is_created_and_writes_commit(tmp_path: Path) -> None:
    tool = sqlite_tool(tmp_path)
    assert tool.call({"sql": "CREATE TABLE notes (body TEXT)"}, make_ctx()).response["content"]["changes"] == 0
    inserted = tool.call({"sql": "INSERT INTO notes VALUES ('remember')"}, make_ctx()).response["content"]
    assert inserted == {"changes": 1, "lastRowId": 1}
    with sqlite3.connect(tmp_path / "data.db") as connection:
        assert connection.execute("SELECT body FROM notes").fetchall() == [("remember",)]


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({}, 'the argument "sql" (one SQL statement) is required'),
        ({"sql": "SELEC 1"}, 'SQL error: near "SELEC": syntax error'),
        ({"sql": "SELECT 1; SELECT 2"}, "SQL error: You can only execute one statement at a time."),
        ({"sql": "ATTACH DATABASE '/tmp/other.db' AS other"}, "SQL error: not authorized"),
        ({"sql": "VACUUM INTO '/tmp/copy.db'"}, "SQL error: authorization denied"),
    ],
)
def test_bad_statements_are_errors(tmp_path: Path, arguments: dict, message: str) -> None:
    result = sqlite_tool(tmp_path).call(arguments, make_ctx())
    assert result.is_error and result.response == f"Error: sqlite_mem_query: {message}"


def test_a_missing_read_only_database_is_a_build_warning_and_an_error(tmp_path: Path) -> None:
    agent = make_agent(
        tmp_path,
        builtinToolboxes=[
            {
                "tag": "SqliteToolbox",
                "contents": {"Name": "mem", "Versioning": {"tag": "SqliteReadOnly", "path": "gone.db"}},
            }
        ],
    )
    toolset = build_toolset(agent)
    assert toolset.warnings == [
        f"builtinToolboxes[0] (SqliteToolbox mem): the read-only database {tmp_path / 'gone.db'} does not exist;"
        " queries fail until it does"
    ]
    result = toolset.tools[0].call({"sql": "SELECT 1"}, make_ctx())
    assert result.is_error and "cannot open the database" in result.response


def test_a_query_over_the_time_limit_is_interrupted(tmp_path: Path) -> None:
    result = sqlite_tool(tmp_path).call({"sql": SLOW}, make_ctx(timeout=0.3))
    assert result.response == "Error: sqlite_mem_query: the query ran longer than 0.3s and was interrupted"


def test_a_cancelled_call_interrupts_its_query(tmp_path: Path) -> None:
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    result = sqlite_tool(tmp_path).call({"sql": SLOW}, make_ctx(timeout=30, cancel=cancel))
    assert result.response == "Error: sqlite_mem_query: the call was cancelled; the query was interrupted"


def test_one_connection_serves_many_threads(tmp_path: Path) -> None:
    tool = sqlite_tool(tmp_path)
    tool.call({"sql": "CREATE TABLE n (i INTEGER)"}, make_ctx())
    errors: list[str] = []

    def insert(start: int) -> None:
        for i in range(start, start + 25):
            result = tool.call({"sql": f"INSERT INTO n VALUES ({i})"}, make_ctx())
            if result.is_error:
                errors.append(result.response)

    threads = [threading.Thread(target=insert, args=(k * 100,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert tool.call({"sql": "SELECT count(*) FROM n"}, make_ctx()).response["content"]["rows"] == [[200]]


def test_rows_stop_at_the_output_cap(tmp_path: Path) -> None:
    tool = sqlite_tool(tmp_path)
    result = tool.call(
        {
            "sql": "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n LIMIT 100000)"
            " SELECT i, 'some text' FROM n"
        },
        make_ctx(output_max_bytes=2000),
    )
    content = result.response["content"]
    assert content["truncated"] is True and 0 < content["rowCount"] < 200
