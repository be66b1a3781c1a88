"""The embedder served by Triton (PyTriton): 384-d vectors for the RAG path."""
