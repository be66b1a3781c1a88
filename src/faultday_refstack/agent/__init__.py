"""Agent runtime of the reference stack: RAG chat, agent tasks, resilience policies."""
