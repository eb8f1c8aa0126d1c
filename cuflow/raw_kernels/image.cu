// cuflow image kernels: fused colour conversion, resampling, normalization,
// layout change and cast, in one pass over the pixels.
//
// Two entry points, both templated on the output type T (float, cf_half or
// unsigned char) and both taking one parameter struct by value (packed on the
// host by cuflow.image with the same field order; see _PARAMS there):
//
// cf_normalize_vec<T, C, OC, R>  identity geometry on packed 8-bit frames
//     whose pixel count is a multiple of R: tiles staged through shared
//     memory with 16-byte loads, coalesced vector stores of R pixels per
//     plane (NCHW) or per pixel run (NHWC).  The bandwidth-bound hot path.
// cf_warp<T, FMT, C>  everything else: nearest / bilinear / area resampling of packed
//     (1-4 channels), NV12 or I420 sources, per-output regions of interest,
//     letterbox regions with constant padding, horizontal flip, channel
//     selection and RGB->GRAY.  A block covers 4 output rows of 32 * PX
//     pixels (PX per thread, by source kind), grid (ceil(OW / (32 * PX)),
//     ceil(OH / 4), B), so no thread divides.  Templated on the source
//     format and channel count.
// cf_resize_lin<T, FMT, C, OC>  cf_warp's commonest case on its own:
//     bilinear from packed or NV12 frames, each output channel a source
//     channel (resize, resize_normalize, letterbox, crop_resize); word loads,
//     taps kept across rows.
// cf_resize_nv12<T>  cf_resize_lin's NV12 case for even output widths: two
//     adjacent output columns per thread, which share their loads when their
//     taps are close (downscales up to about 3x), one store per channel and pair.
//
// Conventions (torchvision / PyTorch, so results can be checked against it):
//   bilinear: src = (dst + 0.5) * scale - 0.5, clamped below at 0 (as
//     PyTorch's area_pixel_compute_source_index, align_corners=False);
//     weights h0*(w0*p00 + w1*p01) + h1*(w0*p10 + w1*p11).
//   nearest:  src = min(floor(dst * scale), size - 1) (PyTorch 'nearest').
//   area:     the mean over the source box [dst*scale, (dst+1)*scale), with
//     fractional weights at its edges (OpenCV INTER_AREA); bilinear when
//     the axis is upscaled.
//   With regions of interest the box [x1, x2) x [y1, y2) (source pixels,
//   continuous) is resampled to the output; coordinates are clamped to the
//   frame, so boxes that leave it repeat the border pixels.
// YUV sources are resampled as Y, U, V (chroma upsampled by replication) and
// converted to RGB after, once per output pixel: the same as converting every
// source pixel first, except that the conversion's clamp applies to the
// resampled value.
// Values are computed in float on the 0-255 scale (0-1 for YUV sources, whose
// output coefficients the host scales to match), then out = v * a[c] + b[c];
// unsigned char outputs are rounded half to even and clamped to [0, 255].
// Indexing into frames is 64-bit.

struct __align__(2) cf_half { unsigned short bits; };

__device__ __forceinline__ cf_half cf_f2h(float f) {
    cf_half h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
    return h;
}

template <typename T> struct Out;
template <> struct Out<float> {
    __device__ static float cvt(float v) { return v; }
};
template <> struct Out<cf_half> {
    __device__ static cf_half cvt(float v) { return cf_f2h(v); }
};
template <> struct Out<unsigned char> {
    __device__ static unsigned char cvt(float v) {
        return (unsigned char)__float2int_rn(fminf(fmaxf(v, 0.0f), 255.0f));
    }
};

// ------------------------------------------------------------------ fast path
struct NormParams {
    const unsigned char* src;  // 16-byte aligned, frames back to back
    void* dst;                 // 16-byte aligned
    long long npix;            // pixels per frame (a multiple of 4)
    long long nframes;
    int nchw;                  // 1: planar output (N, OC, H, W); 0: (N, H, W, OC)
    int src_map[4];            // output channel c reads source channel src_map[c]
    float a[4];
    float b[4];
    int pad_;
};

template <int NB> struct Vec;  // NB bytes moved by one load/store
template <> struct Vec<2> { typedef unsigned short type; };
template <> struct Vec<4> { typedef unsigned int type; };
template <> struct Vec<8> { typedef uint2 type; };
template <> struct Vec<16> { typedef uint4 type; };

// Copy BYTES (a multiple of 4) from registers to global memory with the widest
// stores the size allows; `dst` is aligned to that width by construction.
// Outputs are written once and not read again by this kernel: streaming
// (evict-first) stores keep them from displacing the input tiles in L2.
// Tuning knobs: minimum resident blocks per SM of cf_normalize_vec for runs of up to
// 12 bytes of input and for 24-byte runs (more registers, so fewer blocks, for wider
// runs), minimum resident blocks and pixels per thread of cf_warp for packed and for
// YUV sources (cuflow/image/_plan.py sizes its grid with the same pixels per thread,
// _WARP_PX).  cf_normalize_vec: 8 blocks (32 registers, no spill) for runs of up to 12
// bytes is fastest in bench/test_bench_image.py::test_image[normalize float32]; for
// 24-byte runs (float16 and uint8 outputs) 5: 6 and 7 spill, and 4 is no faster
// (bench/test_bench_image.py::test_image[normalize float16]).
// The sweeps' figures are on docs/performance.md.
#ifndef CF_NORM_MINB
#define CF_NORM_MINB 8
#endif
#ifndef CF_NORM_MINB24
#define CF_NORM_MINB24 5
#endif
#ifndef CF_WARP_PX
#define CF_WARP_PX 2
#endif
#ifndef CF_WARP_PX_YUV
#define CF_WARP_PX_YUV 4
#endif
#ifndef CF_STREAM_STORES
#define CF_STREAM_STORES 1
#endif
#ifndef CF_WARP_MINB
#define CF_WARP_MINB 12
#endif
#ifndef CF_WARP_MINB_YUV
#define CF_WARP_MINB_YUV 10
#endif

template <int BYTES>
__device__ __forceinline__ void store_run(void* dst, const void* reg) {
    constexpr int NB = (BYTES % 16 == 0) ? 16 : (BYTES % 8 == 0) ? 8 : (BYTES % 4 == 0) ? 4 : 2;
    typedef typename Vec<NB>::type V;
    V* d = reinterpret_cast<V*>(dst);
    const V* s = reinterpret_cast<const V*>(reg);
#pragma unroll
    for (int i = 0; i < BYTES / NB; ++i) {
#if CF_STREAM_STORES
        __stcs(d + i, s[i]);
#else
        d[i] = s[i];
#endif
    }
}

// Element (k*C + sc) of v as float, for a runtime channel sc, with static indexing only.
template <int C, typename V>
__device__ __forceinline__ float pick(const V* v, int k, int sc) {
    float r = (float)v[k * C];
#pragma unroll
    for (int s = 1; s < C; ++s)
        if (sc == s) r = (float)v[k * C + s];
    return r;
}

