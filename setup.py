"""The one compiled part of cuflow: the memory pool's hot path (optional).

Everything else is in pyproject.toml.  Without a C compiler the install goes on
and the pool runs the same operations in Python.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("cuflow.memory._hotpath", ["cuflow/memory/_hotpath.c"],
                             optional=True)])
