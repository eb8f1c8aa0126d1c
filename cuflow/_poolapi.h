/* The pool's C entry for the launcher of cuflow.core (_ewlaunch.c): a capsule named
 * CUFLOW_POOL_API in cuflow.memory._hotpath, holding a CuflowPoolAPI, which cuflow.memory
 * hands to the launcher (_ewlaunch.use_pool: core does not import memory).  The launcher
 * makes its new results through it, on the stream it launches on, where CuPy's current
 * allocator is the pool's hook (CupyMalloc): the hook's own read of the current stream and
 * its Python call layers are about a fifth of what a new result adds to a call
 * (bench/ab.py, fused_gelu_new_host_us). */
#ifndef CUFLOW_POOLAPI_H
#define CUFLOW_POOLAPI_H
#include <Python.h>
#include <stdint.h>

#define CUFLOW_POOL_API "cuflow.memory._hotpath._C_API"

typedef struct {
    PyTypeObject *cupy_malloc_type; /* the hook's type */
    /* malloc_on(hook, nbytes, stream): what hook(nbytes) gives, a MemoryPointer, for work
     * on ``stream`` (the current stream, which the caller read); None where the hook's
     * own call must serve it (an empty request, a hook over the Python paths); NULL with
     * an exception */
    PyObject *(*malloc_on)(PyObject *hook, PyObject *nbytes, intptr_t stream);
} CuflowPoolAPI;

#endif
