"""The elementwise engine: compile generated kernels once, then launch them with no CuPy in between.

:func:`plan` turns an expression's output nodes and the concrete operands
(dtypes, shapes, strides, alignment) into a :class:`Plan`: the broadcast
class of each input after collapsing dimensions, the vector width, the
compiled function, the grid and the layout of the kernel's parameters.  A
plan depends on shapes only through its broadcast classes and the parameters
it packs per call, so one compiled kernel serves every shape of the same
class.  :meth:`Plan.launch` packs the pointers and scalars into a per-thread
buffer and calls ``cuLaunchKernel``.

Kernels are cached by their source: in memory per device, and on disk as
cubins (``$CUFLOW_KERNEL_CACHE``, default ``~/.cache/cuflow/kernels``), so a
second process loads instead of compiling.  :func:`stats` reports compiles,
compile time and cache hits.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import os
import struct
import threading
import time
from typing import Any

import numpy

from .._errors import CudaError, KernelCompileError
from ._ewgen import (BLOCK, ENTRY, ENTRY_FIN, LUT_BLOCK, ROW_BLOCK_VECTORS, Layout, Reduction,
                     costly, generate)
from ._expr import SHAPE_READS, Expr, apply, int_scalar_bounds
from ._expr import astype as expr_astype
from ._expr import clip as expr_clip
from ._expr import reduce as expr_reduce
from ._expr import where as expr_where

__all__ = ["Plan", "Source", "source", "plan", "stats", "EwOp", "OPS", "ew_op", "cast_op",
           "compile_cubin", "OPTIONS", "cache_dir", "collapse", "classify", "fastdiv"]

#: NVRTC options of every generated kernel: no -ftz and no fast math, and no contraction of
#: a multiply and an add into one fused multiply-add (rounded once, where NumPy rounds the
#: product first): the arithmetic gives NumPy's results to the last bit
OPTIONS = ("--std=c++17", "--fmad=false")
#: resident waves a grid-stride launch is capped at (bench/test_bench_fusion.py)
WAVES = 16
#: the cap of table lookups, whose blocks (of LUT_BLOCK threads) first build the table in
#: shared memory, a cost that more chunks per thread amortize (bench fusion img_gamma: 3 to
#: 8 waves of 1024-thread blocks, 1 to 16 of 256-thread ones measured)
WAVES_LUT = 6
#: a table lookup replaces the expression of one 8-bit input from this many elements on
LUT_MIN_ELEMENTS = 1 << 16
LUT_MAX_BYTES = 16384
#: a lookup kernel's thread stores this many bytes of its widest output per chunk, so a
#: warp's store is one contiguous span (bench/test_bench_fusion.py: the sRGB chain)
LUT_STORE_BYTES = 16
#: full reductions of up to this many elements run as one block launched from C
ONE_BLOCK_MAX = 1 << 15
#: full reductions of this many elements on launch their last step as a programmatic
#: dependent (``_launch_dependent``): below, the partials' kernel takes less device time than
#: the host takes to launch the two kernels, and the dependent launch's ctypes call would add
#: host time where no device time is saved
DEPENDENT_MIN = 1 << 22
#: kernels of fewer elements index in 32 bits (``Layout.index64`` from here on)
INDEX32_MAX = 1 << 31


@dataclasses.dataclass
class _Stats:
    compiles: int = 0
    compile_s: float = 0.0
    disk_hits: int = 0
    memory_hits: int = 0
    plans: int = 0


_STATS = _Stats()


def stats() -> dict[str, Any]:
    """The engine's counters: ``compiles``, ``compile_ms``, ``disk_hits``, ``memory_hits``, ``plans``."""
    s = _STATS
    return {"compiles": s.compiles, "compile_ms": round(s.compile_s * 1e3, 3),
            "disk_hits": s.disk_hits, "memory_hits": s.memory_hits, "plans": s.plans}


def cache_dir() -> str:
    """Where compiled kernels are kept across processes."""
    d = os.environ.get("CUFLOW_KERNEL_CACHE")
    if d:
        return d
    return os.path.join(os.path.expanduser("~"), ".cache", "cuflow", "kernels")


