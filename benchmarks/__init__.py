"""Benchmarks of the performance targets (P1-P5): each script measures our side and its anchor
side by side in one run and writes ``benchmarks/results/<id>.json`` (and a plot where useful).

Run them all with ``python -m benchmarks.run_all`` (``--quick`` for a smaller run,
``--only P1,P3`` for some)."""
