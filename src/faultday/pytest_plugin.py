"""pytest plugin: collects ``*.scenario.yaml`` files as test items (issue 9)."""