def compile_cubin(src: str, arch: int) -> bytes:
    """Compile generated ``src`` to a cubin for ``sm_<arch>`` with NVRTC (no GPU needed).

    Raises :class:`~cuflow.KernelCompileError` with NVRTC's log and the source, or with
    the install that brings NVRTC's Python bindings when they are missing.
    """
    try:
        from cuda.bindings import nvrtc  # noqa: PLC0415  (the cuda12 / cuda13 extras)
    except ImportError as e:
        raise KernelCompileError(
            f"cuflow compiles its generated kernels with NVRTC through cuda-bindings, which "
            f"is not installed ({e}): pip install \"cuflow[cuda13]\" (or \"cuflow[cuda12]\"), "
            f"or cuda-bindings of your CUDA major version") from e

    opts = [o.encode() for o in (*OPTIONS, f"-arch=sm_{arch}")]
    err, prog = nvrtc.nvrtcCreateProgram(src.encode(), b"cuflow_fused.cu", 0, [], [])
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise KernelCompileError(f"nvrtcCreateProgram failed: {err}")
    try:
        err = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise KernelCompileError(
                f"a generated cuflow kernel failed to compile for sm_{arch}: {err}\n"
                f"{log.decode(errors='replace')}\n--- source ---\n{src}")
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        cubin = b" " * size
        nvrtc.nvrtcGetCUBIN(prog, cubin)
        return cubin
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


# ------------------------------------------------------------ the GPU side
_CUDA: list[Any] = []


def _cuda() -> Any:
    if not _CUDA:
        import cupy  # noqa: PLC0415  (optional dependency)
        from cupy_backends.cuda.api import driver, runtime  # noqa: PLC0415

        _CUDA[:] = [(cupy, driver, runtime)]
    return _CUDA[0]


_DEV: dict[int, tuple[int, int]] = {}  # device -> (arch, SM count)


def _device(dev: int) -> tuple[int, int]:
    d = _DEV.get(dev)
    if d is None:
        _, _, rt = _cuda()
        major = rt.deviceGetAttribute(75, dev)  # cudaDevAttrComputeCapabilityMajor
        minor = rt.deviceGetAttribute(76, dev)
        sms = rt.deviceGetAttribute(16, dev)  # cudaDevAttrMultiProcessorCount
        d = _DEV[dev] = (major * 10 + minor, sms)
    return d


_MODULES: dict[tuple[str, int], tuple[Any, int, int]] = {}
_LOCK = threading.Lock()


def _functions(src: str, dev: int) -> tuple[int, int]:
    """``(main, finish)`` function pointers of ``src`` on ``dev`` (finish 0 when absent)."""
    # the options are part of the key: a kernel on disk compiled with others is not this one
    digest = hashlib.sha256("\n".join((*OPTIONS, src)).encode()).hexdigest()[:32]
    hit = _MODULES.get((digest, dev))
    if hit is not None:
        _STATS.memory_hits += 1
        return hit[1], hit[2]
    with _LOCK:
        # checked again under the lock: a second load by another thread would replace the
        # module, and the unloaded one's function handles, kept in plans, would launch a
        # freed (or later reused) handle (docs/scaling.md's Dask threads)
        hit = _MODULES.get((digest, dev))
        if hit is not None:
            _STATS.memory_hits += 1
            return hit[1], hit[2]
        cupy, _, _ = _cuda()
        arch, _ = _device(dev)
        path = os.path.join(cache_dir(), f"{digest}-sm{arch}.cubin")
        cubin = None
        try:
            with open(path, "rb") as f:
                cubin = f.read()
            _STATS.disk_hits += 1
        except OSError:
            pass
        if cubin is None:
            t0 = time.perf_counter()
            cubin = compile_cubin(src, arch)
            _STATS.compiles += 1
            _STATS.compile_s += time.perf_counter() - t0
            try:
                os.makedirs(cache_dir(), exist_ok=True)
                tmp = f"{path}.{os.getpid()}.tmp"
                with open(tmp, "wb") as f:
                    f.write(cubin)
                os.replace(tmp, path)  # atomic: a concurrent reader never sees half a file
            except OSError:
                pass  # a read-only home: compile again next process
        mod = cupy.cuda.function.Module()
        mod.load(cubin)
        fp = mod.get_function(ENTRY).ptr
        fin = mod.get_function(ENTRY_FIN).ptr if ENTRY_FIN in src else 0
        _MODULES[(digest, dev)] = (mod, fp, fin)
        return fp, fin


