"""MCP tool server of the reference stack: tools with a capacity, and a fault admin API."""
