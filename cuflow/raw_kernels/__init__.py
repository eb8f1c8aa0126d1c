"""CUDA C sources of cuflow's kernels (``*.cu``) and their registry.

Nothing here is imported by ``import cuflow``; modules are compiled lazily on
first use (see :mod:`cuflow.kernels` for ahead-of-time ``warmup``).
"""

from ._registry import (
    CTYPES,
    REGISTRY,
    KernelLookupError,
    KernelSpec,
    compile_for_arch,
    get_function,
    name_expression,
    source_of,
)

__all__ = ["CTYPES", "REGISTRY", "KernelLookupError", "KernelSpec", "compile_for_arch",
           "get_function", "name_expression", "source_of"]