class _Params(threading.local):
    """Per-thread kernel-parameter slots (8 bytes each) and the ``void**`` array to them."""

    N = 96

    def __init__(self) -> None:
        self.slots = (ctypes.c_uint64 * self.N)()
        base = ctypes.addressof(self.slots)
        self.argv = (ctypes.c_void_p * self.N)(*(base + 8 * i for i in range(self.N)))
        self.argv_ptr = ctypes.addressof(self.argv)


_P = _Params()


# -------------------------------------------- programmatic dependent launch
class _LaunchValue(ctypes.Union):  # CUlaunchAttributeValue (64 bytes)
    _fields_ = [("pad", ctypes.c_char * 64), ("allowed", ctypes.c_int)]


class _LaunchAttr(ctypes.Structure):  # CUlaunchAttribute
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", _LaunchValue)]


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("shared", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_LaunchAttr)), ("nattrs", ctypes.c_uint)]


_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
_EX: list[Any] = []  # [cuLaunchKernelEx or None], found at the first full reduction


class _Dependent(threading.local):
    """Per-thread launch configuration of a one-block finishing kernel, as a programmatic
    dependent of the kernel before it on its stream."""

    def __init__(self) -> None:
        self.attr = _LaunchAttr(id=_PROGRAMMATIC_STREAM_SERIALIZATION)
        self.attr.value.allowed = 1
        self.cfg = _LaunchConfig((1, 1, 1), (BLOCK, 1, 1), 0, None, ctypes.pointer(self.attr),
                                 1)


_D = _Dependent()


def _launch_ex(dev: int) -> Any:
    """The driver's ``cuLaunchKernelEx`` where programmatic dependent launch serves on
    ``dev``: the driver captures it into graphs (CUDA 12.3 on) and the device has it
    (compute capability 9.0 on); else None."""
    if not _EX:
        fn = None
        _, _, rt = _cuda()
        if rt.driverGetVersion() >= 12030:
            try:
                fn = ctypes.CDLL("libcuda.so.1").cuLaunchKernelEx
                fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                               ctypes.c_void_p]
                fn.restype = ctypes.c_int
            except (OSError, AttributeError):
                fn = None
        _EX.append(fn)
    return _EX[0] if _device(dev)[0] >= 90 else None


def _launch_dependent(fin: int, stream: int, p: _Params) -> None:
    """Launch the one-block ``fin`` with its parameters in ``p`` on ``stream`` as a
    programmatic dependent of the kernel before it: the driver prepares its launch while
    that kernel runs and starts it as that kernel's blocks finish, and ``griddepcontrol.wait``
    in its source orders its reads after all of that kernel's writes (``sq_diff_sum`` of
    ``python -m cuflow bench``, docs/performance.md).  A plan uses it where
    :func:`_launch_ex` found it."""
    d = _D
    d.cfg.stream = stream
    status = _EX[0](ctypes.addressof(d.cfg), fin, p.argv_ptr, None)
    if status:
        raise CudaError(f"cuflow: the launch of a full reduction's last step "
                        f"(cuLaunchKernelEx) failed with CUDA status {status} (a CUresult; "
                        f"cuda.h names it)")


# ------------------------------------------------------------------ layouts
def collapse(shape: tuple, strides: list) -> tuple[tuple, list]:
    """Merge neighbouring dimensions every operand walks contiguously; drop size-1 ones.

    ``strides`` holds one stride tuple (in elements, 0 for broadcast) per operand.
    """
    dims = [(n, [s[d] for s in strides]) for d, n in enumerate(shape) if n != 1]
    out: list = []
    for n, st in dims:
        if out and all(p == s * n for p, s in zip(out[-1][1], st)):
            out[-1] = (out[-1][0] * n, st)
        else:
            out.append((n, st))
    cshape = tuple(n for n, _ in out)
    cstrides = [tuple(st[k] for _, st in out) for k in range(len(strides))]
    return cshape, cstrides


def _contig(shape: tuple) -> tuple:
    st, acc = [], 1
    for n in reversed(shape):
        st.append(acc)
        acc *= n
    return tuple(reversed(st))


def classify(cshape: tuple, st: tuple) -> tuple:
    """``(class, extras)`` of an operand with strides ``st`` over collapsed ``cshape``."""
    if all(s == 0 for s in st):
        return "s", ()
    if st == _contig(cshape):
        return "c", ()
    nz = [d for d, s in enumerate(st) if s != 0]
    if len(nz) == 1 and st[nz[0]] == 1:
        d = nz[0]
        inner = 1
        for n in cshape[d + 1:]:
            inner *= n
        return "v", (inner, cshape[d])
    return "g", tuple(cshape) + tuple(st)


