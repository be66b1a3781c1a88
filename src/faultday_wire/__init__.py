"""What the harness (``faultday``) and the reference stack (``faultday_refstack``) agree on.

The reference stack is the system under test: it runs only as processes and
imports nothing of the harness. What both sides must spell the same way lives
here — the bodies of the fault-admin routes (:mod:`faultday_wire.admin`), the
metric names the checks read (:mod:`faultday_wire.metrics`), the browser
guard every HTTP API of either side runs (:mod:`faultday_wire.webguard`), how an
answer cites its documents or says it is canned (:mod:`faultday_wire.answers`), and
the parts of the agent's config file the harness reads too: its resilience policies
(:mod:`faultday_wire.policy`), its models (:mod:`faultday_wire.llm`) and their
durations (:mod:`faultday_wire.durations`, the one duration grammar, the harness's
files' too), so ``faultday lint`` and the agent refuse the same values alike; and how
either side reports a problem in a user's file (:mod:`faultday_wire.problems`).
This package imports neither side (a test walks the imports).
"""