// Convert npx pixels (a multiple of R) staged in `tile`, starting at pixel p0
// of the batch: each thread converts one run of R pixels and writes it with
// one vector store per plane (NCHW: a warp writes 32 consecutive runs, fully
// coalesced) or one run of R*OC values (NHWC).
template <typename T, int C, int OC, int R>
__device__ __forceinline__ void convert_tile(const NormParams& p, const unsigned char* tile,
                                             long long p0, int npx, bool small) {
    for (int j = threadIdx.x; j < npx / R; j += 256) {
        const long long P = p0 + R * j;
        const long long f = small ? (long long)((unsigned)P / (unsigned)p.npix) : P / p.npix;
        alignas(16) unsigned int w[R * C / 4];
        const unsigned int* tw = reinterpret_cast<const unsigned int*>(tile) + (R * C / 4) * j;
#pragma unroll
        for (int k = 0; k < R * C / 4; ++k) w[k] = tw[k];
        const unsigned char* v = reinterpret_cast<const unsigned char*>(w);
        if (p.nchw) {
            T* base = reinterpret_cast<T*>(p.dst) + f * OC * p.npix + (P - f * p.npix);
#pragma unroll
            for (int c = 0; c < OC; ++c) {
                alignas(16) T o[R];
                const int sc = p.src_map[c];
#pragma unroll
                for (int k = 0; k < R; ++k)
                    o[k] = Out<T>::cvt(pick<C>(v, k, sc) * p.a[c] + p.b[c]);
                store_run<R * sizeof(T)>(base + c * p.npix, o);
            }
        } else {
            alignas(16) T o[R * OC];
#pragma unroll
            for (int k = 0; k < R; ++k)
#pragma unroll
                for (int c = 0; c < OC; ++c)
                    o[k * OC + c] = Out<T>::cvt(pick<C>(v, k, p.src_map[c]) * p.a[c] + p.b[c]);
            store_run<R * OC * sizeof(T)>(reinterpret_cast<T*>(p.dst) + P * OC, o);
        }
    }
}

// Identity geometry.  Persistent blocks (cuflow.image launches one wave: SMs
// times the resident blocks per SM) walk the batch in tiles of 256 * R pixels; a tile is loaded
// with 16-byte streaming loads (__ldcs: the frames are read once, so their lines are
// evicted first; faster than __ldg for both output types in
// bench/test_bench_image.py::test_image[normalize float16] and [normalize float32])
// into registers while the previous tile is converted, so
// every block keeps its next reads in flight (the kernel is otherwise bound by
// load latency), then staged in shared memory for the conversion.  R is
// min(16 / sizeof(T), 8) where the frame size allows (16-byte stores for
// float and half), else 4; runs never cross frames because the pixels per frame are a
// multiple of R.
template <typename T, int C, int OC, int R>
__global__ void __launch_bounds__(256, C * R <= 12 ? CF_NORM_MINB : C * R <= 24 ? CF_NORM_MINB24 : 4)
    cf_normalize_vec(const NormParams p) {
    constexpr int TPX = 256 * R;
    constexpr int TB = TPX * C;
    constexpr int NV = (TB / 16 + 255) / 256;  // 16-byte loads per thread per tile
    __shared__ __align__(16) unsigned char tile[TB];
    const long long total = p.npix * p.nframes;
    const long long nfull = total / TPX;
    const bool small = total < (1ll << 32);
    uint4 pre[NV];
    long long t = blockIdx.x;
    if (t < nfull) {
        const uint4* s4 = reinterpret_cast<const uint4*>(p.src + t * TB);
#pragma unroll
        for (int v = 0; v < NV; ++v)
            if (threadIdx.x + 256 * v < TB / 16) pre[v] = __ldcs(s4 + threadIdx.x + 256 * v);
    }
    for (; t < nfull; t += gridDim.x) {
        uint4* t4 = reinterpret_cast<uint4*>(tile);
#pragma unroll
        for (int v = 0; v < NV; ++v)
            if (threadIdx.x + 256 * v < TB / 16) t4[threadIdx.x + 256 * v] = pre[v];
        __syncthreads();
        if (t + gridDim.x < nfull) {  // the next tile's loads overlap this tile's conversion
            const uint4* s4 = reinterpret_cast<const uint4*>(p.src + (t + gridDim.x) * TB);
#pragma unroll
            for (int v = 0; v < NV; ++v)
                if (threadIdx.x + 256 * v < TB / 16) pre[v] = __ldcs(s4 + threadIdx.x + 256 * v);
        }
        convert_tile<T, C, OC, R>(p, tile, t * TPX, TPX, small);
        __syncthreads();
    }
    if (t == nfull && total > nfull * TPX) {  // the partial last tile, byte by byte
        const int npx = (int)(total - nfull * TPX);
        const unsigned char* s = p.src + nfull * TB;
        for (int i = threadIdx.x; i < npx * C; i += 256) tile[i] = __ldg(s + i);
        __syncthreads();
        convert_tile<T, C, OC, R>(p, tile, nfull * TPX, npx, small);
    }
}

// ------------------------------------------------------------------ general path
struct WarpParams {
    const unsigned char* src;  // packed frames, or the luma plane of NV12/I420 frames
    void* dst;
    const float* rois;         // (B, 4) x1, y1, x2, y2 in source pixels, or null
    const int* roi_frame;      // (B,) source frame of each roi, or null (roi b -> frame 0)
    long long src_fstride;     // bytes between source frames
    long long src_rstride;     // bytes between source rows
    long long dst_fstride;     // elements between output images
    long long choff[4];        // offset of output channel ch[j] in an image (NCHW: a plane)
    int H, W, C;               // source frame (luma size for NV12/I420), channels (packed)
    int OH, OW, OC;            // output image
    int fmt;                   // 0 packed, 1 NV12, 2 I420
    int interp;                // 0 nearest, 1 bilinear, 2 area
    int nchw;
    int flip;                  // mirror the image horizontally
    int oy0, ox0, rh, rw;      // where the image lands in the output (letterbox)
    int gray;                  // 1: one output channel, dot(gw, sampled rgb)
    int nframes;               // source frames (rois must index below it)
    int src_map[4];            // slot j samples source channel src_map[j] (unless direct)
    int ch[4];                 // output channel of slot j
    int direct;                // slot j is source channel j (no src_map, no gray)
    float sx, sy;              // source pixels per output pixel (no rois)
    float a[4];
    float b[4];
    float pad;                 // value outside the region (0-255 scale; 0-1 for YUV sources)
    float gw[3];               // gray weights
    float yuv[6];              // ys, -yoff*ys, rv, gu, gv, bu, all / 255 (YUV -> RGB on 0-1)
};

// A byte as a float (one I2FP instruction).
__device__ __forceinline__ float u8f(unsigned char v) { return (float)(unsigned int)v; }
// A byte minus 128 as a float: the subtraction folded into the 2^23 trick (exact).
__device__ __forceinline__ float u8f_c(unsigned char v) {
    return __uint_as_float(0x4B000000u | v) - 8388736.0f;
}

// The start of source row y: the packed or luma row, and for YUV the chroma
// row(s) it uses (NV12: the interleaved UV row; I420: the U and V rows).
template <int FMT> struct Row {
    const unsigned char* l;
    const unsigned char* u;
    const unsigned char* v;
};
template <int FMT>
__device__ __forceinline__ Row<FMT> src_row(const WarpParams& p, const unsigned char* frame,
                                            int y) {
    Row<FMT> r;
    r.l = frame + (long long)y * p.src_rstride;
    r.u = r.v = r.l;
    if constexpr (FMT != 0) {
        const unsigned char* chroma = frame + (long long)p.H * p.src_rstride;  // after the luma
        if constexpr (FMT == 1) {  // NV12: H/2 interleaved UV rows of W bytes
            r.u = r.v = chroma + (long long)(y >> 1) * p.src_rstride;
        } else {                   // I420: U plane then V plane, (H/2) x (W/2) each
            const int hw = p.W >> 1;
            r.u = chroma + (long long)(y >> 1) * hw;
            r.v = r.u + (long long)(p.H >> 1) * hw;
        }
    }
    return r;
}

