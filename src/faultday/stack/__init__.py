"""The stack driver: profiles, the process supervisor, components and renderings."""
