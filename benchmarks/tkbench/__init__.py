"""The pieces of ``benchmarks/run.py``: the parent (runner, GPU tests, table, JSON, plots) and the
worker that measures (one module per workload family, listed in ``families.FAMILIES``)."""