// Source pixel x of row r as C floats: packed channels on the 0-255 scale, or for
// YUV sources Y on the 0-255 scale and the chroma minus 128 (chroma upsampled by
// replication).  YUV is resampled as such and converted to RGB once per output
// pixel (yuv_to_rgb): the conversion is affine up to its clamp, so this is
// converting each source pixel then resampling, with the clamp applied to the
// resampled value.
template <int FMT, int C>
__device__ __forceinline__ void fetch(const WarpParams& p, const Row<FMT>& r, int x, float* out) {
    if constexpr (FMT == 0) {
        const unsigned char* q = r.l + x * C;
#pragma unroll
        for (int c = 0; c < C; ++c) out[c] = u8f(__ldg(q + c));
    } else {
        out[0] = u8f(__ldg(r.l + x));
        if constexpr (FMT == 1) {
            out[1] = u8f_c(__ldg(r.u + (x & ~1)));
            out[2] = u8f_c(__ldg(r.u + (x & ~1) + 1));
        } else {
            out[1] = u8f_c(__ldg(r.u + (x >> 1)));
            out[2] = u8f_c(__ldg(r.v + (x >> 1)));
        }
    }
}

// Resampled (Y, U - 128, V - 128) -> RGB in place, on the 0-1 scale (the host divided
// the coefficients by 255 and folded the luma offset): each clamp is the free
// saturation of a multiply-add.
__device__ __forceinline__ void yuv_to_rgb(const WarpParams& p, float* v) {
    const float yy = fmaf(v[0], p.yuv[0], p.yuv[1]);
    const float u = v[1], w = v[2];
    v[0] = __saturatef(fmaf(p.yuv[2], w, yy));
    v[1] = __saturatef(fmaf(-p.yuv[4], w, fmaf(-p.yuv[3], u, yy)));
    v[2] = __saturatef(fmaf(p.yuv[5], u, yy));
}

// v[sc] for a runtime sc in [0, 4) without dynamic register indexing.
__device__ __forceinline__ float pick4(const float* v, int sc) {
    return sc == 0 ? v[0] : sc == 1 ? v[1] : sc == 2 ? v[2] : v[3];
}

// Bilinear source coordinate of output coordinate d along one axis, clamped
// below at 0 (the caller clamps above at size - 1).
__device__ __forceinline__ float lin_src(float d, float scale, float origin) {
    // explicit roundings (no FMA contraction) so the NumPy reference computes
    // exactly the same coordinates and weights
    const float s = __fadd_rn(origin, __fsub_rn(__fmul_rn(scale, d + 0.5f), 0.5f));
    return s < 0.0f ? 0.0f : s;
}

// Area weights along one axis: the box [lo, hi) over integer cells.
__device__ __forceinline__ void area_axis(float lo, float hi, int n, int& i0, int& i1) {
    i0 = max(0, min(n - 1, (int)floorf(lo)));
    i1 = max(i0, min(n - 1, (int)ceilf(hi) - 1));
}
// Coverage of cell i of [i0, i1] (area_axis) by the box [lo, hi), coordinates clamped to
// the frame: the first cell starts at lo and the last ends at hi even where they lie
// outside it, so a box that leaves the frame repeats the border pixels, weighted by the
// part of the box beyond them (inside the frame this is min(i + 1, hi) - max(i, lo)).
__device__ __forceinline__ float area_w(int i, int i0, int i1, float lo, float hi) {
    return (i == i1 ? hi : (float)(i + 1)) - (i == i0 ? lo : (float)i);
}

// The source cells [i0, i1] that output coordinate d reads along one axis,
// with the bilinear weight of i1, or the box for area.
struct Taps {
    int i0, i1;
    float lo, hi, w1;
    bool area;
};
__device__ __forceinline__ Taps axis_taps(int interp, int d, float scale, float origin, int n) {
    Taps t;
    t.area = interp == 2 && scale > 1.0f;
    t.lo = t.hi = t.w1 = 0.0f;
    if (interp == 0) {
        t.i0 = t.i1 = min(max((int)floorf(__fadd_rn(origin, __fmul_rn((float)d, scale))), 0),
                          n - 1);
    } else if (t.area) {
        t.lo = __fadd_rn(origin, __fmul_rn((float)d, scale));
        t.hi = __fadd_rn(t.lo, scale);
        area_axis(t.lo, t.hi, n, t.i0, t.i1);
    } else {  // bilinear (also area along an upscaled axis)
        const float s = fminf(lin_src((float)d, scale, origin), (float)(n - 1));
        t.i0 = (int)s;
        t.i1 = min(t.i0 + 1, n - 1);
        t.w1 = s - (float)t.i0;
    }
    return t;
}
__device__ __forceinline__ float tap_w(const Taps& t, int i) {
    return t.area ? area_w(i, t.i0, t.i1, t.lo, t.hi) : (i == t.i0 ? 1.0f - t.w1 : t.w1);
}

// Where output image b samples from: its frame, the source box origin and scale.
struct Geo {
    const unsigned char* frame;
    float x0, y0, sx, sy;
};
__device__ __forceinline__ Geo geometry(const WarpParams& p, int b) {
    Geo g{p.src + (long long)b * p.src_fstride, 0.0f, 0.0f, p.sx, p.sy};
    if (p.rois) {
        const float* r = p.rois + 4 * (long long)b;
        g.x0 = r[0];
        g.y0 = r[1];
        g.sx = __fdiv_rn(__fsub_rn(r[2], r[0]), (float)p.rw);
        g.sy = __fdiv_rn(__fsub_rn(r[3], r[1]), (float)p.rh);
        int f = p.roi_frame ? p.roi_frame[b] : 0;
        f = min(max(f, 0), p.nframes - 1);
        g.frame = p.src + (long long)f * p.src_fstride;
    }
    return g;
}

// One output element (streaming store when enabled).
__device__ __forceinline__ void put(float* q, float v) {
#if CF_STREAM_STORES
    __stcs(q, v);
#else
    *q = v;
#endif
}
__device__ __forceinline__ void put(cf_half* q, cf_half v) {
#if CF_STREAM_STORES
    __stcs(reinterpret_cast<unsigned short*>(q), v.bits);
#else
    *q = v;
#endif
}
__device__ __forceinline__ void put(unsigned char* q, unsigned char v) {
#if CF_STREAM_STORES
    __stcs(q, v);
#else
    *q = v;
#endif
}

