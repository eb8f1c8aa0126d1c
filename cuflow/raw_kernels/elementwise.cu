// cuflow elementwise kernels: same-dtype binary and unary ops on contiguous arrays.
//
// One launch covers n elements with a grid-stride loop.  When every pointer is
// 16-byte aligned the loop moves 16 bytes per load and store (uint4), with a
// scalar tail; otherwise it falls back to one element per iteration.  Indexing
// is 64-bit.  The arithmetic matches CuPy's ufunc kernels expression for
// expression (same operators, same -ftz setting through CuPy's compiler), so
// results are bit-identical to cupy.add & co. for the same dtypes.
//
// float16 is carried as cf_half (the raw bits) and computed in float, as
// CuPy's float16 type does; conversions use the hardware cvt instructions, so
// the file needs no CUDA header.

struct __align__(2) cf_half { unsigned short bits; };

__device__ __forceinline__ float cf_h2f(cf_half h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
    return f;
}

__device__ __forceinline__ cf_half cf_f2h(float f) {
    cf_half h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
    return h;
}

#define CF_NANF __int_as_float(0x7fffffff)

// ---------------------------------------------------------------- operators
struct OpAdd {
    template <typename T> __device__ static T f(T a, T b) { return a + b; }
    __device__ static cf_half f(cf_half a, cf_half b) { return cf_f2h(cf_h2f(a) + cf_h2f(b)); }
};
struct OpSub {
    template <typename T> __device__ static T f(T a, T b) { return a - b; }
    __device__ static cf_half f(cf_half a, cf_half b) { return cf_f2h(cf_h2f(a) - cf_h2f(b)); }
};
struct OpMul {
    template <typename T> __device__ static T f(T a, T b) { return a * b; }
    __device__ static cf_half f(cf_half a, cf_half b) { return cf_f2h(cf_h2f(a) * cf_h2f(b)); }
};
struct OpDiv {  // floating dtypes only (NumPy's true_divide of ints is float64)
    template <typename T> __device__ static T f(T a, T b) { return a / b; }
    __device__ static cf_half f(cf_half a, cf_half b) { return cf_f2h(cf_h2f(a) / cf_h2f(b)); }
};
struct OpMax {  // NaN-propagating, as numpy.maximum / cupy.maximum
    template <typename T> __device__ static T f(T a, T b) { return max(a, b); }
    __device__ static float f(float a, float b) {
        return (isnan(a) | isnan(b)) ? CF_NANF : fmaxf(a, b);
    }
    __device__ static double f(double a, double b) {
        return (isnan(a) | isnan(b)) ? (double)CF_NANF : fmax(a, b);
    }
    __device__ static cf_half f(cf_half a, cf_half b) { return cf_f2h(f(cf_h2f(a), cf_h2f(b))); }
};
struct OpMin {
    template <typename T> __device__ static T f(T a, T b) { return min(a, b); }
    __device__ static float f(float a, float b) {
        return (isnan(a) | isnan(b)) ? CF_NANF : fminf(a, b);
    }
    __device__ static double f(double a, double b) {
        return (isnan(a) | isnan(b)) ? (double)CF_NANF : fmin(a, b);
    }
    __device__ static cf_half f(cf_half a, cf_half b) { return cf_f2h(f(cf_h2f(a), cf_h2f(b))); }
};
struct OpNeg {
    template <typename T> __device__ static T f(T a) { return -a; }
    __device__ static cf_half f(cf_half a) { return cf_f2h(-cf_h2f(a)); }
};
struct OpAbs {
    template <typename T> __device__ static T f(T a) { return a > 0 ? a : -a; }
    __device__ static unsigned char f(unsigned char a) { return a; }
    __device__ static unsigned short f(unsigned short a) { return a; }
    __device__ static unsigned int f(unsigned int a) { return a; }
    __device__ static unsigned long long f(unsigned long long a) { return a; }
    __device__ static float f(float a) { return fabsf(a); }
    __device__ static double f(double a) { return fabs(a); }
    __device__ static cf_half f(cf_half a) { return cf_f2h(fabsf(cf_h2f(a))); }
};

// ---------------------------------------------------------------- loops
// Outputs of 32 MiB or more get streaming (evict-first) stores: with their inputs they
// overflow L2 anyway, and keeping them out of it keeps the inputs' lines (faster in
// bench/test_bench_core.py::test_large_add, a 2160x3840 float32 add).  Smaller outputs
// stay in L2 for the next op to read.
__device__ __forceinline__ void cf_store(uint4* p, uint4 v, bool streaming) {
    if (streaming)
        __stcs(p, v);
    else
        *p = v;
}