def fastdiv(d: int, bits: int) -> tuple[int, int]:
    """``(m, s)`` with ``x // d == mulhi(x, m) >> s`` for every ``x < 2**bits``.

    ``bits`` is 31 (a 32-bit multiply-high) or 63 (64-bit); ``m`` is 0 for ``d <= 1``
    (the kernel's ``cf_fdiv`` then returns ``x``) and is given as a signed 64-bit value.
    With ``l = ceil(log2(d))``, ``m = ceil(2**(bits + l) / d)`` errs by less than one
    ``d``-th over that range (Granlund and Montgomery's round-up method).
    """
    if d <= 1:
        return 0, 0
    lg = (d - 1).bit_length()
    m = ((1 << (bits + lg)) + d - 1) // d
    return (m - (1 << 64) if m >= 1 << 63 else m), lg - 1


def broadcast_strides(x: Any, shape: tuple) -> tuple | None:
    """``x``'s strides in elements over ``shape`` (0 where broadcast); None when not whole elements."""
    nd = len(shape)
    off = nd - x.ndim
    st = [0] * nd
    isz = x.itemsize
    for d in range(x.ndim):
        if x.shape[d] != 1:
            s = x.strides[d]
            if s % isz:
                return None
            st[off + d] = s // isz
    return tuple(st)


@dataclasses.dataclass
class Plan:
    """A compiled kernel and how to call it for one operand signature."""

    fp: int
    fin: int
    fmt: Any  # struct.Struct of the kernel's parameters
    extras: tuple  # per-call integer parameters (n, broadcast extents)
    nin: int
    grid: int
    n: int
    reduction: Reduction | None
    red_extra: tuple = ()
    src: str = ""
    tmp_bytes: int = 0  # scratch the caller allocates per call (a reduction's partials)
    lut: int = 0  # >0: a table lookup of 256 x lut entries (see _ewgen.Layout)
    vec: int = 1
    cap: int = 0  # most blocks of a launch
    block: int = BLOCK  # threads per block (LUT_BLOCK for a table lookup)
    dependent: bool = False  # a full reduction's last step is a programmatic dependent launch

    def launch(self, in_ptrs: list, out_ptrs: list, scalars: list, stream: int,
               tmp: Any = None) -> None:
        """Queue the kernel(s) on ``stream``; ``tmp``: :attr:`tmp_bytes` of scratch (the
        partials of a full reduction)."""
        if not self.n:
            return
        _, driver, _ = _cuda()
        p = _P
        if self.reduction is None:
            self.fmt.pack_into(p.slots, 0, *in_ptrs, *out_ptrs, *self.extras, *scalars)
            driver.launchKernel(self.fp, self.grid, 1, 1, self.block, 1, 1, 0, stream,
                                p.argv_ptr, 0)
            return
        if self.reduction.mode == "all":
            pa = tmp.data.ptr
            pi = pa + self.grid * 8
            self.fmt.pack_into(p.slots, 0, *in_ptrs, out_ptrs[0], *self.extras, *scalars, pa,
                               pi)
            driver.launchKernel(self.fp, self.grid, 1, 1, BLOCK, 1, 1, 0, stream, p.argv_ptr, 0)
            if self.grid == 1:
                return  # the one block wrote the result
            _FIN.pack_into(p.slots, 0, pa, pi, self.grid, out_ptrs[0], self.n)
            if self.dependent:
                _launch_dependent(self.fin, stream, p)
            else:
                driver.launchKernel(self.fin, 1, 1, 1, BLOCK, 1, 1, 0, stream, p.argv_ptr, 0)
            return
        self.fmt.pack_into(p.slots, 0, *in_ptrs, out_ptrs[0], *self.extras, *scalars,
                           *self.red_extra)
        driver.launchKernel(self.fp, self.grid, 1, 1, BLOCK, 1, 1, 0, stream, p.argv_ptr, 0)


_FIN = struct.Struct("=QQqQq")


def _occupancy(fp: int, block: int = BLOCK) -> int:
    _, driver, _ = _cuda()
    try:
        return max(1, driver.occupancyMaxActiveBlocksPerMultiprocessor(fp, block, 0))
    except Exception:
        return 2048 // block