// The pixels of one thread: PX outputs of row oy, 32 apart (a warp covers
// 32 * PX consecutive pixels, and every load and store
// instruction of a warp touches consecutive pixels).  MODE is the resampling
// of the row, hoisted out of the pixel loop: 0 nearest, 1 bilinear, 2 area
// (box along downscaled axes, bilinear along the others).  Output slot j
// (j < OC) is source channel j when p.direct (the host permuted the output
// channels and coefficients instead), else src_map[j] or the gray dot product.
template <typename T, int FMT, int C, int MODE, int PX, bool NCHW>
__device__ __forceinline__ void warp_row(const WarpParams& p, const Geo& g, int b, int oy,
                                         int ox, bool row_in, const Taps& ty,
                                         const Row<FMT>& ra, const Row<FMT>& rb) {
    // Slot j goes to output channel ch[j], a plane apart (NCHW) or adjacent (NHWC): its
    // offset within the image is set up once (32-bit: the host checks that an output
    // image has fewer than 2^31 elements), so a store costs one address instruction.
    const long long at = (long long)oy * p.OW + ox;
    T* q = reinterpret_cast<T*>(p.dst) + (long long)b * p.dst_fstride + (NCHW ? at : at * p.OC);
    int qs[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) qs[j] = NCHW ? p.ch[j] * (p.OH * p.OW) : p.ch[j];
    const int pstride = NCHW ? 32 : 32 * p.OC;  // elements between a thread's pixels
#pragma unroll
    for (int k = 0; k < PX; ++k) {
        if (ox + 32 * k >= p.OW) break;
        float v[4];
        v[0] = v[1] = v[2] = v[3] = p.pad;
        int lx = ox + 32 * k - p.ox0;
        if (row_in && lx >= 0 && lx < p.rw) {
        if (p.flip) lx = p.rw - 1 - lx;
        const Taps tx = axis_taps(MODE == 0 ? 0 : MODE == 1 ? 1 : 2, lx, g.sx, g.x0, p.W);
        float acc[C];
        if constexpr (MODE == 0) {
            fetch<FMT, C>(p, ra, tx.i0, acc);
        } else if constexpr (MODE == 1) {
            const float w1 = tx.w1, w0 = 1.0f - w1;
            const float h1 = ty.w1, h0 = 1.0f - h1;
            float p00[C], p01[C], p10[C], p11[C];
            fetch<FMT, C>(p, ra, tx.i0, p00);
            fetch<FMT, C>(p, ra, tx.i1, p01);
            fetch<FMT, C>(p, rb, tx.i0, p10);
            fetch<FMT, C>(p, rb, tx.i1, p11);
#pragma unroll
            for (int c = 0; c < C; ++c)
                acc[c] = h0 * (w0 * p00[c] + w1 * p01[c]) + h1 * (w0 * p10[c] + w1 * p11[c]);
        } else {
#pragma unroll
            for (int c = 0; c < C; ++c) acc[c] = 0.0f;
            float px[C];
            float wsum = 0.0f;
            for (int yy = ty.i0; yy <= ty.i1; ++yy) {
                const float wy = tap_w(ty, yy);
                const Row<FMT> r = src_row<FMT>(p, g.frame, yy);
                for (int xx = tx.i0; xx <= tx.i1; ++xx) {
                    const float w = wy * tap_w(tx, xx);
                    if (w <= 0.0f) continue;
                    fetch<FMT, C>(p, r, xx, px);
#pragma unroll
                    for (int c = 0; c < C; ++c) acc[c] += w * px[c];
                    wsum += w;
                }
            }
            const float inv = wsum > 0.0f ? 1.0f / wsum : 0.0f;
#pragma unroll
            for (int c = 0; c < C; ++c) acc[c] *= inv;
        }
        if constexpr (FMT != 0) yuv_to_rgb(p, acc);
        if (p.direct) {
#pragma unroll
            for (int c = 0; c < C && c < 4; ++c) v[c] = acc[c];
        } else {
            float a4[4];
#pragma unroll
            for (int c = 0; c < 4; ++c) a4[c] = acc[c < C ? c : 0];
            if (C >= 3 && p.gray) {  // cuflow.image only sets gray for sources with colours
                v[0] = p.gw[0] * a4[0] + p.gw[1] * a4[1] + p.gw[2] * a4[2];
            } else {
#pragma unroll
                for (int c = 0; c < 4; ++c) v[c] = pick4(a4, p.src_map[c]);
            }
        }
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (j >= p.OC) break;
            put(q + qs[j] + k * pstride, Out<T>::cvt(v[j] * p.a[j] + p.b[j]));
        }
    }
}

// The row's resampling mode, chosen once.
template <typename T, int FMT, int C, int PX, bool NCHW>
__device__ __forceinline__ void warp_mode(const WarpParams& p, const Geo& g, int b, int oy,
                                          int ox, bool row_in, const Taps& ty,
                                          const Row<FMT>& ra, const Row<FMT>& rb) {
    if (p.interp == 1 || (p.interp == 2 && !ty.area && g.sx <= 1.0f))
        warp_row<T, FMT, C, 1, PX, NCHW>(p, g, b, oy, ox, row_in, ty, ra, rb);
    else if (p.interp == 0)
        warp_row<T, FMT, C, 0, PX, NCHW>(p, g, b, oy, ox, row_in, ty, ra, rb);
    else
        warp_row<T, FMT, C, 2, PX, NCHW>(p, g, b, oy, ox, row_in, ty, ra, rb);
}

// A block is 4 warps, one output row each; a warp covers 32 * PX pixels of
// its row (PX: CF_WARP_PX for packed sources, CF_WARP_PX_YUV for YUV); grid
// (ceil(OW / (32 * PX)), ceil(OH / 4), B).  The source format and channel
// count are template parameters and the per-row work (geometry, vertical
// taps, row addresses, the resampling mode) is done once per thread, so a
// pixel costs its horizontal taps, the loads and the arithmetic (the kernel
// is bound by instruction issue, not memory).
template <typename T, int FMT, int C>
__global__ void __launch_bounds__(128, FMT == 0 ? CF_WARP_MINB : CF_WARP_MINB_YUV)
cf_warp(const WarpParams p) {
    constexpr int PX = FMT == 0 ? CF_WARP_PX : CF_WARP_PX_YUV;
    const int oy = blockIdx.y * 4 + threadIdx.y;
    const int ox = blockIdx.x * (32 * PX) + threadIdx.x;
    if (oy >= p.OH) return;
    const int b = blockIdx.z;
    const Geo g = geometry(p, b);
    const int ly = oy - p.oy0;
    const bool row_in = ly >= 0 && ly < p.rh;
    Taps ty{};
    Row<FMT> ra{}, rb{};
    if (row_in) {
        ty = axis_taps(p.interp, ly, g.sy, g.y0, p.H);
        ra = src_row<FMT>(p, g.frame, ty.i0);
        rb = src_row<FMT>(p, g.frame, ty.i1);
    }
    if (p.nchw)
        warp_mode<T, FMT, C, PX, true>(p, g, b, oy, ox, row_in, ty, ra, rb);
    else
        warp_mode<T, FMT, C, PX, false>(p, g, b, oy, ox, row_in, ty, ra, rb);
}

// ------------------------------------------------------------------ bilinear fast path
// Tuning (8 x 1080p -> 8 x 3 x 640 x 640): 1 pixel per thread along a row x 4 rows and
// 14 resident blocks per SM are fastest over bench/test_bench_image.py::test_image
// [resize_normalize 640], [letterbox 640] and [NV12 resize_normalize 640], and over the
// crop_resize rows of `python -m cuflow bench`: 1 x 2, 2 x 2, 2 x 4 and 1 x 8 pixels,
// 2, 3 and 5 rows (with the per-block row table), and 8, 10 and 12 blocks were slower
// or no better; 16 blocks matched 14.  Computing the vertical taps once per block
// (rowtab) is faster for NV12 to float16 and for crop_resize, the rest unchanged.  At 14
// blocks a thread has 32 registers and no instantiation spills (an instantiation that
// spilled at 12 blocks was slower than it is at 14 without).  The sweeps' figures are on
// docs/performance.md.
#ifndef CF_LIN_PX
#define CF_LIN_PX 1
#endif
#ifndef CF_LIN_ROWS
#define CF_LIN_ROWS 4
#endif
#ifndef CF_LIN_MINB
#define CF_LIN_MINB 14
#endif

