"""The reference AI stack faultday tests against: the system under test, as its own package.

Agent runtime (``agent``), MCP tool server (``tools``), vLLM simulator
(``llmsim``), Qdrant-compatible vector store (``vectordb``) and embedder
(``embedder``). Each runs only as a process (``python -m faultday_refstack.<name>``)
and imports nothing of the harness: what both sides share (fault-admin bodies,
metric names, the browser guard) is in ``faultday_wire``.
"""
