"""cuflow's compiled parts, all optional: the memory pool's hot path (with the
expandable-segment placement), the elementwise fast path's launcher, and the C++
assignment of CuPy's shape vectors the launcher's new arrays use.

Everything else is in pyproject.toml.  Without a C compiler the install goes on
and the first two run the same operations in Python; without a C++ compiler the
launcher sets new arrays' shapes through CuPy's method.
"""

from setuptools import Extension, setup

HEADERS = ["cuflow/_cfields.h", "cuflow/_poolapi.h"]

setup(ext_modules=[Extension("cuflow.memory._hotpath",
                             ["cuflow/memory/_hotpath.c", "cuflow/memory/_pageheap.c"],
                             include_dirs=["cuflow"], depends=HEADERS, optional=True),
                   Extension("cuflow.core._ewlaunch", ["cuflow/core/_ewlaunch.c"],
                             include_dirs=["cuflow"], depends=HEADERS, optional=True),
                   Extension("cuflow.core._vectors", ["cuflow/core/_vectors.cpp"],
                             language="c++", optional=True)])