// x, opaque to the optimizer: a pointer computed once stays a pointer (NVCC
// otherwise folds it back into every address that uses it, at several 64-bit
// instructions each).
template <typename P>
__device__ __forceinline__ P* opaque(P* x) {
    asm("" : "+l"(x));
    return x;
}

// Bilinear taps along one axis of output coordinate d: the first source cell
// i0 (the second is i0 + 1, always inside: at the far edge, where the
// coordinate clamps to n - 1, i0 is n - 2 with weight 1 on the second cell,
// the same value exactly) and the second cell's weight.  Needs n >= 2.
__device__ __forceinline__ int lin_tap(float d, float scale, float origin, int n, float& w1) {
    const float s = fminf(lin_src(d, scale, origin), (float)(n - 1));
    int i0 = (int)s;
    w1 = s - (float)i0;
    if (i0 >= n - 1) {
        i0 = n - 2;
        w1 = 1.0f;
    }
    return i0;
}

// Bytes [a, a + N) (N <= 8) in s[0..], from byte 0, read as the aligned words that
// hold them: a word is read only when it holds a wanted byte, and the host checks
// that the source starts and ends on a 4-byte boundary, so every word read is
// inside it.
template <int N>
__device__ __forceinline__ void load_span(const unsigned char* a, unsigned int* s) {
    const size_t at = reinterpret_cast<size_t>(a);
    const unsigned int* wp = reinterpret_cast<const unsigned int*>(at & ~(size_t)3);
    const int o = (int)(at & 3);
    constexpr int NW = (N + 6) / 4;  // words at the worst offset
    unsigned int w[NW + 1];
    w[0] = __ldg(wp);
#pragma unroll
    for (int i = 1; i < NW; ++i) w[i] = 4 * i < o + N ? __ldg(wp + i) : 0u;
    w[NW] = 0u;
#pragma unroll
    for (int j = 0; j < (N + 3) / 4; ++j) s[j] = __funnelshift_r(w[j], w[j + 1], 8 * o);
}

// 2^23 + byte k of w (selector 0x7650 | k) as a float: a byte permute puts the byte
// under the exponent of 2^23, no conversion instruction (faster than a conversion in
// cf_resize_lin: bench/test_bench_image.py::test_image[resize_normalize 640]).  The
// difference of two is exact, and less 2^23 (2^23 + 128 for chroma, centred) it is the
// byte.
__device__ __forceinline__ float raw_f(unsigned int w, unsigned int sel) {
    return __uint_as_float(__byte_perm(w, 0x4B000000u, sel));
}
// (a + w1 * (b - a)) - k for two raw_f values: the interpolation along x in one
// multiply-add, after two exact subtractions.
__device__ __forceinline__ float lerp_raw(float a, float b, float w1, float k) {
    return fmaf(w1, b - a, a - k);
}
// One packed row at a thread's column: source pixels x and x + 1 of `row`, read as the
// words that hold them, interpolated along x (w1: the weight of x + 1), C floats.
template <int C>
__device__ __forceinline__ void packed_row(const unsigned char* row, int x, float w1, float* out) {
    unsigned int s[(2 * C + 3) / 4];
    load_span<2 * C>(row + x * C, s);
#pragma unroll
    for (int c = 0; c < C; ++c)
        out[c] = lerp_raw(raw_f(s[c >> 2], 0x7650u | (c & 3)),
                          raw_f(s[(C + c) >> 2], 0x7650u | ((C + c) & 3)), w1, 8388608.0f);
}

// An NV12 column: what reading source pixels x and x + 1 (x + 1 < W) of a luma row
// and of its interleaved chroma row takes, when every row starts 4-byte aligned.  Set
// up once per thread; a row then costs two word loads (four when x & 3 == 3).
struct Nv12Col {
    unsigned int off;    // x & ~3: the word holding luma byte x, and chroma pair x & ~1
    unsigned int shift;  // 8 * (x & 3): luma bytes x, x + 1 from the low bits
    bool two;            // x & 3 == 3: luma x + 1 and chroma pair x + 1 start the next word
    unsigned int s0, s1;  // byte_perm selectors of the U of x and of x + 1 (V: the next byte)
};
__device__ __forceinline__ Nv12Col nv12_col(int x) {
    Nv12Col c;
    c.off = (unsigned int)x & ~3u;
    c.shift = 8u * (x & 3);
    c.two = (x & 3) == 3;
    const int k0 = x & 2;                                   // chroma pair of x in its word
    const int k1 = c.two ? 0 : (x & 1) ? (k0 ^ 2) : k0;     // pair of x + 1 (next word if two)
    c.s0 = 0x7650u | k0;
    c.s1 = 0x7650u | k1;
    return c;
}
// One NV12 row at a thread's column, from the words at lw (luma) and uw (chroma), both at
// the column's word: Y, U - 128 and V - 128 interpolated along x (w1: the weight of x + 1).
__device__ __forceinline__ void nv12_row(const unsigned int* lw, const unsigned int* uw,
                                         const Nv12Col& c, float w1, float* out) {
    const unsigned int l0 = __ldg(lw), u0 = __ldg(uw);
    unsigned int l1 = 0u, u1 = u0;
    if (c.two) {
        l1 = __ldg(lw + 1);
        u1 = __ldg(uw + 1);
    }
    const unsigned int y = __funnelshift_r(l0, l1, c.shift);
    out[0] = lerp_raw(raw_f(y, 0x7650u), raw_f(y, 0x7651u), w1, 8388608.0f);
    out[1] = lerp_raw(raw_f(u0, c.s0), raw_f(u1, c.s1), w1, 8388736.0f);
    out[2] = lerp_raw(raw_f(u0, c.s0 | 1u), raw_f(u1, c.s1 | 1u), w1, 8388736.0f);
}

// The vertical taps of a block's BROWS output rows from oyb, computed once per block by
// its first warp (instead of once per warp): the first source row (packed: its index;
// NV12: the word offsets of luma row y0 and of the chroma rows of y0 and y0 + 1, frames
// being below 2^31 bytes) and the weight of the second, its sign bit set when the output
// row is outside the region.  Ends with the block's barrier.
template <int FMT, int BROWS>
__device__ __forceinline__ void lin_rowtab(const WarpParams& p, const Geo& g, int oyb,
                                           int4* rowtab) {
    static_assert(BROWS <= 32, "the first warp fills the row table");
    if (threadIdx.y == 0 && threadIdx.x < BROWS) {
        const unsigned int rs4 = (unsigned int)p.src_rstride / 4u;
        const int ly = oyb + threadIdx.x - p.oy0;
        float h1 = 0.0f;
        const int y0 = lin_tap((float)ly, g.sy, g.y0, p.H, h1);
        const int hw = __float_as_int(h1) | (ly >= 0 && ly < p.rh ? 0 : (int)0x80000000u);
        if constexpr (FMT == 0)
            rowtab[threadIdx.x] = make_int4(y0, 0, 0, hw);
        else
            rowtab[threadIdx.x] = make_int4((int)((unsigned int)y0 * rs4),
                                            (int)((unsigned int)(p.H + (y0 >> 1)) * rs4),
                                            (int)((unsigned int)(p.H + ((y0 + 1) >> 1)) * rs4),
                                            hw);
    }
    __syncthreads();
}

