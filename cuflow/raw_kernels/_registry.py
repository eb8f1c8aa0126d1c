"""The one registry of cuflow's CUDA kernels, and how they are compiled.

Each :class:`KernelSpec` names a ``.cu`` file in this package, its templated
entry points and the dtypes each entry point is instantiated for.  A module is
compiled per (spec, dtype) on first use, through CuPy's ``RawModule`` with
``name_expressions`` (so CuPy's on-disk kernel cache keeps it across
processes); :func:`compile_for_arch` compiles the same source with the same
options for an explicit architecture through NVRTC alone, which needs no GPU.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources
from typing import Any

import numpy

from .._errors import CuflowError, KernelCompileError

__all__ = ["CTYPES", "REGISTRY", "KernelLookupError", "KernelSpec", "compile_for_arch",
           "get_function", "name_expression", "source_of", "vec_run"]


class KernelLookupError(CuflowError, KeyError):
    """A kernel has no entry point, or no instantiation for the dtype asked for."""

    def __str__(self) -> str:  # the message as written, not KeyError's repr of it
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()


#: C type used for each NumPy dtype in the kernels (float16 is carried as raw bits).
CTYPES = {
    "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
    "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int",
    "uint64": "unsigned long long", "float16": "cf_half", "float32": "float",
    "float64": "double",
}

#: Options passed to NVRTC besides the architecture.  CuPy adds ``-ftz=true`` to
#: every RawModule compile; :func:`compile_for_arch` adds it too, so the CPU
#: check compiles exactly what the GPU will run.
CUPY_ADDED_OPTIONS = ("-ftz=true",)


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """A CUDA source file and the template instantiations cuflow uses from it.

    Parameters
    ----------
    name : str
        Registry key.
    source : str
        File name of the CUDA C source in ``cuflow/raw_kernels``.
    entries : tuple of (str, tuple of str)
        Each templated ``__global__`` function with the dtypes it is
        instantiated for.
    options : tuple of str, default ("--std=c++17",)
        NVRTC options (CuPy adds ``-ftz=true`` and the architecture).
    """

    name: str
    source: str
    entries: tuple[tuple[str, tuple[str, ...]], ...]
    options: tuple[str, ...] = ("--std=c++17",)

    def dtypes(self) -> tuple[str, ...]:
        """Every dtype some entry is instantiated for, in the entries' order."""
        seen: dict[str, None] = {}
        for _, dts in self.entries:
            seen.update(dict.fromkeys(dts))
        return tuple(seen)

    def name_expressions(self, dtype: str) -> list[str]:
        """NVRTC's name expressions of the entries instantiated for ``dtype``.

        Parameters
        ----------
        dtype : str
            A NumPy dtype name (``"float32"``), as the entries list them.

        Returns
        -------
        list of str
            The template instantiation (:func:`name_expression`) of each entry instantiated
            for ``dtype``, in the entries' order, without repeats; empty when none is.
        """
        return list(dict.fromkeys(name_expression(e, dtype) for e, dts in self.entries
                                  if dtype in dts))


#: Output dtypes of the image kernels, the (source, output) channel counts the
#: vectorized identity-geometry kernel is instantiated for, and its pixels per
#: run: 4, or ``{V}`` (16 bytes of the output type, at most 8, so float and
#: half stores are 16 bytes wide) when the frame's pixel count allows.
IMAGE_OUT = ("float32", "float16", "uint8")
VEC_CHANNELS = ((1, 1), (3, 3), (4, 4), (4, 3))
VEC_RUNS = ("4", "{V}")
#: (format, channels) cf_warp is instantiated for: packed 1, 3 or 4 channels,
#: NV12 and I420 (which sample as 3 channels).
WARP_SOURCES = ((0, 1), (0, 3), (0, 4), (1, 3), (2, 3))
#: (format, channels, output channels) of cf_resize_lin, cf_warp's bilinear
#: case when each output channel is a source channel: packed sources with the
#: identity-geometry kernel's channel pairs, and NV12 to three channels.
LIN_SOURCES = tuple((0, c, oc) for c, oc in VEC_CHANNELS) + ((1, 3, 3),)

REGISTRY: dict[str, KernelSpec] = {
    s.name: s for s in (
        KernelSpec(
            name="image",
            source="image.cu",
            entries=tuple((f"cf_normalize_vec<{{T}},{c},{oc},{r}>", IMAGE_OUT)
                          for c, oc in VEC_CHANNELS for r in VEC_RUNS)
            + tuple((f"cf_warp<{{T}},{fmt},{c}>", IMAGE_OUT) for fmt, c in WARP_SOURCES)
            + tuple((f"cf_resize_lin<{{T}},{fmt},{c},{oc}>", IMAGE_OUT)
                    for fmt, c, oc in LIN_SOURCES)
            + (("cf_resize_nv12<{T}>", IMAGE_OUT),)
            + (("cf_denormalize", ("float16", "float32")),)
            + tuple((f"cf_denormalize_vec<{{T}},{c},{oc}>", ("float16", "float32"))
                    for c, oc in VEC_CHANNELS),
        ),
        # the stream hold of cuflow.testing.device_time_us, instantiated for its flag's type
        KernelSpec(name="timing", source="timing.cu", entries=(("cf_hold", ("int32",)),)),
    )
}


