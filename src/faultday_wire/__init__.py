"""What the harness (``faultday``) and the reference stack (``faultday_refstack``) agree on.

The reference stack is the system under test: it runs only as processes and
imports nothing of the harness. What both sides must spell the same way lives
here — the bodies of the fault-admin routes (:mod:`faultday_wire.admin`), the
metric names the checks read (:mod:`faultday_wire.metrics`), the browser
guard every HTTP API of either side runs (:mod:`faultday_wire.webguard`) and how an
answer cites its documents or says it is canned (:mod:`faultday_wire.answers`).
This package imports neither side (a test walks the imports).
"""
