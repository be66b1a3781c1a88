"""The proxy suite's servers (faultday's proxy on a thread, a TCP echo), for the edge tests."""

from tests.proxy.conftest import echo, inproc

__all__ = ["echo", "inproc"]
