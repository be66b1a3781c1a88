"""Outputs of a run, all rendered from ``journal.json``."""