def vec_run(dtype: Any) -> int:
    """Pixels per run of the identity-geometry image kernel for output ``dtype``: 16 bytes, at most 8."""
    return min(16 // numpy.dtype(dtype).itemsize, 8)


def name_expression(entry: str, dtype: str) -> str:
    """The template instantiation of ``entry`` for ``dtype``.

    ``entry<ctype>``, or ``entry`` with ``{T}`` replaced by the C type (and
    ``{V}`` by :func:`vec_run` of ``dtype``) when the entry spells out
    its template arguments (``cf_normalize_vec<{T},3,3,{V}>``).
    """
    if "{T}" in entry:
        return entry.replace("{T}", CTYPES[dtype]).replace("{V}", str(vec_run(dtype)))
    return f"{entry}<{CTYPES[dtype]}>"


@functools.cache
def source_of(spec: KernelSpec) -> str:
    return importlib.resources.files(__package__).joinpath(spec.source).read_text()


# ------------------------------------------------------------------ on the GPU
_MODULES: dict[tuple[str, str, int], Any] = {}


def get_function(kernel: str, entry: str, dtype: Any) -> Any:
    """The compiled ``entry`` of registry ``kernel`` for ``dtype`` on the current device.

    Compiles the (kernel, dtype) module on first use.  Raises
    :class:`~cuflow.KernelCompileError` (NVRTC's error as ``__cause__``) when
    compiling fails and ``KeyError`` when ``entry`` has no instantiation for
    ``dtype``.
    """
    import cupy  # noqa: PLC0415

    spec = REGISTRY[kernel]
    dt = numpy.dtype(dtype).name
    if dt not in dict(spec.entries).get(entry, ()):
        raise KernelLookupError(f"kernel {kernel}.{entry} has no instantiation for dtype {dt}")
    dev = cupy.cuda.runtime.getDevice()
    key = (kernel, dt, dev)
    mod = _MODULES.get(key)
    if mod is None:
        exprs = spec.name_expressions(dt)
        try:
            mod = cupy.RawModule(code=source_of(spec), options=spec.options,
                                 name_expressions=exprs)
            mod.compile()
        except cupy.cuda.compiler.CompileException as e:
            raise KernelCompileError(
                f"compiling cuflow kernel {kernel!r} ({spec.source}) for {dt} failed:\n"
                f"{e.get_message() if hasattr(e, 'get_message') else e}") from e
        # the first module stored wins: handles taken from it (the fast path keeps bare
        # function pointers) stay valid, and a racing thread's copy is dropped unused
        mod = _MODULES.setdefault(key, mod)
    return mod.get_function(name_expression(entry, dt))  # a RawKernel (cached by the module)


# ------------------------------------------------------------- without a GPU
def compile_for_arch(spec: KernelSpec, dtype: str, arch: int) -> bytes:
    """Compile ``spec`` for ``dtype`` to a cubin for ``sm_<arch>`` with NVRTC only (no GPU).

    Uses ``cuda.bindings.nvrtc`` (packages ``cuda-bindings`` and
    ``nvidia-cuda-nvrtc``, in the ``test`` extra) with the options CuPy itself
    uses for a ``RawModule``.  Raises :class:`~cuflow.KernelCompileError`
    naming the kernel, dtype and architecture with the compiler log, and
    :class:`KernelLookupError` for a dtype the kernel has no instantiation for.
    """
    exprs = spec.name_expressions(dtype)
    if not exprs:  # (NVRTC would compile the source alone: an empty cubin, no kernels)
        raise KernelLookupError(f"cuflow kernel {spec.name!r} has no instantiation for dtype "
                                f"{dtype!r}; it has {', '.join(spec.dtypes())}")
    from cuda.bindings import nvrtc  # noqa: PLC0415

    def check(result, what):
        err = result[0]
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise KernelCompileError(f"NVRTC {what} failed for {spec.name}/{dtype}/sm_{arch}: {err}")
        return result[1:]

    opts = [*spec.options, *CUPY_ADDED_OPTIONS, f"-arch=sm_{arch}"]
    (prog,) = check(nvrtc.nvrtcCreateProgram(source_of(spec).encode(), spec.source.encode(),
                                             0, [], []), "nvrtcCreateProgram")
    try:
        for e in exprs:
            check(nvrtc.nvrtcAddNameExpression(prog, e.encode()), "nvrtcAddNameExpression")
        err = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])[0]
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            (size,) = check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
            log = b" " * size
            check(nvrtc.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
            raise KernelCompileError(
                f"cuflow kernel {spec.name!r} ({spec.source}) for {dtype} failed to compile "
                f"for sm_{arch} with {opts}: {err}\n{log.decode(errors='replace')}")
        for e in exprs:  # every instantiation exists
            check(nvrtc.nvrtcGetLoweredName(prog, e.encode()), f"lowering {e}")
        (size,) = check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        cubin = b" " * size
        check(nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        return cubin
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
