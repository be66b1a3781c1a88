"""The process driver: the supervisor, ports, readiness, temp-folder and shm hygiene."""
