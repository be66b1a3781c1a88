"""The core every other part of faultday stands on; it imports nothing of faultday but ``errors``.

The clock, the ledger, the journal model, windows and verdicts, request records,
durations, plugin registries, YAML positions and the vocabulary (``vocab``) and
contracts (``protocols``) between the parts.
"""