@dataclasses.dataclass
class Source:
    """A generated kernel before compiling: its source and how its parameters are laid out."""

    src: str
    fmt: str
    extras: tuple
    n: int
    vec: int
    reduction: Reduction | None
    red_extra: tuple
    lut: int = 0


def source(outputs: tuple, input_nodes: list, scalar_nodes: list, arrays: list,
           out_dtypes: tuple, shape: tuple, reduction: tuple | None, aligned: bool,
           allow_lut: bool = True, keep_axis: bool = False) -> Source:
    """The kernel of ``outputs`` over ``arrays`` (contiguous outputs of ``shape``), uncompiled.

    ``arrays`` need ``dtype``, ``shape``, ``strides`` and ``itemsize`` only (NumPy arrays
    stand in for device arrays when checking the generator on a CPU).
    ``reduction``: None, or ``(name, axis, out_dtype)`` for a trailing reduction of the
    single output over ``axis`` (None: everything) of the pre-reduction ``shape``.
    ``aligned``: every operand starts on 16 bytes (the vectorized kernel may run).
    """
    strides = [broadcast_strides(x, shape) for x in arrays]
    n = 1
    for s in shape:
        n *= s
    if reduction is None:
        all_st = strides + [_contig(shape)] * len(out_dtypes)
    else:
        all_st = list(strides)
    cshape, cst = collapse(shape, all_st) if all_st else (shape, [])
    if not cshape:
        cshape = (1,) if n else (0,)
        cst = [(0,) if all(s == 0 for s in st) else (1,) for st in cst]
    ins = []
    extras: list = []
    bits = 63 if n >= INDEX32_MAX else 31  # the index width (and the divisions')
    vgroups: dict = {}  # per-channel operands of the same strides share one channel index
    vec_items = [numpy.dtype(d).itemsize for d in out_dtypes] if reduction is None else []
    for k, x in enumerate(arrays):
        cls, ex = classify(cshape, cst[k])
        if cls == "v":
            lead, _ = vgroups.setdefault(cst[k], (k, ex))
            ins.append((x.dtype, cls, lead))
            if lead == k:
                extras += [ex[0], *fastdiv(ex[0], bits), ex[1], *fastdiv(ex[1], bits)]
            continue
        ins.append((x.dtype, cls, len(cshape) if cls == "g" else 0))
        extras += list(ex)
        if cls == "c":
            vec_items.append(x.itemsize)
    # the widest contiguous operand moves 16 bytes per access, narrower ones fewer: a warp's
    # access of each operand is then one contiguous span.  Two 16-byte stores per thread (the
    # narrowest operand moving 16 bytes) write every sector in two halves and reach 2-4 points
    # less of the floor on conversions (fusion bench u8_to_half, uint8 / float16 -> float32).
    vec = 16 // max(vec_items) if vec_items and aligned else 1
    lut = 0
    cin = [k for k, (_, cls, _) in enumerate(ins) if cls == "c"]
    if (allow_lut and reduction is None and aligned and n >= LUT_MIN_ELEMENTS and len(cin) == 1
            and arrays[cin[0]].itemsize == 1 and len(vgroups) <= 1
            and all(cls in "csv" for _, cls, _ in ins) and costly(outputs)):
        vex = [ex for _, ex in vgroups.values()]
        L = vex[0][1] if vex else 1
        out_bytes = sum(numpy.dtype(d).itemsize for d in out_dtypes)
        if L <= 16 and 256 * L * out_bytes <= LUT_MAX_BYTES:
            lut = L
            vec = max(1, min(16, LUT_STORE_BYTES // max(numpy.dtype(d).itemsize
                                                         for d in out_dtypes)))
            inner = vex[0][0] if vex else 1
            extras = [inner, *fastdiv(inner, bits)]
    red = None
    red_extra: tuple = ()
    if reduction is not None:
        name, axis, odt = reduction
        mode = "all"
        if axis is not None:
            inner = 1
            for s in shape[axis + 1:]:
                inner *= s
            rlen = shape[axis]
            if keep_axis or not (n and n == rlen):  # else one output: the whole array
                mode = "rows" if inner == 1 else "cols"
                red_extra = (rlen, inner)
                if mode == "cols" or rlen % vec:
                    vec = 1  # rows read V at a time only when every row starts aligned
        red = Reduction(name, mode, outputs[0].dtype, numpy.dtype(odt))
    layout = Layout(tuple(ins), tuple(sn.dtype for sn in scalar_nodes),
                    tuple(numpy.dtype(d) for d in out_dtypes), vec, red, lut, bits == 63)
    src = generate(layout, outputs, input_nodes, scalar_nodes)
    # parameter layout: pointers, n, class extras, scalars (+ reduction extras); a table
    # lookup's extras are its channel's (inner, fastdiv)
    fmt = "=" + "Q" * len(arrays)
    if reduction is None or red is not None:
        fmt += "Q" * len(out_dtypes)
    fmt += "q" * (1 + len(extras))
    # a Python int whose every use is uint64 may pass int64's range: its bits go as unsigned
    # (the caller has checked the value against int_scalar_bounds)
    fmt += "".join("d" if sn.dtype.kind == "f" else "Q" if sn.dtype.kind == "u" or (
        b is not None and b[1] >= 2**63) else "q"
        for sn, b in zip(scalar_nodes, int_scalar_bounds(outputs, scalar_nodes)))
    if red is not None:
        fmt += "QQ" if red.mode == "all" else "qq"
    return Source(src, fmt, (n, *extras), n, vec, red, red_extra, lut)


