// cf_hold: one thread that holds its stream until the host writes a nonzero int to
// flag[0] (pinned host memory, read through unified addressing), or until timeout_ns of
// GPU time pass, when it writes 1 to flag[1].  Calls launched behind it queue up while the
// host launches them, so CUDA events around them time the GPU alone, however slowly the
// host launched them (nvbench's blocking kernel); the timeout ends the hold when the host
// itself waits for the GPU (a synchronize inside a timed call, a full launch queue).
struct HoldParams {
    unsigned long long flag;        // int* in pinned host memory: [released, timed out]
    unsigned long long timeout_ns;
};

__device__ __forceinline__ unsigned long long cf_globaltimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

template <typename T>
__global__ void cf_hold(const HoldParams p) {
    volatile T* flag = reinterpret_cast<volatile T*>(p.flag);
    const unsigned long long t0 = cf_globaltimer();
    while (flag[0] == 0) {
        if (cf_globaltimer() - t0 > p.timeout_ns) {
            flag[1] = 1;
            return;
        }
        __nanosleep(500);  // (the flag is read over the bus: no need to poll it faster)
    }
}