// The vector loops take two 16-byte vectors per thread per step (both loads issued
// before either store) while two remain, then one (bench/test_bench_core.py::test_large_add
// measures the loop, with the streaming stores above).
template <typename T, typename Op, typename I>
__device__ __forceinline__ void binary_loop(const T* a, const T* b, T* c, I n) {
    constexpr int W = 16 / sizeof(T);
    const I tid = (I)blockIdx.x * blockDim.x + threadIdx.x;
    const I stride = (I)gridDim.x * blockDim.x;
    const bool streaming = (long long)n * (long long)sizeof(T) >= (32ll << 20);
    I done = 0;
    if ((((unsigned long long)a | (unsigned long long)b | (unsigned long long)c) & 15ull) == 0) {
        const I nv = n / W;
        const uint4* a4 = reinterpret_cast<const uint4*>(a);
        const uint4* b4 = reinterpret_cast<const uint4*>(b);
        uint4* c4 = reinterpret_cast<uint4*>(c);
        I i = tid;
        for (; i + stride < nv; i += 2 * stride) {
            uint4 va[2] = {a4[i], a4[i + stride]}, vb[2] = {b4[i], b4[i + stride]}, vc[2];
#pragma unroll
            for (int u = 0; u < 2; ++u) {
                const T* ea = reinterpret_cast<const T*>(&va[u]);
                const T* eb = reinterpret_cast<const T*>(&vb[u]);
                T* ec = reinterpret_cast<T*>(&vc[u]);
#pragma unroll
                for (int k = 0; k < W; ++k) ec[k] = Op::f(ea[k], eb[k]);
            }
            cf_store(c4 + i, vc[0], streaming);
            cf_store(c4 + i + stride, vc[1], streaming);
        }
        for (; i < nv; i += stride) {
            uint4 va = a4[i], vb = b4[i], vc;
            const T* ea = reinterpret_cast<const T*>(&va);
            const T* eb = reinterpret_cast<const T*>(&vb);
            T* ec = reinterpret_cast<T*>(&vc);
#pragma unroll
            for (int k = 0; k < W; ++k) ec[k] = Op::f(ea[k], eb[k]);
            cf_store(c4 + i, vc, streaming);
        }
        done = nv * W;
    }
    // the tail from the highest threads: thread 0 has the first vector (see _ewgen._TAIL)
    for (I i = done + (done ? stride - 1 - tid : tid); i < n; i += stride) c[i] = Op::f(a[i], b[i]);
}

template <typename T, typename Op, typename I>
__device__ __forceinline__ void unary_loop(const T* a, T* c, I n) {
    constexpr int W = 16 / sizeof(T);
    const I tid = (I)blockIdx.x * blockDim.x + threadIdx.x;
    const I stride = (I)gridDim.x * blockDim.x;
    const bool streaming = (long long)n * (long long)sizeof(T) >= (32ll << 20);
    I done = 0;
    if ((((unsigned long long)a | (unsigned long long)c) & 15ull) == 0) {
        const I nv = n / W;
        const uint4* a4 = reinterpret_cast<const uint4*>(a);
        uint4* c4 = reinterpret_cast<uint4*>(c);
        I i = tid;
        for (; i + stride < nv; i += 2 * stride) {
            uint4 va[2] = {a4[i], a4[i + stride]}, vc[2];
#pragma unroll
            for (int u = 0; u < 2; ++u) {
                const T* ea = reinterpret_cast<const T*>(&va[u]);
                T* ec = reinterpret_cast<T*>(&vc[u]);
#pragma unroll
                for (int k = 0; k < W; ++k) ec[k] = Op::f(ea[k]);
            }
            cf_store(c4 + i, vc[0], streaming);
            cf_store(c4 + i + stride, vc[1], streaming);
        }
        for (; i < nv; i += stride) {
            uint4 va = a4[i], vc;
            const T* ea = reinterpret_cast<const T*>(&va);
            T* ec = reinterpret_cast<T*>(&vc);
#pragma unroll
            for (int k = 0; k < W; ++k) ec[k] = Op::f(ea[k]);
            cf_store(c4 + i, vc, streaming);
        }
        done = nv * W;
    }
    // the tail from the highest threads: thread 0 has the first vector (see _ewgen._TAIL)
    for (I i = done + (done ? stride - 1 - tid : tid); i < n; i += stride) c[i] = Op::f(a[i]);
}

// ---------------------------------------------------------------- entry points
// 32-bit indices below 2**31 elements: a 64-bit index chain delays a small array's only
// load (bench op zoo slow_function, graph replay per kernel node; see _ewgen)
#define CF_BINARY(name, Op)                                                          \
    template <typename T>                                                            \
    __global__ void name(const T* a, const T* b, T* c, long long n) {                \
        if (n < (1ll << 31)) binary_loop<T, Op, unsigned>(a, b, c, (unsigned)n);     \
        else binary_loop<T, Op, long long>(a, b, c, n);                              \
    }
#define CF_UNARY(name, Op)                                                           \
    template <typename T>                                                            \
    __global__ void name(const T* a, T* c, long long n) {                            \
        if (n < (1ll << 31)) unary_loop<T, Op, unsigned>(a, c, (unsigned)n);         \
        else unary_loop<T, Op, long long>(a, c, n);                                  \
    }

CF_BINARY(cf_add, OpAdd)
CF_BINARY(cf_subtract, OpSub)
CF_BINARY(cf_multiply, OpMul)
CF_BINARY(cf_divide, OpDiv)
CF_BINARY(cf_maximum, OpMax)
CF_BINARY(cf_minimum, OpMin)
CF_UNARY(cf_negative, OpNeg)
CF_UNARY(cf_absolute, OpAbs)
