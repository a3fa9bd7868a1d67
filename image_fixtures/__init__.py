"""Registries and images to copy between, for the tests, the demo and the benchmarks: real
Distribution registry servers on loopback ports (`registry_server`) and generated images
pushed to them (`image_builder`).

Not shipped: the wheel holds the packages `[tool.hatch.build.targets.wheel]` lists, and this
one is imported from the repository (its root is on `sys.path` in an editable install and
under `python -m` from the root; tests/packaging/test_wheel_contents.py keeps it out)."""
