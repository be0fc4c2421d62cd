"""Tools for developing and demonstrating the server; ``agents serve`` and ``agents worker`` never import them.

``devtools.mockllm`` is the scripted OpenAI-compatible model that ``scripts/demo`` and the test
suite talk to (``agents mock-llm``).
"""
