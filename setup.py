"""cuflow's two compiled parts, both optional: the memory pool's hot path (with the
expandable-segment placement) and the elementwise fast path's launcher.

Everything else is in pyproject.toml.  Without a C compiler the install goes on
and both run the same operations in Python.
"""

from setuptools import Extension, setup

HEADERS = ["cuflow/_cfields.h", "cuflow/_poolapi.h"]

setup(ext_modules=[Extension("cuflow.memory._hotpath",
                             ["cuflow/memory/_hotpath.c", "cuflow/memory/_pageheap.c"],
                             include_dirs=["cuflow"], depends=HEADERS, optional=True),
                   Extension("cuflow.core._ewlaunch", ["cuflow/core/_ewlaunch.c"],
                             include_dirs=["cuflow"], depends=HEADERS, optional=True)])
