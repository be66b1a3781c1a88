"""Beyond one machine: the Kubernetes and Docker drivers and their faults, blast-radius
guards, Chaos Mesh objects, RBAC, compose renderings and distributed-load Jobs.

Nothing here schedules anything itself: Kubernetes (and Chaos Mesh, where installed)
does the work; faultday applies objects, watches them, and undoes what it did.
"""
