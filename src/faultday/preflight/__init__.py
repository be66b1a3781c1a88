"""``faultday preflight``: is the stack fit for a game day? (the orchestration layer).

Four areas, each a list of checks in the run reports' format (section ``preflight``):
configuration (the agent policy's lint and timeout hierarchy), interface (golden
requests per component), resources (context length, KV-cache headroom, GPU, RSS and
descriptors) and logs (error lines, repeated retries or timeouts, with ``file:line``).
"""
