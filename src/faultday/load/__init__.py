"""Load: Locust workloads run in a subprocess, each request streamed back to the harness."""
