"""Tools for developing and demonstrating the server; the server itself never imports them.

``devtools.mockllm`` is the scripted OpenAI-compatible model that ``scripts/demo`` and the test
suite talk to (``agents mock-llm``).
"""