// cf_warp's bilinear case for packed and NV12 sources (regions of interest included),
// where each output channel is a source channel (WarpParams.direct) and the
// source is at least 2 x 2 and starts and ends 4-byte aligned (NV12: every row
// does, and a frame is below 2^31 bytes): a thread keeps
// its PX columns' horizontal taps in registers and walks ROWS output rows (4
// apart), whose vertical taps the block computes once into shared memory; a pixel
// costs the word loads of its two pairs of taps, one multiply-add per channel and
// pair (a + w1 * (b - a) on exact differences) and one per channel between the rows,
// and its stores are 32-bit offsets from the image.  Same fields and results as
// cf_warp up to float rounding (letterbox region, padding and flip included).
// Block (32, 4); grid (ceil(OW / (32 * PX)), ceil(OH / (4 * ROWS)), B).
template <typename T, int FMT, int C, int OC, bool NCHW>
__device__ __forceinline__ void lin_image(const WarpParams& p) {
    constexpr int PX = CF_LIN_PX;
    const int b = blockIdx.z;
    const Geo g = geometry(p, b);
    const unsigned char* frame = opaque(g.frame);
    const int ox = blockIdx.x * (32 * PX) + threadIdx.x;
    int xi[PX];
    float xw[PX];
    bool xin[PX];
#pragma unroll
    for (int k = 0; k < PX; ++k) {
        int lx = ox + 32 * k - p.ox0;
        xin[k] = lx >= 0 && lx < p.rw;
        if (p.flip) lx = p.rw - 1 - lx;
        xi[k] = lin_tap((float)lx, g.sx, g.x0, p.W, xw[k]);
    }
    Nv12Col col[FMT == 1 ? PX : 1];
    const unsigned int* fcol[FMT == 1 ? PX : 1];  // NV12: the frame, at the column's word
    if constexpr (FMT == 1) {
#pragma unroll
        for (int k = 0; k < PX; ++k) {
            col[k] = nv12_col(xi[k]);
            fcol[k] = opaque(reinterpret_cast<const unsigned int*>(frame + col[k].off));
        }
    }
    // 32-bit element offsets within the output image (the host checks that it has fewer
    // than 2^31 elements): the thread's first pixel of its first row, then uniform steps
    T* const img = opaque(reinterpret_cast<T*>(p.dst) + (long long)b * p.dst_fstride);
    constexpr int BROWS = 4 * CF_LIN_ROWS;
    __shared__ int4 rowtab[BROWS];
    const int oyb = blockIdx.y * BROWS;
    const unsigned int rs4 = (unsigned int)p.src_rstride / 4u;  // NV12: words per row
    lin_rowtab<FMT, BROWS>(p, g, oyb, rowtab);
    int oy = oyb + threadIdx.y;
    unsigned int e = NCHW ? oy * p.OW + ox : (oy * p.OW + ox) * OC;
    const unsigned int rstep = 4u * p.OW * (NCHW ? 1 : OC);  // elements between a thread's rows
    constexpr int pstride = NCHW ? 32 : 32 * OC;              // and between its pixels
    const int oyend = min(p.OH, oy + BROWS);
#pragma unroll 1
    for (; oy < oyend; oy += 4, e += rstep) {
        const int4 rt = rowtab[oy - oyb];
        const bool yin = rt.w >= 0;
        const float h1 = __int_as_float(rt.w & 0x7fffffff);
        const unsigned char* const ra = frame + (long long)rt.x * p.src_rstride;  // packed
#pragma unroll
        for (int k = 0; k < PX; ++k) {
            if (ox + 32 * k >= p.OW) break;
            // yin is the same for the whole warp (one output row), so this branch does not
            // diverge; where xin is false the taps are still inside the frame
            float acc[C];
#pragma unroll
            for (int c = 0; c < C; ++c) acc[c] = p.pad;
            if (yin) {
                float top[C], bot[C], t[C];
                if constexpr (FMT == 0) {
                    packed_row<C>(ra, xi[k], xw[k], top);
                    packed_row<C>(ra + p.src_rstride, xi[k], xw[k], bot);
                } else {
                    const unsigned int* const fc = fcol[k];
                    nv12_row(fc + rt.x, fc + rt.y, col[k], xw[k], top);
                    nv12_row(fc + rt.x + rs4, fc + rt.z, col[k], xw[k], bot);
                }
#pragma unroll
                for (int c = 0; c < C; ++c) t[c] = fmaf(h1, bot[c] - top[c], top[c]);
                if constexpr (FMT != 0) yuv_to_rgb(p, t);
#pragma unroll
                for (int c = 0; c < C; ++c) acc[c] = xin[k] ? t[c] : p.pad;
            }
            float v[OC];
#pragma unroll
            for (int j = 0; j < OC; ++j) v[j] = acc[j] * p.a[j] + p.b[j];
#pragma unroll
            for (int j = 0; j < OC; ++j)
                put(img + (e + (unsigned int)p.choff[j] + k * pstride), Out<T>::cvt(v[j]));
        }
    }
}

template <typename T, int FMT, int C, int OC>
__global__ void __launch_bounds__(128, CF_LIN_MINB) cf_resize_lin(const WarpParams p) {
    if (p.nchw)
        lin_image<T, FMT, C, OC, true>(p);
    else
        lin_image<T, FMT, C, OC, false>(p);
}

// cf_resize_nv12: 2 rows per thread with the next rows prefetched, at 12 resident blocks
// per SM, is fastest in bench/test_bench_image.py::test_image[NV12 resize_normalize 640]
// (and faster there than NV12 through cf_resize_lin).  4 rows with the prefetch spill at
// 12 blocks and are slower at 8 or 10; 4 rows without it and 3 rows are slower too.
// Slower alternatives also tried: staging each block's source window in shared memory
// (cp.async) first, skipping the second chroma row when it is the first (its loads then
// wait for a branch), and taking the column pairs' setup from a table built by the host.
// The sweeps' figures are on docs/performance.md.
#ifndef CF_NV12_ROWS
#define CF_NV12_ROWS 2
#endif
#ifndef CF_NV12_MINB
#define CF_NV12_MINB 12
#endif

// Two adjacent output elements in one store (q aligned to both).
template <typename T>
__device__ __forceinline__ void put2(T* q, T v0, T v1) {
    alignas(2 * sizeof(T)) T o[2] = {v0, v1};
    store_run<2 * sizeof(T)>(q, o);
}

// byte_perm selector gathering U, V of source column x and of x + 1 (bytes 0-3) from the
// 8 bytes of two chroma words from byte `base` of the row (x - base + 3 < 8).
__device__ __forceinline__ unsigned int chroma_sel(unsigned int x, unsigned int base) {
    const unsigned int k0 = (x & ~1u) - base, k1 = ((x + 1u) & ~1u) - base;
    return k0 | (k0 + 1u) << 4 | k1 << 8 | (k1 + 1u) << 12;
}

// A thread of cf_resize_nv12: its column pair's words, selectors and weights, and its
// walk down its rows (SHARE: the pair's columns read the same words).
template <typename T, bool NCHW>
struct Nv12Pair {
    const WarpParams& p;
    const int4* rowtab;             // the block's rows (lin_rowtab)
    const unsigned int* fa;         // the frame at the first column's base byte
    const unsigned int* fb;         // and at the second's (the same when shared)
    unsigned int rs4;               // words per source row
    unsigned int ysel, ysb;         // Y of the pair (of the first column when not shared),
                                    // of the second column
    unsigned int csa, csb;          // U, V of each column's two taps
    float xw[2];                    // the second taps' weights
    bool xin[2];                    // the columns are inside the region
    T* img;

