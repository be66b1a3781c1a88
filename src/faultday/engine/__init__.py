"""The run engine: the Run (phases, schedule, reverts, checks, journal), dry runs, recover."""
