"""Qdrant-REST-compatible front over the Qdrant engine (qdrant-edge), seeded with a corpus."""
