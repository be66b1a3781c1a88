"""Beyond one machine: the Kubernetes and Docker drivers, blast-radius guards, Chaos Mesh
objects, RBAC and distributed-load Jobs (issue 10).

Nothing here schedules anything itself: Kubernetes (and Chaos Mesh, where installed)
does the work; faultday applies objects, watches them, and undoes what it did.
"""
