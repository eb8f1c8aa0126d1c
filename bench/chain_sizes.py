"""Fused chains at larger inputs: the share of the floor against a copy of the same bytes.

    python bench/chain_sizes.py [--scales 1 2 4] [--chains img_gamma u8_to_half ...]

Each chain of ``python -m cuflow bench``'s fusion section (``cuflow/bench/_fusion.py``)
runs on its bench input with the leading axis repeated ``scale`` times, and is timed on the
device against a ``cudaMemcpyAsync`` of the chain's floor bytes (the bytes it must read and
write), the two interleaved round by round, medians.  The floor is those bytes over the
bandwidth of a 1 GiB copy measured first.  A kernel of tens of microseconds pays its launch
gap, ramp-up and tail at every size, and so does the copy: the rows say how much of a
chain's distance to the floor is that, and how much the chain's own.
"""

from __future__ import annotations

import argparse
import sys

import numpy


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scales", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--chains", nargs="+",
                    default=["img_gamma", "u8_to_half", "u8_normalize", "row_sum_exp", "gelu"])
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)

    import cuflow as cf
    from cuflow.bench import _fusion
    from cuflow.bench._headline import _interleaved
    from cuflow.testing import copy_bandwidth_tbps, device_time_us

    unknown = sorted(set(args.chains) - set(_fusion.CHAINS))
    if unknown:
        ap.error(f"--chains: unknown {unknown}; the chains are {sorted(_fusion.CHAINS)}")
    if min(args.scales) < 1:
        ap.error(f"--scales must be >= 1, got {args.scales}")
    if not cf.get_backend().is_gpu:
        print("bench/chain_sizes.py times kernels on a GPU; this machine runs the NumPy backend",
              file=sys.stderr)
        return 1
    import cupy

    bw = copy_bandwidth_tbps(1 << 30)
    print(f"copy bandwidth {bw:.3f} TB/s (1 GiB)")
    m = _fusion.namespaces(cf, cupy, None)["cuflow"]
    rng = numpy.random.default_rng(3)
    for name in args.chains:
        chain = _fusion.CHAINS[name][0]
        base = _fusion._inputs(name, rng)
        fused = cf.fuse(lambda *a, _c=chain: _c(m, *a))
        for k in args.scales:
            args_k = tuple(cf.asarray(a) for a in (numpy.concatenate([base[0]] * k),
                                                   *base[1:]))
            nbytes = _fusion._nbytes(args_k, fused(*args_k))
            half = nbytes // 32 * 16
            src, dst = cupy.empty(half, cupy.uint8), cupy.empty(half, cupy.uint8)

            def copy(src=src, dst=dst, half=half):
                cupy.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, half, 3,
                                              cupy.cuda.get_current_stream().ptr)

            t = _interleaved({"fuse": lambda a=args_k: fused(*a), "copy": copy}, args.rounds,
                             10, timer=device_time_us)
            floor = nbytes / (bw * 1e12) * 1e6
            print(f"{name:14s} x{k} {nbytes / 1e6:7.1f} MB  floor {floor:6.1f} us  "
                  f"cuflow.fuse {t['fuse']:7.1f} us ({100 * floor / t['fuse']:3.0f}%)  "
                  f"copy {t['copy']:7.1f} us ({100 * floor / t['copy']:3.0f}%)", flush=True)
            del args_k, src, dst
    return 0


if __name__ == "__main__":
    sys.exit(main())
