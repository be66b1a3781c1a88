"""The run engine: phases, clock, reverts ledger, event timeline."""
