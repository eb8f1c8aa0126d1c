"""cuflow's one benchmark harness, the top layer of the package (it may import any of cuflow).

* ``_headline``: the comparisons behind ``python -m cuflow bench`` (cuflow
  against plain CuPy and PyTorch, interleaved in one run), with ``_image``,
  ``_pipeline`` and ``_traces`` (the memory pool's allocation traces) as its
  sections and ``_plot`` drawing the result;
* ``fixtures``: the pytest-benchmark plugin behind the suites in ``bench/``
  (``bench/conftest.py`` loads it).

Nothing else in cuflow imports this package.
"""
