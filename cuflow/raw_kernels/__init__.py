"""CUDA C sources of cuflow's fused kernels (``*.cu``), compiled lazily through CuPy.

Empty for now: the kernel registry and the fused image operators land with the
raw-kernels work.  Nothing here is imported by ``import cuflow``.
"""
