"""The sections of ``benchmarks/gpu_report.py``: the machine and ``pytest -m cuda`` (environment), the layer's
correctness and speed (layer), the experiments' commands timed (training), and the report's files (report)."""