    // The words of output row rt: the luma and chroma pairs of its top source row, then of
    // its bottom one (then the same from fb when not shared).
    template <bool SHARE>
    __device__ __forceinline__ void fetch(const int4& rt, unsigned int* w) const {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const unsigned int lr = rt.x + i * rs4, cr = i ? rt.z : rt.y;
            w[4 * i] = __ldg(fa + lr);
            w[4 * i + 1] = __ldg(fa + lr + 1);
            w[4 * i + 2] = __ldg(fa + cr);
            w[4 * i + 3] = __ldg(fa + cr + 1);
            if constexpr (!SHARE) {
                w[8 + 4 * i] = __ldg(fb + lr);
                w[8 + 4 * i + 1] = __ldg(fb + lr + 1);
                w[8 + 4 * i + 2] = __ldg(fb + cr);
                w[8 + 4 * i + 3] = __ldg(fb + cr + 1);
            }
        }
    }

    // RGB of both columns (0-1 scale) from the words and the row's weight.
    template <bool SHARE>
    __device__ __forceinline__ void pixels(const int4& rt, const unsigned int* w,
                                           float (*t)[3]) const {
        const float h1 = __int_as_float(rt.w & 0x7fffffff);
        float r[2][2][3];  // [top, bottom][column][Y, U, V]
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const unsigned int* const q = w + 4 * i;
            unsigned int y = __byte_perm(q[0], q[1], ysel), ua = __byte_perm(q[2], q[3], csa), ub;
            if constexpr (SHARE) {
                ub = __byte_perm(q[2], q[3], csb);
            } else {
                y = __byte_perm(y, __byte_perm(q[8], q[9], ysb), 0x5410);
                ub = __byte_perm(q[10], q[11], csb);
            }
            r[i][0][0] = lerp_raw(raw_f(y, 0x7650u), raw_f(y, 0x7651u), xw[0], 8388608.0f);
            r[i][1][0] = lerp_raw(raw_f(y, 0x7652u), raw_f(y, 0x7653u), xw[1], 8388608.0f);
            r[i][0][1] = lerp_raw(raw_f(ua, 0x7650u), raw_f(ua, 0x7652u), xw[0], 8388736.0f);
            r[i][0][2] = lerp_raw(raw_f(ua, 0x7651u), raw_f(ua, 0x7653u), xw[0], 8388736.0f);
            r[i][1][1] = lerp_raw(raw_f(ub, 0x7650u), raw_f(ub, 0x7652u), xw[1], 8388736.0f);
            r[i][1][2] = lerp_raw(raw_f(ub, 0x7651u), raw_f(ub, 0x7653u), xw[1], 8388736.0f);
        }
#pragma unroll
        for (int k = 0; k < 2; ++k) {
#pragma unroll
            for (int c = 0; c < 3; ++c) t[k][c] = fmaf(h1, r[1][k][c] - r[0][k][c], r[0][k][c]);
            yuv_to_rgb(p, t[k]);
        }
    }

    // The pair's outputs at element e of the image (the pad value outside the region).
    __device__ __forceinline__ void store(unsigned int e, const int4& rt,
                                          const float (*t)[3]) const {
        T v[2][3];
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            const bool in = rt.w >= 0 && xin[k];
#pragma unroll
            for (int j = 0; j < 3; ++j)
                v[k][j] = Out<T>::cvt((in ? t[k][j] : p.pad) * p.a[j] + p.b[j]);
        }
        if constexpr (NCHW) {
#pragma unroll
            for (int j = 0; j < 3; ++j)
                put2(img + (e + (unsigned int)p.choff[j]), v[0][j], v[1][j]);
        } else {  // slot j is channel choff[j] of a pixel (a permutation of 0, 1, 2)
            T o[2][3];
#pragma unroll
            for (int k = 0; k < 2; ++k)
#pragma unroll
                for (int c = 0; c < 3; ++c)
                    o[k][c] = p.choff[0] == c ? v[k][0] : p.choff[1] == c ? v[k][1] : v[k][2];
            put2(img + e, o[0][0], o[0][1]);
            put2(img + e + 2, o[0][2], o[1][0]);
            put2(img + e + 4, o[1][1], o[1][2]);
        }
    }

    // Output rows oy0, oy0 + 4, ... below oyend (elements e0, e0 + rstep, ...); the block's
    // rows start at oyb.
    template <bool SHARE>
    __device__ __forceinline__ void rows(int oy0, int oyb, int oyend, unsigned int e0,
                                         unsigned int rstep) const {
        if constexpr (SHARE) {
            // the rows unrolled, each row's loads issued before the previous row's arithmetic
            unsigned int w[2][8];
            int4 rt[2];
            rt[0] = rowtab[oy0 - oyb];
            if (rt[0].w >= 0) fetch<true>(rt[0], w[0]);  // the same for the whole warp (one row)
#pragma unroll
            for (int i = 0; i < CF_NV12_ROWS; ++i) {
                const int cur = i & 1, nxt = cur ^ 1;
                if (oy0 + 4 * i >= oyend) break;
                if (i + 1 < CF_NV12_ROWS && oy0 + 4 * (i + 1) < oyend) {
                    rt[nxt] = rowtab[oy0 - oyb + 4 * (i + 1)];
                    if (rt[nxt].w >= 0) fetch<true>(rt[nxt], w[nxt]);
                }
                float t[2][3];
                if (rt[cur].w >= 0) pixels<true>(rt[cur], w[cur], t);
                store(e0 + i * rstep, rt[cur], t);
            }
        } else {  // twice the words: a row at a time
            unsigned int e = e0;
#pragma unroll 1
            for (int oy = oy0; oy < oyend; oy += 4, e += rstep) {
                const int4 rt = rowtab[oy - oyb];
                float t[2][3];
                if (rt.w >= 0) {  // the same for the whole warp (one output row)
                    unsigned int w[16];
                    fetch<false>(rt, w);
                    pixels<false>(rt, w, t);
                }
                store(e, rt, t);
            }
        }
    }
};