def plan(outputs: tuple, input_nodes: list, scalar_nodes: list, arrays: list,
         out_dtypes: tuple, shape: tuple, reduction: tuple | None, dev: int,
         aligned: bool, allow_lut: bool = True, keep_axis: bool = False) -> Plan:
    """Compile (or load) the kernel of :func:`source` and size its grid for device ``dev``."""
    _STATS.plans += 1
    args = (outputs, input_nodes, scalar_nodes, arrays, out_dtypes, shape, reduction, dev,
            aligned)
    p = _plan(*args, allow_lut, keep_axis)
    # every block of a table lookup builds the whole table (256 x channels evaluations):
    # where the grid's tables hold as many evaluations as the elements, per element is cheaper
    if p.lut and p.grid * 256 * p.lut >= p.n:
        p = _plan(*args, False, keep_axis)
    return p


def _plan(outputs: tuple, input_nodes: list, scalar_nodes: list, arrays: list,
          out_dtypes: tuple, shape: tuple, reduction: tuple | None, dev: int,
          aligned: bool, allow_lut: bool, keep_axis: bool) -> Plan:
    s = source(outputs, input_nodes, scalar_nodes, arrays, out_dtypes, shape, reduction,
               aligned, allow_lut, keep_axis)
    fp, fin = _functions(s.src, dev)
    _, sms = _device(dev)
    block = LUT_BLOCK if s.lut else BLOCK
    occ = _occupancy(fp, block)
    n, red = s.n, s.reduction
    cap = occ * sms * (1 if red is not None else WAVES_LUT if s.lut else WAVES)
    if red is None or red.mode == "all":
        work = -(-max(n // s.vec, 1) // block)
        grid = max(1, min(work, cap))
    else:
        rlen, _ = s.red_extra
        outs = n // max(rlen, 1) if n else 0
        per = 1 if red.mode == "cols" else BLOCK if rlen >= ROW_BLOCK_VECTORS * s.vec else 32
        grid = max(1, min(-(-max(outs * per, 1) // BLOCK), occ * sms * WAVES))
    return Plan(fp, fin, struct.Struct(s.fmt), s.extras, len(arrays), grid, n, red,
                s.red_extra, s.src, tmp_bytes=grid * 16 if red is not None and
                red.mode == "all" else 0, lut=s.lut, vec=s.vec, cap=cap, block=block,
                dependent=red is not None and red.mode == "all" and bool(fin)
                and n >= DEPENDENT_MIN and _launch_ex(dev) is not None)


# ------------------------------------------------- single ops, launched from C
#: single ops whose generated code gives NumPy's integer results exactly (wrapping
#: arithmetic, comparisons, bitwise and logical operations); others keep the backend's
#: integer semantics (division by zero, shifts past the width, negative powers)
_INT_EXACT = frozenset((
    "add", "subtract", "multiply", "negative", "positive", "absolute", "maximum", "minimum",
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "bitwise_and",
    "bitwise_or", "bitwise_xor", "invert", "bitwise_not", "logical_and", "logical_or",
    "logical_xor", "logical_not", "copy", "where"))


def _operands_exact(op: EwOp, args: tuple) -> bool:
    """Whether the operands keep NumPy's semantics in generated code.  A fused function:
    bool, integer and floating arrays and Python scalars.  A single op: floating and bool
    arrays with any Python scalars; integer arrays only for ``_INT_EXACT`` ops, all of one
    integer dtype and without Python scalars (whose range NumPy checks per value)."""
    if op.fused:
        return all(type(x) is float or type(x) is int or x.dtype.kind in "biuf" for x in args)
    ints = set()
    scalars = floats = False
    for x in args:
        if type(x) is float or type(x) is int:
            scalars = True
        elif x.dtype.kind in "iu":
            ints.add(x.dtype)
        elif x.dtype.kind == "f":
            floats = True
        elif x.dtype.kind != "b":
            return False
    return not ints or (op.ints and not scalars and not floats and len(ints) == 1)


def _shape_free(x: Any) -> bool:
    """A scalar, or an array whose plan does not depend on its shape (see ``EwOp.load``)."""
    shape = getattr(x, "shape", None)
    return shape is None or (len(shape) > 0 and 1 not in shape and 0 not in shape)


class EwOp:
    """One elementwise function of the namespace as an engine expression.

    ``fn`` builds the expression from operand nodes.  ``plans`` maps the compiled
    launcher's key of an operand signature (``_ewlaunch.c``, ``Launcher.ew``) to
    ``(function, result dtype, vector width, most blocks, trailing zero parameters, result
    shape or None for the operands', most elements or 0)``, or to None where the
    engine leaves the call to the backend (integer operands outside
    :func:`_operands_exact`, shapes that differ, a signature NumPy has no loop for: the
    backend then gives its result or error).
    """

    __slots__ = ("name", "fn", "plans", "fused", "ints")

    def __init__(self, name: str, fn: Any, fused: bool = False) -> None:
        self.name, self.fn, self.plans = name, fn, {}
        self.fused = fused  # a cuflow.fuse function: every dtype (NumPy's semantics)
        self.ints = name in _INT_EXACT  # integer arrays of one dtype, without Python scalars

    def __repr__(self) -> str:
        return f"<engine op {self.name}>"

    def load(self, key: int, args: tuple, dst: Any) -> Any:
        try:
            p = self._build(args, dst)
        except Exception:  # noqa: BLE001  (the backend's path reports it)
            p = None
        # The key holds dtypes and alignment, not shapes: a plan is kept only when every
        # operand classifies as contiguous whatever its shape.  A 0-d or empty operand, or
        # a dimension of length 1, can classify as one element or a vector (stride 0
        # there), and a later call of another shape under the same key must not reuse that.
        if all(_shape_free(x) for x in args) and (dst is None or _shape_free(dst)):
            self.plans[key] = p
        return p

    def _build(self, args: tuple, dst: Any) -> Any:
        nodes, arrays, in_nodes, sc_nodes = [], [], [], []
        shape: tuple = ()
        if not _operands_exact(self, args):
            return None  # the backend's path (a fused function's unfused one)
        for i, x in enumerate(args):
            if type(x) is float or type(x) is int:
                e = Expr("scalar", (), numpy.float64 if type(x) is float else numpy.int64, (),
                         type(x)(0), weak=True)
                sc_nodes.append(e)
            else:
                e = Expr("input", (), x.dtype, tuple(x.shape), i)
                shape = tuple(x.shape)
                arrays.append(x)
                in_nodes.append(e)
            nodes.append(e)
        reads = SHAPE_READS[0]
        with numpy.errstate(all="ignore"):
            out = self.fn(*nodes)
        if SHAPE_READS[0] != reads:
            return None  # the expression may differ by shape: the caller's shape-keyed path
        if isinstance(out, Expr) and out.op.startswith("reduce:") and not self.fused and \
                out.value in ((None, False), (len(shape) - 1, False)) and shape:
            return self._reduction(out, in_nodes, sc_nodes, arrays, shape)
        if not isinstance(out, Expr) or out.op in ("const", "scalar", "input") or \
                out.op.startswith("reduce:") or out.shp != shape:
            return None
        if sc_nodes and any(b is not None and b[:2] != (-2**63, 2**63 - 1)
                            for b in int_scalar_bounds((out,), sc_nodes)):
            # a Python int the kernel casts to a narrower integer dtype: NumPy range-checks
            # it per value, and the launcher from C packs it unchecked (the caller's path
            # checks it: cuflow.fuse's Fused._call)
            return None
        odt = out.dtype
        if dst is not None:
            if not numpy.can_cast(odt, dst.dtype, "same_kind") or dst.dtype.kind not in "biuf":
                return None  # (a complex dst: the caller's error, or its unfused path)
            odt = dst.dtype
        aligned = all(not x.data.ptr & 15 for x in arrays) and (
            dst is None or not dst.data.ptr & 15)
        _, _, rt = _cuda()
        p = plan((out,), in_nodes, sc_nodes, arrays, (odt,), shape, None, rt.getDevice(),
                 aligned, allow_lut=self.fused)
        if p.lut or p.extras != (p.n,):  # one launch over contiguous operands only
            return None
        # a kernel generated for fewer than 2**31 elements indexes in 32 bits
        return (p.fp, out.dtype, p.vec, p.cap, 0, None, 0 if p.n >= INDEX32_MAX else
                INDEX32_MAX - 1)

    def _reduction(self, out: Expr, in_nodes: list, sc_nodes: list, arrays: list,
                   shape: tuple) -> Any:
        """A full reduction of a small array: one block, which writes the 0-d result."""
        _, _, rt = _cuda()
        name = out.op[7:]
        aligned = all(not x.data.ptr & 15 for x in arrays)
        axis = out.value[0]
        p = plan((out.args[0],), in_nodes, sc_nodes, arrays, (out.dtype,), shape,
                 (name, axis, out.dtype), rt.getDevice(), aligned, keep_axis=True)
        if p.reduction is None or p.extras != (p.n,):
            return None
        if p.reduction.mode == "rows":  # the launcher appends (last extent, 1)
            return (p.fp, out.dtype, p.vec, p.cap, -1, None, 0)
        if p.reduction.mode != "all":
            return None
        return (p.fp, out.dtype, p.vec, 1, 2, (), ONE_BLOCK_MAX)


#: the :class:`EwOp` of each name built so far (``OPS.get(name) or ew_op(name)``: the
#: dispatch's lookup without a call)
OPS: dict[Any, EwOp] = {}
#: single ops left to the backend's ufuncs, cuflow's own remainder, floor_divide and divmod
#: (``_cupy_ufuncs``), which give NumPy's signs of NaN results too; fused code computes the
#: same values with the GPU's NaN
_BACKEND_ONLY = frozenset(("remainder", "mod", "fmod", "floor_divide"))


def _pow_operator(x: Expr, y: Expr) -> Expr | None:
    # bool ** int: NumPy's operator squares for 2 (int8) and calls power otherwise (int64),
    # a choice by value that kernels keyed by dtypes cannot make: the backend's path
    if x.dtype == numpy.bool_ and y.op == "scalar" and y.dtype.kind == "i":
        return None
    return apply("power", x, y)


#: ``darray.__pow__``'s op (``power`` but for a bool array and a Python int)
POW_OPERATOR = EwOp("power", _pow_operator)


def ew_op(name: str) -> EwOp:
    """The :class:`EwOp` of ufunc ``name`` (also ``"where"``, ``"clip"``, ``"copy"``, and
    ``"reduce:sum"`` & co. for full reductions of small arrays)."""
    op = OPS.get(name)
    if op is None:
        if name == "where":
            fn = expr_where
        elif name == "clip":
            fn = expr_clip
        elif name.startswith("reduce:"):  # "reduce:sum" (everything), "reduce:sum:-1"
            _, rname, *ax = name.split(":")

            def fn(x, _n=rname, _a=int(ax[0]) if ax else None):
                return expr_reduce(_n, x, _a)
        elif name == "copy":
            def fn(x):
                # a float16 kernel computes in float: NaN payloads and signs would not survive
                # the round trip, where a copy is bit-exact (the backend's copy is)
                return None if x.dtype == numpy.float16 else apply("positive", x)
        elif name in _BACKEND_ONLY:
            def fn(*xs):
                return None
        else:
            def fn(*xs, _n=name):
                return apply(_n, *xs)
        op = OPS[name] = EwOp(name, fn)
    return op


def cast_op(dtype: Any) -> EwOp:
    """The :class:`EwOp` of ``astype(dtype)``."""
    op = OPS.get(dtype)
    if op is not None:
        return op
    dt = numpy.dtype(dtype)
    op = OPS.get(dt)
    if op is None:
        op = OPS[dtype] = OPS[dt] = EwOp(f"astype({dt})", lambda x: expr_astype(x, dt) if x.dtype != dt
                             else None)
    return op
