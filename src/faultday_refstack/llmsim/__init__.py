"""llmsim: a vLLM-compatible LLM server simulator with GPU-failure semantics."""