// cf_resize_lin's NV12 case with two adjacent output columns per thread (block (32, 4),
// grid (ceil(OW / 64), ceil(OH / (4 * CF_NV12_ROWS)), B); OW even, W >= 8 and a multiple
// of 4, dst aligned to two elements).  A thread reads each row's luma and chroma as two
// words from a base byte at most W - 8: when the taps of both its columns fall in those 8
// bytes for the whole warp (downscales up to about 3x, flip and regions included), both
// columns read the same two words (else each column reads its own); byte permutes
// gather Y and UV of each column's pair of taps.  Against cf_resize_lin, a pixel shares a
// row's table entry, loop and address arithmetic with its neighbour and half of its
// loads, and the pair is one store per channel.  Same fields and results as cf_resize_lin.
template <typename T, bool NCHW>
__device__ __forceinline__ void nv12_pairs(const WarpParams& p) {
    constexpr int BROWS = 4 * CF_NV12_ROWS;
    __shared__ int4 rowtab[BROWS];
    const int b = blockIdx.z;
    const Geo g = geometry(p, b);
    const int oyb = blockIdx.y * BROWS;
    lin_rowtab<1, BROWS>(p, g, oyb, rowtab);
    const int ox = blockIdx.x * 64 + 2 * threadIdx.x;  // columns ox, ox + 1
    if (ox >= p.OW) return;
    Nv12Pair<T, NCHW> t{p, rowtab};
    int xi[2];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        int lx = ox + k - p.ox0;
        t.xin[k] = lx >= 0 && lx < p.rw;
        if (p.flip) lx = p.rw - 1 - lx;
        xi[k] = lin_tap((float)lx, g.sx, g.x0, p.W, t.xw[k]);
    }
    const int lo = min(xi[0], xi[1]), hi = max(xi[0], xi[1]);
    const int base = min(lo & ~3, p.W - 8);
    // the warp's lanes that have not returned all share words, or none does
    const bool share = __all_sync(__activemask(), hi + 1 - base <= 7);
    const int ba = share ? base : min(xi[0] & ~3, p.W - 8);
    const int bb = share ? base : min(xi[1] & ~3, p.W - 8);
    const unsigned int oa = xi[0] - ba, ob = xi[1] - bb;
    t.ysb = ob | (ob + 1u) << 4;
    t.ysel = (oa | (oa + 1u) << 4) | (share ? t.ysb << 8 : 0u);
    t.csa = chroma_sel(xi[0], ba);
    t.csb = chroma_sel(xi[1], bb);
    const unsigned char* const frame = opaque(g.frame);
    t.fa = opaque(reinterpret_cast<const unsigned int*>(frame + ba));
    t.fb = opaque(reinterpret_cast<const unsigned int*>(frame + bb));
    t.rs4 = (unsigned int)p.src_rstride / 4u;
    t.img = opaque(reinterpret_cast<T*>(p.dst) + (long long)b * p.dst_fstride);
    const int oy0 = oyb + threadIdx.y;
    const unsigned int e0 = NCHW ? oy0 * p.OW + ox : (oy0 * p.OW + ox) * 3;
    const unsigned int rstep = 4u * p.OW * (NCHW ? 1 : 3);
    const int oyend = min(p.OH, oyb + BROWS);
    if (share)  // the same for the whole warp
        t.template rows<true>(oy0, oyb, oyend, e0, rstep);
    else
        t.template rows<false>(oy0, oyb, oyend, e0, rstep);
}

template <typename T>
__global__ void __launch_bounds__(128, CF_NV12_MINB) cf_resize_nv12(const WarpParams p) {
    if (p.nchw)
        nv12_pairs<T, true>(p);
    else
        nv12_pairs<T, false>(p);
}

// ------------------------------------------------------------------ denormalize
struct DenormParams {
    const void* src;     // (N, C, H, W) or (N, H, W, C) of T
    unsigned char* dst;  // (N, H, W, OC)
    long long npix;      // H * W
    long long nframes;
    int C, OC;
    int nchw;
    int src_map[4];      // output channel c reads input channel src_map[c]
    float a[4];          // u8 = round(clamp(x * a[c] + b[c]))
    float b[4];
    int pad_;
};

template <typename T> struct In;
template <> struct In<float> { __device__ static float f(float v) { return v; } };
template <> struct In<cf_half> {
    __device__ static float f(cf_half h) {
        float v;
        asm("cvt.f32.f16 %0, %1;" : "=f"(v) : "h"(h.bits));
        return v;
    }
};

template <typename T>
__global__ void cf_denormalize(const DenormParams p) {
    const long long total = p.npix * p.nframes;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const T* src = reinterpret_cast<const T*>(p.src);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const long long f = i / p.npix;
        const long long px = i - f * p.npix;
        unsigned char* q = p.dst + i * p.OC;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            if (c >= p.OC) break;
            const int sc = p.src_map[c];
            const long long at = p.nchw ? (f * p.C + sc) * p.npix + px : i * p.C + sc;
            q[c] = Out<unsigned char>::cvt(In<T>::f(src[at]) * p.a[c] + p.b[c]);
        }
    }
}

// Byte of v rounded half to even and clamped to [0, 255], as Out<unsigned char>::cvt,
// without the conversion pipe: adding 1.5 * 2^23 leaves round(v) in the low mantissa bits.
__device__ __forceinline__ unsigned int u8_rn(float v) {
    return __float_as_uint(__fadd_rn(fminf(fmaxf(v, 0.0f), 255.0f), 12582912.0f)) & 0xffu;
}

// n values of T from 16-byte (float) or 8-byte (half) aligned memory, n a multiple of 4.
template <typename T, int N>
__device__ __forceinline__ void load_vals(const T* q, float* v) {
    if constexpr (sizeof(T) == 4) {
#pragma unroll
        for (int i = 0; i < N / 4; ++i) {
            const float4 f = __ldg(reinterpret_cast<const float4*>(q) + i);
            v[4 * i] = f.x; v[4 * i + 1] = f.y; v[4 * i + 2] = f.z; v[4 * i + 3] = f.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < N / 4; ++i) {
            const uint2 h = __ldg(reinterpret_cast<const uint2*>(q) + i);
            const unsigned int w[2] = {h.x, h.y};
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                cf_half x;
                x.bits = (unsigned short)(w[k >> 1] >> (16 * (k & 1)));
                v[4 * i + k] = In<cf_half>::f(x);
            }
        }
    }
}

// Four pixels per thread, frames along gridDim.y: vector loads of each channel's four
// values (NCHW) or of the four pixels (NHWC), one to four word stores of the 4 * OC
// output bytes.  Needs H * W a multiple of 4, src and dst 16-byte aligned; output channel
// j reads input channel src_map[j] (C, OC as cf_normalize_vec's channel pairs).
template <typename T, int C, int OC>
__global__ void cf_denormalize_vec(const DenormParams p) {
    const long long px = 4ll * (blockIdx.x * (long long)blockDim.x + threadIdx.x);
    if (px >= p.npix) return;
    const long long f = blockIdx.y;
    const T* src = reinterpret_cast<const T*>(p.src);
    float v[4][OC];  // pixel k, output channel j
    if (p.nchw) {
#pragma unroll
        for (int j = 0; j < OC; ++j) {
            float x[4];
            load_vals<T, 4>(src + (f * p.C + p.src_map[j]) * p.npix + px, x);
#pragma unroll
            for (int k = 0; k < 4; ++k) v[k][j] = x[k];
        }
    } else {
        float x[4 * C];
        load_vals<T, 4 * C>(src + (f * p.npix + px) * C, x);
#pragma unroll
        for (int k = 0; k < 4; ++k)
#pragma unroll
            for (int j = 0; j < OC; ++j) v[k][j] = pick<C>(x, k, p.src_map[j]);
    }
    unsigned int w[OC] = {};  // 4 * OC bytes, pixel-major
#pragma unroll
    for (int k = 0; k < 4; ++k)
#pragma unroll
        for (int j = 0; j < OC; ++j) {
            const int i = k * OC + j;
            w[i >> 2] |= u8_rn(v[k][j] * p.a[j] + p.b[j]) << (8 * (i & 3));
        }
    unsigned int* d = reinterpret_cast<unsigned int*>(p.dst + (f * p.npix + px) * OC);
    if constexpr (OC == 4) {
        *reinterpret_cast<uint4*>(d) = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
#pragma unroll
        for (int i = 0; i < OC; ++i) d[i] = w[i];
    }
}
