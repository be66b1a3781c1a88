"""The soak tests start simulators the way the llmsim tests do (by PID, always stopped)."""

from tests.llmsim.conftest import start_sim

__all__ = ["start_sim"]
