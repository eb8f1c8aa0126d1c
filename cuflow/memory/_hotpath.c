/* The pool's allocation paths in C: Pool._make_alloc's Python closure (the hot path) and
 * Pool._alloc_miss's general path for the general pool (flush of the exact-size cache,
 * best fit, split, coalescing), decision for decision, on the same Python containers (so
 * every other path of the pool, written in Python, sees the same state).  An optional
 * extension: without a C compiler the pool runs the Python ones.
 *
 * PoolLock: the pool's reentrant lock (threading.RLock's acquire / release / with), whose
 * state the compiled paths read and take without a Python call.
 *
 * PoolState: the pool's counters and flags (Pool.allocated, ... are properties over it), and
 * its cache hits by statistics class, as C fields.
 *
 * HotAlloc(pool, block_type, stream_fn=None, *, segment_type=None, freelist_type=None) is a
 * callable alloc(nbytes, arg) -> pointer:
 *   - stream_fn None: arg is the stream (Pool.alloc_ptr);
 *   - stream_fn a capsule of ``intptr_t (*)(void)`` (CuPy's
 *     cupy_backends.cuda.stream.get_current_stream_ptr): arg is CuPy's device id (the
 *     allocator hook's callback, CupyMalloc below) and the stream is the current one;
 *   - with segment_type and freelist_type (the types whose slots it reads), the general path
 *     is compiled too; without them it calls Pool._alloc_miss.
 * It holds the GIL throughout and runs no Python code on a hit or a fit: dictionary and list
 * operations on int keys, and Block's, Segment's and FreeList's slots read and written at
 * their offsets.  A miss of every free list releases the wholly free segments and takes a
 * new one from the pool's source (its alloc and free are the only Python calls), unless
 * Pool._alloc_slow has more to do: frees awaiting other streams' work, orphans, or another
 * stream's free blocks to borrow.  A refused segment goes to Pool._segment_refused's retries.
 * A capture, a recording, a destroyed stream or a stream met for the first time call
 * Pool._alloc_miss, and so do arguments that are not plain ints or a stream outside
 * [0, 2**63): Pool._alloc_miss checks them (Pool._alloc_args), converts a NumPy integer and
 * refuses the rest as Pool.alloc does.  A hit takes its arguments as they compare.
 *
 * CuPy's allocator hook: CupyMalloc (malloc(nbytes) -> MemoryPointer over the hot path),
 * PoolMemory (its memory object, which gives the block back when it goes), and, with
 * several devices, DeviceMalloc (the current device's CupyMalloc).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "_cfields.h" /* FIELD, find_field */
#include "_poolapi.h" /* CuflowPoolAPI */
#include <stddef.h>
#include <stdint.h>
#include <structmember.h> /* PyMemberDef (Python < 3.12) */

#ifdef Py_GIL_DISABLED
#error "the hot path relies on the GIL; free-threaded builds run the Python closure"
#endif

#define SMALL (1 << 20)
#define LARGE_ROUND (1 << 17)
#define MEMBER_OBJECT_EX 16 /* T_OBJECT_EX: the kind of member a __slots__ entry is */

/* ------------------------------------------------------------------- PoolLock */

/* Its state (owner, count, waiters) is guarded by the GIL, so an uncontended take or give
 * is a few loads and stores.  A thread that finds it held by another waits on ``wake``
 * (a PyThread lock used as a binary semaphore, initially taken) with the GIL released;
 * the owner's last give hands the lock straight to one waiter and posts ``wake``. */
#define HANDOFF ((unsigned long)-1)

typedef struct {
    PyObject_HEAD
    PyThread_type_lock wake;
    unsigned long owner;
    unsigned long count;
    unsigned long waiters;
} PoolLock;

static void
lock_take(PoolLock *l)
{
    unsigned long me = PyThread_get_thread_ident();
    if (l->count == 0) {
        l->owner = me;
        l->count = 1;
        return;
    }
    if (l->owner == me) {
        l->count++;
        return;
    }
    l->waiters++;
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(l->wake, WAIT_LOCK);
    Py_END_ALLOW_THREADS
    l->waiters--;
    l->owner = me; /* handed over with count 1 */
}

static int
lock_give(PoolLock *l)
{
    if (l->count == 0 || l->owner != PyThread_get_thread_ident()) {
        PyErr_SetString(PyExc_RuntimeError, "cannot release un-acquired lock");
        return -1;
    }
    if (--l->count == 0) {
        if (l->waiters) { /* to one waiter, which sets itself as the owner */
            l->owner = HANDOFF;
            l->count = 1;
            PyThread_release_lock(l->wake);
        }
        else
            l->owner = 0;
    }
    return 0;
}

static PyObject *
lock_acquire(PoolLock *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "acquire(blocking=True)");
        return NULL;
    }
    if (nargs == 1) {
        int blocking = PyObject_IsTrue(args[0]);
        if (blocking < 0)
            return NULL;
        if (!blocking && self->count && self->owner != PyThread_get_thread_ident())
            Py_RETURN_FALSE;
    }
    lock_take(self);
    Py_RETURN_TRUE;
}

static PyObject *
lock_release(PoolLock *self, PyObject *Py_UNUSED(ignored))
{
    if (lock_give(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
lock_exit(PoolLock *self, PyObject *const *Py_UNUSED(args), Py_ssize_t Py_UNUSED(nargs))
{
    return lock_release(self, NULL);
}

static PyObject *
lock_is_owned(PoolLock *self, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(self->count && self->owner == PyThread_get_thread_ident());
}

static PyObject *
lock_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) || (kwds != NULL && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "PoolLock() takes no arguments");
        return NULL;
    }
    PoolLock *self = (PoolLock *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->wake = PyThread_allocate_lock();
    if (self->wake == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    PyThread_acquire_lock(self->wake, WAIT_LOCK); /* posted by a give to a waiter */
    return (PyObject *)self;
}

static void
lock_dealloc(PoolLock *self)
{
    if (self->wake != NULL)
        PyThread_free_lock(self->wake);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef lock_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))lock_acquire, METH_FASTCALL,
     "acquire(blocking=True): take the lock (again, from its owner thread)"},
    {"release", (PyCFunction)lock_release, METH_NOARGS, "release()"},
    {"__enter__", (PyCFunction)(void (*)(void))lock_acquire, METH_FASTCALL, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))lock_exit, METH_FASTCALL, NULL},
    {"_is_owned", (PyCFunction)lock_is_owned, METH_NOARGS, "held by this thread"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PoolLockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cuflow.memory._hotpath.PoolLock",
    .tp_doc = "The memory pool's reentrant lock (threading.RLock's interface), which the "
              "compiled hot path takes without a Python call.",
    .tp_basicsize = sizeof(PoolLock),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = lock_new,
    .tp_dealloc = (destructor)lock_dealloc,
    .tp_methods = lock_methods,
};

/* ------------------------------------------------------------------ PoolState */

/* The pool's counters and flags, shared by its Python code (``Pool.allocated`` ... are
 * properties over it) and the compiled paths, which read and write the fields directly. */
typedef struct {
    PyObject_HEAD
    long long requested, allocated, peak_requested, peak_allocated, peak_active, pending_bytes;
    long long reserved, peak_reserved, num_segment_alloc, num_segment_free;
    long long max_request; /* _pool.max_request: a larger (or negative) request goes to Python */
    char busy, slow;
    long long hits[224]; /* cache hits by statistics class (_blocks.size_class) */
} PoolState;

/* the index of _blocks.size_class(n): four classes per power of two, from 512 B */
static inline int
class_index(long long n)
{
    if (n <= 512)
        return 0;
    int k = 64 - __builtin_clzll((unsigned long long)(n - 1));
    long long q = 1LL << (k - 3);
    return (k - 10) * 4 + (int)((n - 1 - (1LL << (k - 1))) / q) + 1;
}

static long long
class_bound(int i)
{
    if (i == 0)
        return 512;
    int k = (i - 1) / 4 + 10;
    return (1LL << (k - 1)) + (1LL << (k - 3)) * ((i - 1) % 4 + 1);
}

static PyObject *
state_count_hit(PoolState *self, PyObject *size)
{
    long long n = PyLong_AsLongLong(size);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    self->hits[class_index(n)]++;
    Py_RETURN_NONE;
}

static PyObject *
state_hit_counts(PoolState *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    for (int i = 0; i < 224; i++) {
        if (!self->hits[i])
            continue;
        PyObject *k = PyLong_FromLongLong(class_bound(i)), *v = PyLong_FromLongLong(self->hits[i]);
        if (k == NULL || v == NULL || PyDict_SetItem(d, k, v) < 0) {
            Py_XDECREF(k);
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(k);
        Py_DECREF(v);
    }
    return d;
}

static PyObject *
state_clear_hits(PoolState *self, PyObject *Py_UNUSED(ignored))
{
    memset(self->hits, 0, sizeof(self->hits));
    Py_RETURN_NONE;
}

static PyMethodDef state_methods[] = {
    {"count_hit", (PyCFunction)state_count_hit, METH_O, "count_hit(size): one more cache hit"},
    {"hit_counts", (PyCFunction)state_hit_counts, METH_NOARGS,
     "{size class: cache hits} (classes with hits)"},
    {"clear_hits", (PyCFunction)state_clear_hits, METH_NOARGS, "forget the cache hits"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef state_members[] = {
    {"requested", T_LONGLONG, offsetof(PoolState, requested), 0, "bytes requested by lent blocks"},
    {"allocated", T_LONGLONG, offsetof(PoolState, allocated), 0, "bytes of lent blocks"},
    {"peak_requested", T_LONGLONG, offsetof(PoolState, peak_requested), 0, NULL},
    {"peak_allocated", T_LONGLONG, offsetof(PoolState, peak_allocated), 0, NULL},
    {"peak_active", T_LONGLONG, offsetof(PoolState, peak_active), 0, NULL},
    {"pending_bytes", T_LONGLONG, offsetof(PoolState, pending_bytes), 0,
     "bytes freed, waiting for other streams' work"},
    {"reserved", T_LONGLONG, offsetof(PoolState, reserved), 0, "bytes of the pool's segments"},
    {"peak_reserved", T_LONGLONG, offsetof(PoolState, peak_reserved), 0, NULL},
    {"num_segment_alloc", T_LONGLONG, offsetof(PoolState, num_segment_alloc), 0,
     "segments taken from the source"},
    {"num_segment_free", T_LONGLONG, offsetof(PoolState, num_segment_free), 0,
     "segments given back to the source"},
    {"max_request", T_LONGLONG, offsetof(PoolState, max_request), 0,
     "most bytes a request may ask for (rounded up, it stays below 2**63)"},
    {"busy", T_BOOL, offsetof(PoolState, busy), 0, "a slow path runs (frees wait in _freed)"},
    {"slow", T_BOOL, offsetof(PoolState, slow), 0, "the hot path defers to the general one"},
    {NULL, 0, 0, 0, NULL},
};

static PyObject *
state_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) || (kwds != NULL && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "PoolState() takes no arguments");
        return NULL;
    }
    PoolState *st = (PoolState *)type->tp_alloc(type, 0); /* zeroed */
    if (st != NULL) /* (the pool sets its own, from its backend's granularity) */
        st->max_request = LLONG_MAX - LARGE_ROUND;
    return (PyObject *)st;
}

static PyTypeObject PoolStateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cuflow.memory._hotpath.PoolState",
    .tp_doc = "The memory pool's counters and flags (read and written by the compiled paths).",
    .tp_basicsize = sizeof(PoolState),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = state_new,
    .tp_members = state_members,
    .tp_methods = state_methods,
};

/* ------------------------------------------------------------------- FreeList */

/* _blocks.FreeList in C: the free blocks of one (owner, stream), in buckets of one size kept
 * in size order (an empty bucket is dropped at once, which _blocks.FreeList does lazily:
 * the same blocks are found in the same order).  Python calls its methods; the compiled
 * general path calls fl_* below with the sizes and slots it has already read. */
typedef struct {
    long long size;
    Py_ssize_t n, cap;
    PyObject **v;
} Bucket;

typedef struct {
    PyObject_HEAD
    Bucket *b;
    Py_ssize_t n, cap;
} FreeListObject;

static PyTypeObject FreeListType;

/* the first bucket whose size is at least ``size`` */
static Py_ssize_t
fl_find(FreeListObject *fl, long long size)
{
    Py_ssize_t lo = 0, hi = fl->n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (fl->b[mid].size < size)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int
fl_add(FreeListObject *fl, PyObject *blk, long long size)
{
    Py_ssize_t i = fl_find(fl, size);
    if (i == fl->n || fl->b[i].size != size) { /* a new bucket at i */
        if (fl->n == fl->cap) {
            Py_ssize_t cap = fl->cap ? fl->cap * 2 : 8;
            Bucket *nb = PyMem_Realloc(fl->b, cap * sizeof(Bucket));
            if (nb == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            fl->b = nb;
            fl->cap = cap;
        }
        memmove(fl->b + i + 1, fl->b + i, (fl->n - i) * sizeof(Bucket));
        fl->b[i].size = size;
        fl->b[i].n = fl->b[i].cap = 0;
        fl->b[i].v = NULL;
        fl->n++;
    }
    Bucket *k = fl->b + i;
    if (k->n == k->cap) {
        Py_ssize_t cap = k->cap ? k->cap * 2 : 4;
        PyObject **nv = PyMem_Realloc(k->v, cap * sizeof(PyObject *));
        if (nv == NULL) {
            if (k->n == 0) { /* drop the bucket just made */
                memmove(fl->b + i, fl->b + i + 1, (fl->n - i - 1) * sizeof(Bucket));
                fl->n--;
            }
            PyErr_NoMemory();
            return -1;
        }
        k->v = nv;
        k->cap = cap;
    }
    k->v[k->n++] = Py_NewRef(blk);
    return 0;
}

/* take item j of bucket i (a new reference: the list's) */
static PyObject *
fl_take(FreeListObject *fl, Py_ssize_t i, Py_ssize_t j)
{
    Bucket *k = fl->b + i;
    PyObject *blk = k->v[j];
    memmove(k->v + j, k->v + j + 1, (k->n - j - 1) * sizeof(PyObject *));
    if (--k->n == 0) {
        PyMem_Free(k->v);
        memmove(fl->b + i, fl->b + i + 1, (fl->n - i - 1) * sizeof(Bucket));
        fl->n--;
    }
    return blk;
}

/* remove ``blk`` (of ``size`` bytes); a ValueError if it is not there */
static int
fl_drop(FreeListObject *fl, PyObject *blk, long long size)
{
    Py_ssize_t i = fl_find(fl, size);
    if (i < fl->n && fl->b[i].size == size) {
        Bucket *k = fl->b + i;
        for (Py_ssize_t j = 0; j < k->n; j++)
            if (k->v[j] == blk) {
                Py_DECREF(fl_take(fl, i, j));
                return 0;
            }
    }
    PyErr_SetString(PyExc_ValueError, "FreeList.remove(b): b is not in the free list");
    return -1;
}

/* what pop_fit asks of a block: whole (no neighbours), its segment kept; -1 on error */
typedef int (*block_test)(void *ctx, PyObject *blk);

static int
attr_is(PyObject *o, const char *name, PyObject *value)
{
    PyObject *v = PyObject_GetAttrString(o, name);
    if (v == NULL)
        return -1;
    int r = v == value;
    Py_DECREF(v);
    return r;
}

static int
py_whole(void *ctx, PyObject *blk)
{
    int p = attr_is(blk, "prev", Py_None);
    return p <= 0 ? p : attr_is(blk, "next", Py_None);
}

static int
py_kept(void *ctx, PyObject *blk)
{
    PyObject *seg = PyObject_GetAttrString(blk, "seg");
    if (seg == NULL)
        return -1;
    PyObject *keep = PyObject_GetAttrString(seg, "keep");
    Py_DECREF(seg);
    if (keep == NULL)
        return -1;
    int r = PyObject_IsTrue(keep);
    Py_DECREF(keep);
    return r;
}

/* FreeList.pop_fit: the smallest block of ``size`` to ``most`` bytes (most < 0: no bound;
 * a larger one only from a kept segment); among equal sizes a whole segment first, else
 * the last freed.  *out: a new reference or NULL (none). */
static int
fl_fit(FreeListObject *fl, long long size, long long most, block_test whole, block_test kept,
       void *ctx, PyObject **out)
{
    *out = NULL;
    for (Py_ssize_t i = fl_find(fl, size); i < fl->n; i++) {
        Bucket *k = fl->b + i;
        if (most >= 0 && k->size > most) {
            for (Py_ssize_t j = k->n - 1; j >= 0; j--) {
                int r = kept(ctx, k->v[j]);
                if (r < 0)
                    return -1;
                if (r) {
                    *out = fl_take(fl, i, j);
                    return 0;
                }
            }
            continue;
        }
        for (Py_ssize_t j = k->n - 1; j >= 0; j--) {
            int r = whole(ctx, k->v[j]);
            if (r < 0)
                return -1;
            if (r) {
                *out = fl_take(fl, i, j);
                return 0;
            }
        }
        *out = fl_take(fl, i, k->n - 1);
        return 0;
    }
    return 0;
}

static long long
size_of(PyObject *blk)
{
    PyObject *s = PyObject_GetAttrString(blk, "size");
    if (s == NULL)
        return -1;
    long long v = PyLong_AsLongLong(s);
    Py_DECREF(s);
    if (v < 0 && !PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "a block's size must be >= 0");
    return v;
}

static PyObject *
freelist_push(FreeListObject *self, PyObject *blk)
{
    long long size = size_of(blk);
    if (size < 0 || fl_add(self, blk, size) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
freelist_remove(FreeListObject *self, PyObject *blk)
{
    long long size = size_of(blk);
    if (size < 0 || fl_drop(self, blk, size) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
freelist_pop_fit(FreeListObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "pop_fit(size, most=None)");
        return NULL;
    }
    long long size = PyLong_AsLongLong(args[0]), most = -1;
    if (size == -1 && PyErr_Occurred())
        return NULL;
    if (nargs == 2 && args[1] != Py_None) {
        most = PyLong_AsLongLong(args[1]);
        if (most == -1 && PyErr_Occurred())
            return NULL;
        if (most < 0) {
            PyErr_SetString(PyExc_ValueError, "pop_fit: most must be >= 0 or None");
            return NULL;
        }
    }
    PyObject *out;
    if (fl_fit(self, size, most, py_whole, py_kept, NULL, &out) < 0)
        return NULL;
    return out != NULL ? out : Py_NewRef(Py_None);
}

static PyObject *
freelist_blocks(FreeListObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < self->n; i++)
        for (Py_ssize_t j = 0; j < self->b[i].n; j++)
            if (PyList_Append(out, self->b[i].v[j]) < 0) {
                Py_DECREF(out);
                return NULL;
            }
    return out;
}

static Py_ssize_t
freelist_len(FreeListObject *self)
{
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < self->n; i++)
        n += self->b[i].n;
    return n;
}

static PyObject *
freelist_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) || (kwds != NULL && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "FreeList() takes no arguments");
        return NULL;
    }
    return type->tp_alloc(type, 0);
}

static int
freelist_traverse(FreeListObject *self, visitproc visit, void *arg)
{
    for (Py_ssize_t i = 0; i < self->n; i++)
        for (Py_ssize_t j = 0; j < self->b[i].n; j++)
            Py_VISIT(self->b[i].v[j]);
    return 0;
}

static int
freelist_clear(FreeListObject *self)
{
    Bucket *b = self->b;
    Py_ssize_t n = self->n;
    self->b = NULL;
    self->n = self->cap = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        for (Py_ssize_t j = 0; j < b[i].n; j++)
            Py_DECREF(b[i].v[j]);
        PyMem_Free(b[i].v);
    }
    PyMem_Free(b);
    return 0;
}

static void
freelist_dealloc(FreeListObject *self)
{
    PyObject_GC_UnTrack(self);
    freelist_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef freelist_methods[] = {
    {"push", (PyCFunction)freelist_push, METH_O, "push(b): add free block b"},
    {"remove", (PyCFunction)freelist_remove, METH_O, "remove(b): take b out"},
    {"pop_fit", (PyCFunction)(void (*)(void))freelist_pop_fit, METH_FASTCALL,
     "pop_fit(size, most=None): the smallest block of size to most bytes (any size in a "
     "segment a warm-up kept); among equal sizes a whole segment first; None if none"},
    {"blocks", (PyCFunction)freelist_blocks, METH_NOARGS, "the free blocks, in size order"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods freelist_as_sequence = {.sq_length = (lenfunc)freelist_len};

static PyTypeObject FreeListType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cuflow.memory._hotpath.FreeList",
    .tp_doc = "Free blocks of one (owner, stream), by size (_blocks.FreeList in C).",
    .tp_basicsize = sizeof(FreeListObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = freelist_new,
    .tp_dealloc = (destructor)freelist_dealloc,
    .tp_traverse = (traverseproc)freelist_traverse,
    .tp_clear = (inquiry)freelist_clear,
    .tp_methods = freelist_methods,
    .tp_as_sequence = &freelist_as_sequence,
};

/* ------------------------------------------------------------------- HotAlloc */

typedef intptr_t (*stream_fn)(void);

/* Block's slots used here, by offset */
enum { B_PLAIN, B_REQ, B_STREAM, B_SIZE, B_PTR, B_FREE, B_QUICK, B_PREV, B_NEXT, B_SEG,
       B_EVENTS, B_USES, B_N };
static const char *block_slots[B_N] = {"plain", "req", "stream", "size", "ptr", "free", "quick",
                                       "prev", "next", "seg", "events", "uses"};
/* Segment's slots used by the general path */
enum { S_KEEP, S_OWNER, S_FIRST, S_NBYTES, S_PTR, S_STREAM, S_STREAMS, X_N };
static const char *segment_slots[X_N] = {"keep", "owner", "first", "nbytes", "ptr", "stream",
                                         "streams"};

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *pool, *attrs, *quick, *live, *freed, *block_type, *owner;
    PyObject *popitem, *free_other, *miss;
    /* the general path (NULL without segment_type / freelist_type: it is then Python's) */
    PyObject *segment_type, *freelist_type, *lists, *general, *alloc_slow, *new_list, *drain;
    PyObject *segment_refused, *release_segment;
    PoolLock *lock;
    PoolState *st;
    Py_ssize_t off[B_N];
    Py_ssize_t xoff[X_N];
    stream_fn get_stream;
} HotAlloc;

static PyObject *s_segment_granularity_min, *s_gone, *s_watched, *s_on_new_stream,
    *s_capturing, *s_backend, *s_cheap_release, *s_segment_granularity, *s_recording,
    *s_source, *s_pending, *s_deferred, *s_orphans, *s_warming, *s_misses, *s_segments, *s_whole,
    *s_alloc, *s_free;

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

static PyObject *
slot(HotAlloc *self, PyObject *b, int i)
{
    PyObject *v = *(PyObject **)((char *)b + self->off[i]);
    if (v == NULL)
        PyErr_Format(PyExc_AttributeError, "Block has no %s", block_slots[i]);
    return v; /* borrowed */
}

static void
set_slot(HotAlloc *self, PyObject *b, int i, PyObject *v)
{
    Py_XSETREF(*(PyObject **)((char *)b + self->off[i]), Py_NewRef(v));
}

/* the peaks after lending bytes */
static inline void
lent(PoolState *st, long long size, long long nbytes)
{
    st->requested += nbytes;
    if (st->requested > st->peak_requested)
        st->peak_requested = st->requested;
    st->allocated += size;
    if (st->allocated > st->peak_allocated)
        st->peak_allocated = st->allocated;
    if (st->allocated + st->pending_bytes > st->peak_active)
        st->peak_active = st->allocated + st->pending_bytes;
}

static int
same_int(PyObject *a, PyObject *b)
{
    return a == b ? 1 : PyObject_RichCompareBool(a, b, Py_EQ);
}

/* the most recently queued free (dict.popitem's order); a new reference */
static PyObject *
pop_freed(HotAlloc *self)
{
    if (PyDict_GET_SIZE(self->freed) == 1) {
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        PyDict_Next(self->freed, &pos, &key, &value);
        Py_INCREF(key);
        if (PyDict_DelItem(self->freed, key) < 0) {
            Py_DECREF(key);
            return NULL;
        }
        return key;
    }
    PyObject *item = PyObject_CallNoArgs(self->popitem);
    if (item == NULL)
        return NULL;
    PyObject *key = Py_NewRef(PyTuple_GET_ITEM(item, 0));
    Py_DECREF(item);
    return key;
}

/* a freed block into the exact-size cache: quick[b.stream][b.size].append(b) */
static int
to_quick(HotAlloc *self, PyObject *b, PyObject *bstream, PyObject *size)
{
    PyObject *q = PyDict_GetItemWithError(self->quick, bstream);
    if (q == NULL) {
        if (PyErr_Occurred() || (q = PyDict_New()) == NULL)
            return -1;
        if (PyDict_SetItem(self->quick, bstream, q) < 0) {
            Py_DECREF(q);
            return -1;
        }
    }
    else
        Py_INCREF(q);
    int r;
    PyObject *lst = PyDict_GetItemWithError(q, size);
    if (lst != NULL)
        r = PyList_Append(lst, b);
    else if (PyErr_Occurred() || (lst = PyList_New(1)) == NULL)
        r = -1;
    else {
        PyList_SET_ITEM(lst, 0, Py_NewRef(b));
        r = PyDict_SetItem(q, size, lst);
        Py_DECREF(lst);
    }
    Py_DECREF(q);
    return r;
}

static int insert_free(HotAlloc *self, PyObject *b);

/* whether b's segment was kept by a warm-up (its blocks skip the exact-size cache): 1, 0,
 * or -1 with an exception */
static int
seg_kept(HotAlloc *self, PyObject *b)
{
    PyObject *seg = slot(self, b, B_SEG);
    if (seg == NULL)
        return -1;
    if (self->segment_type != NULL && Py_TYPE(seg) == (PyTypeObject *)self->segment_type) {
        PyObject *keep = SLOT(seg, self->xoff[S_KEEP]);
        return keep == Py_True ? 1 : keep == Py_False || keep == NULL ? 0 : PyObject_IsTrue(keep);
    }
    PyObject *keep = PyObject_GetAttrString(seg, "keep");
    int r = keep == NULL ? -1 : PyObject_IsTrue(keep);
    Py_XDECREF(keep);
    return r;
}

/* One queued free (the closure's inner loop).  *again gets a new reference to the pointer
 * when the block was asked for again with this very request and stream. */
static int
drain_one(HotAlloc *self, int slow, long long nbytes, PyObject *stream, PyObject **again)
{
    PyObject *ptr = pop_freed(self);
    if (ptr == NULL)
        return -1;
    PyObject *b = PyDict_GetItemWithError(self->live, ptr);
    if (b == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_KeyError, ptr);
        Py_DECREF(ptr);
        return -1;
    }
    if (Py_TYPE(b) != (PyTypeObject *)self->block_type) {
        PyErr_Format(PyExc_TypeError, "the pool lent a %R, not a Block", Py_TYPE(b));
        Py_DECREF(ptr);
        return -1;
    }
    Py_INCREF(b);
    int r = -1;
    /* strong references: a garbage collection (PyDict_New, PyList_New) may run finalizers
     * that re-enter the pool */
    PyObject *plain = slow ? Py_False : slot(self, b, B_PLAIN);
    PyObject *req = NULL, *bstream = NULL, *size = NULL;
    if (plain == NULL || (req = slot(self, b, B_REQ)) == NULL
        || (bstream = slot(self, b, B_STREAM)) == NULL || (size = slot(self, b, B_SIZE)) == NULL) {
        req = bstream = size = NULL;
        goto done;
    }
    Py_INCREF(req);
    Py_INCREF(bstream);
    Py_INCREF(size);
    int is_plain = plain == Py_True ? 1 : plain == Py_False ? 0 : PyObject_IsTrue(plain);
    if (is_plain < 0)
        goto done;
    if (!is_plain) { /* the general free (cross-stream uses, private pools, dead streams) */
        if (PyDict_DelItem(self->live, ptr) < 0)
            goto done;
        PyObject *res = PyObject_CallOneArg(self->free_other, b);
        if (res == NULL)
            goto done;
        Py_DECREF(res);
        r = 0;
        goto done;
    }
    long long req_v = PyLong_AsLongLong(req);
    if (req_v == -1 && PyErr_Occurred())
        goto done;
    long long size_v = PyLong_AsLongLong(size);
    if (size_v == -1 && PyErr_Occurred())
        goto done;
    int kept = seg_kept(self, b);
    if (kept < 0)
        goto done;
    /* the hand-back of a block asked for again at once: not for a kept block of 1 MiB or
     * more, which is coalesced as it is freed (Pool._make_alloc's closure says why) */
    if (*again == NULL && req_v == nbytes && !(kept && size_v >= SMALL)) {
        int same = same_int(bstream, stream);
        if (same < 0)
            goto done;
        if (same) { /* it stays lent, its statistics unchanged; the other frees go on */
            self->st->hits[class_index(size_v)]++;
            *again = Py_NewRef(ptr);
            r = 0;
            goto done;
        }
    }
    if (kept) { /* a kept segment's block: coalesced at once, as Pool._free_locked does */
        PyObject *gone = PyDict_GetItemWithError(self->attrs, s_gone);
        if ((gone == NULL && PyErr_Occurred()) || PyDict_DelItem(self->live, ptr) < 0)
            goto done;
        if (self->segment_type == NULL || gone == NULL || !PyList_Check(gone)
            || PyList_GET_SIZE(gone)) { /* (Pool._free_locked forgets destroyed streams) */
            PyObject *res = PyObject_CallOneArg(self->free_other, b);
            r = res == NULL ? -1 : 0;
            Py_XDECREF(res);
            goto done;
        }
        self->st->requested -= req_v;
        self->st->allocated -= size_v;
        set_slot(self, b, B_FREE, Py_True);
        r = insert_free(self, b);
        goto done;
    }
    if (PyDict_DelItem(self->live, ptr) < 0)
        goto done;
    self->st->requested -= req_v;
    self->st->allocated -= size_v;
    set_slot(self, b, B_FREE, Py_True);
    set_slot(self, b, B_QUICK, Py_True);
    r = to_quick(self, b, bstream, size);
done:
    Py_XDECREF(req);
    Py_XDECREF(bstream);
    Py_XDECREF(size);
    Py_DECREF(b);
    Py_DECREF(ptr);
    return r;
}

static PyObject *bad_args(HotAlloc *self, PyObject *nbytes, PyObject *stream);

/* An exact-size block freed earlier on this stream: a new reference to its pointer,
 * Py_None (borrowed) when there is none, NULL on error.  (``nbytes_obj``, the request as
 * given, only names a bad argument: called once, this is inlined, and passing it costs a
 * hit nothing.) */
static PyObject *
quick_hit(HotAlloc *self, PyObject *nbytes_obj, long long nbytes, long long size_v,
          PyObject *stream)
{
    PyObject *q = PyDict_GetItemWithError(self->quick, stream);
    if (q == NULL) /* (an error: an unhashable stream, which Pool._alloc_args names) */
        return PyErr_Occurred() ? bad_args(self, nbytes_obj, stream) : Py_None;
    PyObject *size = PyLong_FromLongLong(size_v);
    if (size == NULL)
        return NULL;
    PyObject *lst = PyDict_GetItemWithError(q, size), *b = NULL, *ptr = NULL, *req = NULL;
    Py_ssize_t n;
    if (lst == NULL || !PyList_Check(lst) || (n = PyList_GET_SIZE(lst)) == 0) {
        Py_DECREF(size);
        return PyErr_Occurred() ? NULL : Py_None;
    }
    b = Py_NewRef(PyList_GET_ITEM(lst, n - 1));
    if (Py_TYPE(b) != (PyTypeObject *)self->block_type) {
        PyErr_Format(PyExc_TypeError, "the pool cached a %R, not a Block", Py_TYPE(b));
        goto fail;
    }
    if (PyList_SetSlice(lst, n - 1, n, NULL) < 0 || (req = PyLong_FromLongLong(nbytes)) == NULL)
        goto fail;
    set_slot(self, b, B_QUICK, Py_False);
    set_slot(self, b, B_FREE, Py_False);
    set_slot(self, b, B_REQ, req);
    self->st->hits[class_index(size_v)]++;
    lent(self->st, size_v, nbytes);
    if ((ptr = slot(self, b, B_PTR)) == NULL)
        goto fail;
    Py_INCREF(ptr);
    if (PyDict_SetItem(self->live, ptr, b) < 0)
        goto fail;
    Py_DECREF(req);
    Py_DECREF(size);
    Py_DECREF(b);
    return ptr;
fail:
    Py_XDECREF(ptr);
    Py_XDECREF(req);
    Py_DECREF(size);
    Py_DECREF(b);
    return NULL;
}

/* ------------------------------------------------------------ the general path */
/* Pool._alloc_locked for the general pool (no capture, no destroyed stream, no recording):
 * flush the exact-size cache into the coalesced free lists, take the best fit, split it;
 * FreeList.push / remove / pop_fit, Pool._insert_free and Pool._take decision for decision,
 * on the same containers.  A miss of every free list: Pool._alloc_slow's release of free
 * segments and new segment, or the method itself (borrowing, pending frees, orphans). */

#define SPLIT_MIN 512
#ifndef LARGE_SPLIT_MAX
#define LARGE_SPLIT_MAX 2
#endif
#define MIN_SEGMENT (2 << 20)
#define DEAD_STREAM (-1)

static long long
as_ll(PyObject *v)
{
    return PyLong_AsLongLong(v); /* -1 with an exception on error */
}

static int
slot_set_ll(HotAlloc *self, PyObject *b, int i, long long v)
{
    PyObject *o = PyLong_FromLongLong(v);
    if (o == NULL)
        return -1;
    Py_XSETREF(SLOT(b, self->off[i]), o);
    return 0;
}

static int
check_fl(PyObject *fl)
{
    if (!Py_IS_TYPE(fl, &FreeListType)) {
        PyErr_Format(PyExc_TypeError, "the pool holds a %R, not a _hotpath.FreeList", Py_TYPE(fl));
        return -1;
    }
    return 0;
}

/* FreeList.push(b) */
static int
fl_push(HotAlloc *self, PyObject *fl, PyObject *b)
{
    long long size = as_ll(SLOT(b, self->off[B_SIZE]));
    if ((size == -1 && PyErr_Occurred()) || check_fl(fl) < 0)
        return -1;
    return fl_add((FreeListObject *)fl, b, size);
}

/* FreeList.remove(b) */
static int
fl_remove(HotAlloc *self, PyObject *fl, PyObject *b)
{
    long long size = as_ll(SLOT(b, self->off[B_SIZE]));
    if ((size == -1 && PyErr_Occurred()) || check_fl(fl) < 0)
        return -1;
    return fl_drop((FreeListObject *)fl, b, size);
}

static int
hot_whole(void *ctx, PyObject *b)
{
    HotAlloc *self = (HotAlloc *)ctx;
    if (Py_TYPE(b) != (PyTypeObject *)self->block_type) {
        PyErr_Format(PyExc_TypeError, "a free list holds a %R, not a Block", Py_TYPE(b));
        return -1;
    }
    return SLOT(b, self->off[B_PREV]) == Py_None && SLOT(b, self->off[B_NEXT]) == Py_None;
}

static int
hot_kept(void *ctx, PyObject *b)
{
    HotAlloc *self = (HotAlloc *)ctx;
    if (Py_TYPE(b) != (PyTypeObject *)self->block_type) {
        PyErr_Format(PyExc_TypeError, "a free list holds a %R, not a Block", Py_TYPE(b));
        return -1;
    }
    PyObject *seg = SLOT(b, self->off[B_SEG]);
    if (seg == NULL || Py_TYPE(seg) != (PyTypeObject *)self->segment_type) {
        PyErr_SetString(PyExc_TypeError, "a Block's seg must be a Segment");
        return -1;
    }
    PyObject *keep = SLOT(seg, self->xoff[S_KEEP]);
    return keep == Py_True ? 1 : keep == Py_False ? 0 : keep == NULL ? 0 : PyObject_IsTrue(keep);
}

/* FreeList.pop_fit(size, most) (most < 0: None); *out a new reference or NULL */
static int
fl_pop_fit(HotAlloc *self, PyObject *fl, long long size, long long most, PyObject **out)
{
    *out = NULL;
    if (check_fl(fl) < 0)
        return -1;
    return fl_fit((FreeListObject *)fl, size, most, hot_whole, hot_kept, self, out);
}

/* Pool._list(owner, stream): a new reference */
static PyObject *
get_list(HotAlloc *self, PyObject *owner, PyObject *stream)
{
    if (owner == Py_None) { /* the general pool's lists by stream: no key tuple to make */
        PyObject *fl = PyDict_GetItemWithError(self->general, stream);
        if (fl != NULL)
            return Py_NewRef(fl);
        if (PyErr_Occurred())
            return NULL;
        PyObject *args[2] = {owner, stream};
        return PyObject_Vectorcall(self->new_list, args, 2, NULL);
    }
    PyObject *key = PyTuple_Pack(2, owner, stream);
    if (key == NULL)
        return NULL;
    PyObject *fl = PyDict_GetItemWithError(self->lists, key);
    Py_DECREF(key);
    if (fl != NULL)
        return Py_NewRef(fl);
    if (PyErr_Occurred())
        return NULL;
    PyObject *args[2] = {owner, stream};
    return PyObject_Vectorcall(self->new_list, args, 2, NULL);
}

/* a neighbour that coalesces with a free block of ``stream``: free, not in the exact-size
 * cache, awaiting no event, on the same stream */
static int
joins(HotAlloc *self, PyObject *nb, PyObject *stream)
{
    if (nb == Py_None)
        return 0;
    if (Py_TYPE(nb) != (PyTypeObject *)self->block_type) {
        PyErr_Format(PyExc_TypeError, "a Block's neighbour is a %R", Py_TYPE(nb));
        return -1;
    }
    if (SLOT(nb, self->off[B_FREE]) != Py_True || SLOT(nb, self->off[B_QUICK]) != Py_False
        || SLOT(nb, self->off[B_EVENTS]) != Py_None)
        return 0;
    return same_int(SLOT(nb, self->off[B_STREAM]), stream);
}

/* Pool._insert_free for a block of the general pool on a live stream */
static int
insert_free(HotAlloc *self, PyObject *b)
{
    PyObject *stream = SLOT(b, self->off[B_STREAM]), *seg = SLOT(b, self->off[B_SEG]);
    PyObject *owner = seg == NULL ? NULL : SLOT(seg, self->xoff[S_OWNER]);
    if (stream == NULL || owner == NULL) {
        PyErr_SetString(PyExc_AttributeError, "Block.stream / Block.seg.owner");
        return -1;
    }
    long long sv = as_ll(stream);
    if (sv == -1 && PyErr_Occurred())
        return -1;
    if (sv == DEAD_STREAM || owner != Py_None) { /* orphans, private pools: Python's */
        PyObject *r = PyObject_CallMethod(self->pool, "_insert_free", "O", b);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    Py_INCREF(b);
    Py_INCREF(stream);
    int r = -1, j;
    PyObject *fl = get_list(self, Py_None, stream);
    if (fl == NULL)
        goto done;
    PyObject *p = SLOT(b, self->off[B_PREV]), *n = SLOT(b, self->off[B_NEXT]);
    Py_INCREF(p);
    Py_INCREF(n);
    if ((j = joins(self, p, stream)) < 0)
        goto done2;
    if (j) { /* b joins its free predecessor p */
        long long ps = as_ll(SLOT(p, self->off[B_SIZE])), bs = as_ll(SLOT(b, self->off[B_SIZE]));
        if (((ps == -1 || bs == -1) && PyErr_Occurred()) || fl_remove(self, fl, p) < 0
            || slot_set_ll(self, p, B_SIZE, ps + bs) < 0)
            goto done2;
        Py_XSETREF(SLOT(p, self->off[B_NEXT]), Py_NewRef(n));
        if (n != Py_None)
            Py_XSETREF(SLOT(n, self->off[B_PREV]), Py_NewRef(p));
        Py_SETREF(b, Py_NewRef(p));
    }
    if ((j = joins(self, n, stream)) < 0)
        goto done2;
    if (j) { /* its free successor n joins b */
        long long ns = as_ll(SLOT(n, self->off[B_SIZE])), bs = as_ll(SLOT(b, self->off[B_SIZE]));
        if (((ns == -1 || bs == -1) && PyErr_Occurred()) || fl_remove(self, fl, n) < 0
            || slot_set_ll(self, b, B_SIZE, bs + ns) < 0)
            goto done2;
        PyObject *nn = SLOT(n, self->off[B_NEXT]);
        Py_XSETREF(SLOT(b, self->off[B_NEXT]), Py_NewRef(nn));
        if (nn != Py_None)
            Py_XSETREF(SLOT(nn, self->off[B_PREV]), Py_NewRef(b));
    }
    r = fl_push(self, fl, b);
    if (r == 0 && SLOT(b, self->off[B_PREV]) == Py_None && SLOT(b, self->off[B_NEXT]) == Py_None) {
        /* wholly free: a candidate for the next miss's release (Pool._whole) */
        PyObject *whole = PyDict_GetItemWithError(self->attrs, s_whole);
        if (whole == NULL || !PyDict_Check(whole)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "the pool's _whole must be a dict");
            r = -1;
        }
        else
            r = PyDict_SetItem(whole, SLOT(seg, self->xoff[S_PTR]), seg);
    }
done2:
    Py_DECREF(p);
    Py_DECREF(n);
done:
    Py_XDECREF(fl);
    Py_DECREF(stream);
    Py_DECREF(b);
    return r;
}

/* Pool._flush_quick: the exact-size cache into the coalesced free lists */
static int
flush_quick(HotAlloc *self)
{
    if (PyDict_GET_SIZE(self->quick) == 0)
        return 0;
    PyObject *streams = PyDict_Values(self->quick);
    if (streams == NULL)
        return -1;
    PyDict_Clear(self->quick); /* in place: the hot path holds this dict */
    int r = 0;
    for (Py_ssize_t i = 0; r == 0 && i < PyList_GET_SIZE(streams); i++) {
        PyObject *by_size = PyList_GET_ITEM(streams, i);
        if (!PyDict_Check(by_size)) {
            PyErr_SetString(PyExc_TypeError, "the exact-size cache holds a non-dict");
            r = -1;
            break;
        }
        PyObject *lists = PyDict_Values(by_size);
        if (lists == NULL) {
            r = -1;
            break;
        }
        for (Py_ssize_t k = 0; r == 0 && k < PyList_GET_SIZE(lists); k++) {
            PyObject *lst = PyList_GET_ITEM(lists, k);
            for (Py_ssize_t j = 0; r == 0 && j < PyList_GET_SIZE(lst); j++) {
                PyObject *b = Py_NewRef(PyList_GET_ITEM(lst, j));
                if (Py_TYPE(b) != (PyTypeObject *)self->block_type) {
                    PyErr_Format(PyExc_TypeError, "the pool cached a %R", Py_TYPE(b));
                    r = -1;
                }
                else {
                    Py_XSETREF(SLOT(b, self->off[B_QUICK]), Py_NewRef(Py_False));
                    r = insert_free(self, b);
                }
                Py_DECREF(b);
            }
        }
        Py_DECREF(lists);
    }
    Py_DECREF(streams);
    return r;
}

/* a new Block(ptr, size, seg, stream), as Block.__init__ makes it */
static PyObject *
new_block(HotAlloc *self, long long ptr, long long size, PyObject *seg, PyObject *stream)
{
    PyTypeObject *t = (PyTypeObject *)self->block_type;
    PyObject *b = t->tp_alloc(t, 0);
    if (b == NULL)
        return NULL;
    if (slot_set_ll(self, b, B_PTR, ptr) < 0 || slot_set_ll(self, b, B_SIZE, size) < 0
        || slot_set_ll(self, b, B_REQ, 0) < 0) {
        Py_DECREF(b);
        return NULL;
    }
    SLOT(b, self->off[B_SEG]) = Py_NewRef(seg);
    SLOT(b, self->off[B_STREAM]) = Py_NewRef(stream);
    SLOT(b, self->off[B_PREV]) = Py_NewRef(Py_None);
    SLOT(b, self->off[B_NEXT]) = Py_NewRef(Py_None);
    SLOT(b, self->off[B_FREE]) = Py_NewRef(Py_True);
    SLOT(b, self->off[B_QUICK]) = Py_NewRef(Py_False);
    SLOT(b, self->off[B_USES]) = Py_NewRef(Py_None);
    SLOT(b, self->off[B_EVENTS]) = Py_NewRef(Py_None);
    SLOT(b, self->off[B_PLAIN]) = Py_NewRef(Py_False);
    return b;
}

/* Pool._take: lend b for a request of nbytes (size rounded), splitting off its rest */
static int
take(HotAlloc *self, PyObject *b, long long size, PyObject *nbytes_obj, long long nbytes)
{
    long long bs = as_ll(SLOT(b, self->off[B_SIZE]));
    if (bs == -1 && PyErr_Occurred())
        return -1;
    PyObject *seg = SLOT(b, self->off[B_SEG]);
    PyObject *owner = SLOT(seg, self->xoff[S_OWNER]);
    if (bs - size >= SPLIT_MIN) {
        long long ptr = as_ll(SLOT(b, self->off[B_PTR]));
        if (ptr == -1 && PyErr_Occurred())
            return -1;
        PyObject *stream = SLOT(b, self->off[B_STREAM]);
        PyObject *r = new_block(self, ptr + size, bs - size, seg, stream);
        if (r == NULL)
            return -1;
        PyObject *n = SLOT(b, self->off[B_NEXT]);
        Py_SETREF(SLOT(r, self->off[B_PREV]), Py_NewRef(b));
        Py_SETREF(SLOT(r, self->off[B_NEXT]), Py_NewRef(n));
        if (n != Py_None)
            Py_XSETREF(SLOT(n, self->off[B_PREV]), Py_NewRef(r));
        Py_XSETREF(SLOT(b, self->off[B_NEXT]), Py_NewRef(r));
        bs = size;
        PyObject *fl = NULL;
        if (slot_set_ll(self, b, B_SIZE, size) < 0
            || (fl = get_list(self, owner, stream)) == NULL || fl_push(self, fl, r) < 0) {
            Py_XDECREF(fl);
            Py_DECREF(r);
            return -1;
        }
        Py_DECREF(fl);
        Py_DECREF(r);
    }
    Py_XSETREF(SLOT(b, self->off[B_FREE]), Py_NewRef(Py_False));
    Py_XSETREF(SLOT(b, self->off[B_PLAIN]), Py_NewRef(owner == Py_None ? Py_True : Py_False));
    Py_XSETREF(SLOT(b, self->off[B_REQ]), Py_NewRef(nbytes_obj));
    lent(self->st, bs, nbytes);
    return 0;
}

/* The backend's release policy and its granule for large segments (_pool.granule, 0 when
 * release is not cheap): what bounds a best fit, and the size of a new segment. */
static int
backend_policy(HotAlloc *self, int *cheap, long long *granule)
{
    PyObject *be = PyDict_GetItemWithError(self->attrs, s_backend);
    PyObject *v = be == NULL ? NULL : PyObject_GetAttr(be, s_cheap_release);
    int c = v == NULL ? -1 : PyObject_IsTrue(v);
    Py_XDECREF(v);
    if (c < 0) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_AttributeError, s_backend);
        return -1;
    }
    *cheap = c;
    PyObject *g = PyObject_GetAttr(be, s_segment_granularity);
    long long gv = g == NULL ? -1 : as_ll(g);
    Py_XDECREF(g);
    PyObject *gm = gv <= 0 ? NULL : PyObject_GetAttr(be, s_segment_granularity_min);
    long long least = gm == NULL ? -1 : as_ll(gm);
    Py_XDECREF(gm);
    if (gv <= 0 || least < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "segment_granularity must be > 0");
        return -1;
    }
    if (least) { /* _pool.granule: a power of two, a quarter of what the pool reserves */
        long long r = self->st->reserved / 4, p = 1;
        if (r < least)
            r = least;
        while (p <= r / 2)
            p <<= 1;
        if (p < gv)
            gv = p;
    }
    *granule = gv;
    return 0;
}

/* Pool._segment_bytes for the general pool.  A size past what whole granules can hold
 * (possible only where the backend's granularity grew after max_request was set) saturates
 * to LLONG_MAX, a segment no source gives, rather than wrapping around. */
static inline long long
segment_bytes(long long size, long long granule)
{
    if (size < SMALL)
        return size > MIN_SEGMENT ? size : MIN_SEGMENT;
    long long n = (size - 1) / granule + 1;
    return n > LLONG_MAX / granule ? LLONG_MAX : n * granule;
}

/* Whether Pool._alloc_slow's steps before a new segment have nothing to do for this miss:
 * no frees awaiting other streams' work, no orphans, no free block of another stream to
 * borrow (1 yes, 0 no, -1 error) */
static int
miss_is_plain(HotAlloc *self, PyObject *stream)
{
    PyObject *lists[3] = {s_pending, s_deferred, s_orphans};
    for (int i = 0; i < 3; i++) {
        PyObject *v = PyDict_GetItemWithError(self->attrs, lists[i]);
        if (v == NULL || !PyList_Check(v) || PyList_GET_SIZE(v))
            return PyErr_Occurred() ? -1 : 0;
    }
    Py_ssize_t pos = 0;
    PyObject *k, *fl;
    while (PyDict_Next(self->general, &pos, &k, &fl)) {
        if (!Py_IS_TYPE(fl, &FreeListType))
            return 0;
        if (((FreeListObject *)fl)->n == 0) /* an empty bucket is dropped at once */
            continue;
        int same = same_int(k, stream);
        if (same <= 0)
            return same;
    }
    return 1;
}

/* The exception being raised, normalized, as a new reference (cleared), or NULL */
static PyObject *
raised_exception(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    if (ev != NULL && tb != NULL)
        PyException_SetTraceback(ev, tb);
    Py_XDECREF(et);
    Py_XDECREF(tb);
    return ev;
#endif
}

/* Raise ``exc`` again (a reference from raised_exception, stolen) */
static void
restore_exception(PyObject *exc)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exc);
#else
    if (exc != NULL)
        PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), exc, PyException_GetTraceback(exc));
#endif
}

/* alloc_ptr's arguments where the hot path could not read them (a size that is no integer,
 * an unhashable stream): Pool._alloc_args raises the pool's error for them, as Pool.alloc's.
 * Where it takes them, the error being raised stays.  Always NULL. */
static PyObject *
bad_args(HotAlloc *self, PyObject *nbytes, PyObject *stream)
{
    PyObject *exc = raised_exception();
    PyObject *r = PyObject_CallMethod(self->pool, "_alloc_args", "OO", nbytes, stream);
    if (r == NULL) {
        Py_XDECREF(exc);
        return NULL;
    }
    Py_DECREF(r);
    restore_exception(exc);
    return NULL;
}

/* Pool._release_whole: the general pool's wholly free segments, except those a warm-up
 * kept, go back to the source; they are found among those that became wholly free since the
 * last miss (Pool._whole).  A segment used by several streams goes through
 * Pool._release_segment (events order its release after their work). */
static int
release_whole(HotAlloc *self, PyObject *source)
{
    PyObject *segs = PyDict_GetItemWithError(self->attrs, s_segments);
    PyObject *whole = segs == NULL ? NULL : PyDict_GetItemWithError(self->attrs, s_whole);
    if (segs == NULL || !PyDict_Check(segs) || whole == NULL || !PyDict_Check(whole)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "the pool's _segments and _whole must be dicts");
        return -1;
    }
    PyObject *found = PyList_New(0), *cands = PyDict_Values(whole);
    if (found == NULL || cands == NULL) {
        Py_XDECREF(found);
        Py_XDECREF(cands);
        return -1;
    }
    PyDict_Clear(whole); /* (what the releases below make wholly free stays for the next) */
    Py_ssize_t rest = -1; /* on an error: the first of found not released (-1: every cand) */
    for (Py_ssize_t c = 0; c < PyList_GET_SIZE(cands); c++) {
        PyObject *seg = PyList_GET_ITEM(cands, c);
        if (Py_TYPE(seg) != (PyTypeObject *)self->segment_type)
            continue;
        PyObject *b = SLOT(seg, self->xoff[S_FIRST]), *keep = SLOT(seg, self->xoff[S_KEEP]);
        if (SLOT(seg, self->xoff[S_OWNER]) != Py_None || keep != Py_False || b == NULL
            || Py_TYPE(b) != (PyTypeObject *)self->block_type)
            continue;
        if (SLOT(b, self->off[B_NEXT]) != Py_None || SLOT(b, self->off[B_FREE]) != Py_True
            || SLOT(b, self->off[B_QUICK]) != Py_False || SLOT(b, self->off[B_EVENTS]) != Py_None)
            continue;
        long long sv = as_ll(SLOT(b, self->off[B_STREAM]));
        if (sv == -1 && PyErr_Occurred())
            goto fail;
        if (sv != DEAD_STREAM && PyList_Append(found, b) < 0)
            goto fail;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(found); i++) {
        PyObject *b = PyList_GET_ITEM(found, i), *seg = SLOT(b, self->off[B_SEG]);
        rest = i + 1; /* (an error at i: the ones after it stay candidates) */
        /* checked again: Python code run by an earlier release (a finalizer) may have used
         * the pool since, as Pool._release_whole checks each segment in turn */
        if (SLOT(b, self->off[B_NEXT]) != Py_None || SLOT(b, self->off[B_FREE]) != Py_True
            || SLOT(b, self->off[B_QUICK]) != Py_False || SLOT(b, self->off[B_EVENTS]) != Py_None
            || SLOT(seg, self->xoff[S_FIRST]) != b)
            continue;
        PyObject *held = PyDict_GetItemWithError(segs, SLOT(seg, self->xoff[S_PTR]));
        if (held != seg) { /* released already (a stale candidate) */
            if (PyErr_Occurred())
                goto fail;
            continue;
        }
        PyObject *stream = SLOT(b, self->off[B_STREAM]), *streams = SLOT(seg, self->xoff[S_STREAMS]);
        PyObject *fl = get_list(self, Py_None, stream), *r;
        if (fl == NULL)
            goto fail;
        if (streams == NULL || !PyAnySet_Check(streams) || PySet_GET_SIZE(streams) != 1) {
            r = PyObject_CallFunctionObjArgs(self->release_segment, b, fl, NULL);
            Py_DECREF(fl);
            if (r == NULL)
                goto fail;
            Py_DECREF(r);
            continue;
        }
        /* strong references across the source's call (Python code may run there) */
        PyObject *ptr = Py_NewRef(SLOT(seg, self->xoff[S_PTR]));
        PyObject *nbytes = Py_NewRef(SLOT(seg, self->xoff[S_NBYTES]));
        Py_INCREF(stream);
        long long nv = as_ll(nbytes);
        int e = (nv == -1 && PyErr_Occurred()) || fl_remove(self, fl, b) < 0;
        Py_DECREF(fl);
        if (!e) {
            r = PyObject_CallMethodObjArgs(source, s_free, ptr, nbytes, stream, NULL);
            e = r == NULL || PyDict_DelItem(segs, ptr) < 0;
            Py_XDECREF(r);
            PyObject *w = e ? NULL : PyDict_GetItemWithError(whole, ptr);
            if (w == seg) /* (made a candidate again by Python code the release ran) */
                e = PyDict_DelItem(whole, ptr) < 0;
            else if (w == NULL && PyErr_Occurred())
                e = 1;
            if (!e) /* Pool._release_segment's unlink (found still holds b) */
                Py_XSETREF(SLOT(seg, self->xoff[S_FIRST]), Py_NewRef(Py_None));
        }
        Py_DECREF(stream);
        Py_DECREF(ptr);
        Py_DECREF(nbytes);
        if (e)
            goto fail;
        self->st->reserved -= nv;
        self->st->num_segment_free++;
    }
    Py_DECREF(found);
    Py_DECREF(cands);
    return 0;
fail:
    { /* the candidates not released stay candidates */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyObject *from = rest < 0 ? cands : found;
        for (Py_ssize_t j = rest < 0 ? 0 : rest; j < PyList_GET_SIZE(from); j++) {
            PyObject *x = PyList_GET_ITEM(from, j);
            PyObject *seg = rest < 0 ? x : SLOT(x, self->off[B_SEG]);
            if (Py_TYPE(seg) == (PyTypeObject *)self->segment_type
                && PyDict_SetDefault(whole, SLOT(seg, self->xoff[S_PTR]), seg) == NULL)
                PyErr_Clear();
        }
        PyErr_Restore(et, ev, tb);
    }
    Py_DECREF(found);
    Py_DECREF(cands);
    return -1;
}

/* Pool._segment_block for the general pool: the first block of a new segment from the
 * source; when the source refuses (the device, or a limit), Pool._segment_refused's retries
 * with its error */
static PyObject *
segment_block(HotAlloc *self, PyObject *source, PyObject *size_obj, long long seg_bytes,
              PyObject *stream)
{
    PyObject *nb = PyLong_FromLongLong(seg_bytes);
    if (nb == NULL)
        return NULL;
    PyObject *ptr = PyObject_CallMethodObjArgs(source, s_alloc, nb, stream, NULL);
    if (ptr == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_MemoryError)) {
            Py_DECREF(nb);
            return NULL;
        }
        PyObject *exc = raised_exception();
        PyObject *b = exc == NULL ? NULL
            : PyObject_CallFunctionObjArgs(self->segment_refused, size_obj, stream, Py_None,
                                           nb, exc, NULL);
        Py_XDECREF(exc);
        Py_DECREF(nb);
        return b;
    }
    long long pv = as_ll(ptr);
    PyObject *warming = PyDict_GetItemWithError(self->attrs, s_warming);
    PyObject *streams = NULL, *seg = NULL, *b = NULL;
    PyTypeObject *t = (PyTypeObject *)self->segment_type;
    if ((pv == -1 && PyErr_Occurred()) || (warming == NULL && PyErr_Occurred())
        || (streams = PySet_New(NULL)) == NULL || PySet_Add(streams, stream) < 0
        || (seg = t->tp_alloc(t, 0)) == NULL)
        goto fail;
    SLOT(seg, self->xoff[S_PTR]) = Py_NewRef(ptr);
    SLOT(seg, self->xoff[S_NBYTES]) = Py_NewRef(nb);
    SLOT(seg, self->xoff[S_STREAM]) = Py_NewRef(stream);
    SLOT(seg, self->xoff[S_OWNER]) = Py_NewRef(Py_None);
    SLOT(seg, self->xoff[S_KEEP]) = Py_NewRef(warming == Py_True ? Py_True : Py_False);
    SLOT(seg, self->xoff[S_STREAMS]) = Py_NewRef(streams);
    if ((b = new_block(self, pv, seg_bytes, seg, stream)) == NULL)
        goto fail;
    SLOT(seg, self->xoff[S_FIRST]) = Py_NewRef(b);
    PyObject *segs = PyDict_GetItemWithError(self->attrs, s_segments);
    if (segs == NULL || !PyDict_Check(segs)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "the pool's _segments must be a dict");
        goto fail;
    }
    if (PyDict_SetItem(segs, ptr, seg) < 0)
        goto fail;
    PoolState *st = self->st;
    st->reserved += seg_bytes;
    if (st->reserved > st->peak_reserved)
        st->peak_reserved = st->reserved;
    st->num_segment_alloc++;
    Py_DECREF(streams);
    Py_DECREF(seg);
    Py_DECREF(ptr);
    Py_DECREF(nb);
    return b;
fail:
    Py_XDECREF(b);
    Py_XDECREF(seg);
    Py_XDECREF(streams);
    { /* the segment the source gave back to it, keeping this error */
        PyObject *exc = raised_exception();
        PyObject *r = PyObject_CallMethodObjArgs(source, s_free, ptr, nb, stream, NULL);
        if (r == NULL)
            PyErr_WriteUnraisable(source);
        Py_XDECREF(r);
        restore_exception(exc);
    }
    Py_DECREF(ptr);
    Py_DECREF(nb);
    return NULL;
}

/* Pool._uncount_miss: a miss on ``size_obj`` that raised served nothing, so it is not
 * counted (num_alloc, num_free); the exception being raised stays */
static void
uncount_miss(PyObject *misses, PyObject *size_obj)
{
    PyObject *exc = raised_exception();
    PyObject *n = PyDict_GetItemWithError(misses, size_obj);
    long long nv = n == NULL ? 0 : as_ll(n);
    if (n != NULL && !(nv == -1 && PyErr_Occurred())) {
        if (nv > 1) {
            PyObject *m = PyLong_FromLongLong(nv - 1);
            if (m != NULL) {
                PyDict_SetItem(misses, size_obj, m);
                Py_DECREF(m);
            }
        }
        else
            PyDict_DelItem(misses, size_obj);
    }
    if (PyErr_Occurred())
        PyErr_WriteUnraisable(misses);
    restore_exception(exc);
}

/* Pool._alloc_slow for the general pool: when its first steps have nothing to do, count the
 * miss, release the free segments (a backend with cheap release), take a new segment;
 * otherwise the Python method.  ``cheap`` and ``granule``: the backend's policy as
 * alloc_general read it (cheap -1: not read yet).  A new reference to the segment's first
 * block. */
static PyObject *
alloc_slow(HotAlloc *self, long long size, PyObject *size_obj, PyObject *stream,
           long long most, int cheap, long long granule)
{
    int plain = miss_is_plain(self, stream);
    if (plain < 0)
        return NULL;
    if (!plain) {
        PyObject *most_obj = most < 0 ? Py_NewRef(Py_None) : PyLong_FromLongLong(most);
        if (most_obj == NULL)
            return NULL;
        PyObject *args[4] = {size_obj, stream, Py_None, most_obj};
        PyObject *b = PyObject_Vectorcall(self->alloc_slow, args, 4, NULL);
        Py_DECREF(most_obj);
        if (b != NULL && Py_TYPE(b) != (PyTypeObject *)self->block_type) {
            PyErr_Format(PyExc_TypeError, "Pool._alloc_slow gave a %R", Py_TYPE(b));
            Py_CLEAR(b);
        }
        return b;
    }
    /* what the miss needs, looked up before it is counted: a miss that raises serves nothing */
    if (cheap < 0 && backend_policy(self, &cheap, &granule) < 0)
        return NULL;
    PyObject *misses = PyDict_GetItemWithError(self->attrs, s_misses);
    if (misses == NULL || !PyDict_Check(misses)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "the pool's misses must be a dict");
        return NULL;
    }
    PyObject *source = PyDict_GetItemWithError(self->attrs, s_source), *b = NULL;
    if (source == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_AttributeError, s_source);
        return NULL;
    }
    Py_INCREF(source);
    PyObject *n = PyDict_GetItemWithError(misses, size_obj);
    long long nv = n == NULL ? 0 : as_ll(n);
    if ((n == NULL && PyErr_Occurred()) || (nv == -1 && PyErr_Occurred())
        || (n = PyLong_FromLongLong(nv + 1)) == NULL) {
        Py_DECREF(source);
        return NULL;
    }
    int e = PyDict_SetItem(misses, size_obj, n);
    Py_DECREF(n);
    if (e < 0) {
        Py_DECREF(source);
        return NULL;
    }
    long long seg_bytes = segment_bytes(size, granule); /* before the release, as in Python */
    Py_INCREF(misses);
    if (!cheap || release_whole(self, source) == 0)
        b = segment_block(self, source, size_obj, seg_bytes, stream);
    Py_DECREF(source);
    if (b != NULL && Py_TYPE(b) != (PyTypeObject *)self->block_type) {
        PyErr_Format(PyExc_TypeError, "Pool._segment_refused gave a %R", Py_TYPE(b));
        Py_CLEAR(b);
    }
    if (b == NULL)
        uncount_miss(misses, size_obj);
    Py_DECREF(misses);
    return b;
}

/* Pool._alloc_locked for the general pool: a new reference to the lent block */
static PyObject *
alloc_general(HotAlloc *self, long long size, PyObject *nbytes_obj, long long nbytes,
              PyObject *stream)
{
    if (flush_quick(self) < 0)
        return NULL;
    PyObject *b = NULL, *fl = PyDict_GetItemWithError(self->general, stream);
    if (fl == NULL && PyErr_Occurred())
        return NULL;
    Py_XINCREF(fl);
    long long most = -1, granule = 0;
    int cheap = -1; /* the backend's policy: read here for a large request, else on a miss */
    if (size >= SMALL) {
        if (backend_policy(self, &cheap, &granule) < 0) {
            Py_XDECREF(fl);
            return NULL;
        }
        if (cheap) { /* at most twice the request, or the segment a miss would make for it */
            long long seg = segment_bytes(size, granule);
            most = size > LLONG_MAX / LARGE_SPLIT_MAX ? LLONG_MAX : size * LARGE_SPLIT_MAX;
            if (seg > most)
                most = seg;
        }
    }
    if (fl != NULL) {
        int r = fl_pop_fit(self, fl, size, most, &b);
        Py_DECREF(fl);
        if (r < 0)
            return NULL;
    }
    PyObject *size_obj = PyLong_FromLongLong(size);
    if (size_obj == NULL) {
        Py_XDECREF(b);
        return NULL;
    }
    if (b == NULL)
        b = alloc_slow(self, size, size_obj, stream, most, cheap, granule);
    else
        self->st->hits[class_index(size)]++;
    Py_DECREF(size_obj);
    if (b != NULL && take(self, b, size, nbytes_obj, nbytes) < 0)
        Py_CLEAR(b);
    return b;
}

/* Pool._alloc_miss where the general path applies (else the Python method): a new
 * reference to the pointer */
static PyObject *
alloc_miss(HotAlloc *self, long long size, PyObject *nbytes_obj, long long nbytes,
           PyObject *stream)
{
    PyObject *size_obj, *r;
    /* negative, or past max_request: Pool._alloc_miss refuses it */
    if (self->segment_type == NULL
        || (unsigned long long)nbytes > (unsigned long long)self->st->max_request)
        goto python;
    /* arguments to check or convert (a bool, a NumPy integer, a stream that is no int):
     * Pool._alloc_miss names the rule they break, or takes them as the ints they are */
    if (!PyLong_CheckExact(nbytes_obj) || !PyLong_CheckExact(stream))
        goto python;
    if (self->st->slow) /* a capture, a recording, a destroyed stream */
        goto python;
    /* a destroyed stream is queued before _slow is set (a finalizer, without the lock) */
    PyObject *gone = PyDict_GetItemWithError(self->attrs, s_gone);
    if (gone == NULL || !PyList_Check(gone) || PyList_GET_SIZE(gone))
        goto python;
    int over;
    long long sv = PyLong_AsLongLongAndOverflow(stream, &over);
    if (sv == -1 && PyErr_Occurred())
        return NULL;
    if (over || sv < 0) /* no stream handle (-1 marks a destroyed stream's blocks) */
        goto python;
    if (sv > 2) { /* a stream met for the first time: the CuPy glue watches its life */
        PyObject *watched = PyDict_GetItemWithError(self->attrs, s_watched);
        PyObject *hook = PyDict_GetItemWithError(self->attrs, s_on_new_stream);
        if (watched == NULL || hook == NULL || !PyAnySet_Check(watched))
            goto python;
        int known = PySet_Contains(watched, stream);
        if (known < 0)
            return NULL;
        if (!known && hook != Py_None)
            goto python;
    }
    self->st->busy = 1;
    PyObject *b = alloc_general(self, size, nbytes_obj, nbytes, stream);
    self->st->busy = 0;
    if (b == NULL)
        return NULL;
    PyObject *ptr = Py_NewRef(SLOT(b, self->off[B_PTR]));
    int e = PyDict_SetItem(self->live, ptr, b);
    Py_DECREF(b);
    if (e < 0) {
        Py_DECREF(ptr);
        return NULL;
    }
    if (PyDict_GET_SIZE(self->freed)) { /* freed by finalizers meanwhile */
        r = PyObject_CallNoArgs(self->drain);
        if (r == NULL) {
            Py_DECREF(ptr);
            return NULL;
        }
        Py_DECREF(r);
    }
    return ptr;
python:
    if ((size_obj = PyLong_FromLongLong(size)) == NULL)
        return NULL;
    PyObject *args[3] = {size_obj, nbytes_obj, stream};
    r = PyObject_Vectorcall(self->miss, args, 3, NULL);
    Py_DECREF(size_obj);
    return r;
}

static PyObject *
alloc_locked(HotAlloc *self, PyObject *nbytes_obj, long long nbytes, PyObject *stream)
{
    if (PyDict_GET_SIZE(self->freed)) {
        if (!self->st->busy) {
            int slow = self->st->slow;
            PyObject *again = NULL;
            while (PyDict_GET_SIZE(self->freed)) {
                if (drain_one(self, slow, nbytes, stream, &again) < 0) {
                    Py_XDECREF(again);
                    return NULL;
                }
            }
            if (again != NULL)
                return again;
        }
    }
    /* a negative request, or one whose rounding would wrap around (one unsigned compare):
     * to Pool._alloc_miss, unrounded, which refuses it */
    if ((unsigned long long)nbytes > (unsigned long long)self->st->max_request)
        return alloc_miss(self, nbytes, nbytes_obj, nbytes, stream);
    long long size;
    if (nbytes < SMALL)
        size = nbytes > 0 ? ((nbytes + 511) >> 9) << 9 : 512;
    else
        size = (nbytes + LARGE_ROUND - 1) & ~(long long)(LARGE_ROUND - 1);
    if (!self->st->slow) {
        PyObject *hit = quick_hit(self, nbytes_obj, nbytes, size, stream);
        if (hit != Py_None)
            return hit; /* a pointer, or NULL */
    }
    return alloc_miss(self, size, nbytes_obj, nbytes, stream);
}

/* alloc_locked under the pool's lock; steals stream */
static PyObject *
alloc_taking_lock(HotAlloc *self, PyObject *nbytes_obj, long long nbytes, PyObject *stream)
{
    lock_take(self->lock);
    PyObject *result = alloc_locked(self, nbytes_obj, nbytes, stream);
    Py_DECREF(stream);
    if (lock_give(self->lock) < 0) { /* only if the miss path released it: a bug */
        Py_XDECREF(result);
        return NULL;
    }
    return result;
}

static PyObject *
hot_call(HotAlloc *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (PyVectorcall_NARGS(nargsf) != 2 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "alloc(nbytes, stream_or_device_id) takes 2 "
                                         "positional arguments");
        return NULL;
    }
    int over;
    long long nbytes = PyLong_AsLongLongAndOverflow(args[0], &over);
    if (nbytes == -1 && PyErr_Occurred()) /* no integer: the pool's error (alloc_ptr's) */
        return self->get_stream == NULL ? bad_args(self, args[0], args[1]) : NULL;
    if (over) /* past 64 bits: past max_request too, so Pool._alloc_miss refuses args[0] */
        nbytes = over > 0 ? LLONG_MAX : LLONG_MIN;
    PyObject *stream;
    if (self->get_stream != NULL) { /* CuPy's callback: args[1] is the device id */
        intptr_t s = self->get_stream();
        if (s == -1 && PyErr_Occurred())
            return NULL;
        if ((stream = PyLong_FromSsize_t((Py_ssize_t)s)) == NULL)
            return NULL;
    }
    else
        stream = Py_NewRef(args[1]);
    return alloc_taking_lock(self, args[0], nbytes, stream);
}

static int
hot_traverse(HotAlloc *self, visitproc visit, void *arg)
{
    Py_VISIT(self->pool);
    Py_VISIT(self->attrs);
    Py_VISIT(self->quick);
    Py_VISIT(self->live);
    Py_VISIT(self->freed);
    Py_VISIT(self->block_type);
    Py_VISIT(self->owner);
    Py_VISIT(self->popitem);
    Py_VISIT(self->free_other);
    Py_VISIT(self->miss);
    Py_VISIT(self->lock);
    Py_VISIT(self->st);
    Py_VISIT(self->segment_type);
    Py_VISIT(self->freelist_type);
    Py_VISIT(self->lists);
    Py_VISIT(self->general);
    Py_VISIT(self->alloc_slow);
    Py_VISIT(self->new_list);
    Py_VISIT(self->drain);
    Py_VISIT(self->segment_refused);
    Py_VISIT(self->release_segment);
    return 0;
}

static int
hot_clear(HotAlloc *self)
{
    Py_CLEAR(self->pool);
    Py_CLEAR(self->attrs);
    Py_CLEAR(self->quick);
    Py_CLEAR(self->live);
    Py_CLEAR(self->freed);
    Py_CLEAR(self->block_type);
    Py_CLEAR(self->owner);
    Py_CLEAR(self->popitem);
    Py_CLEAR(self->free_other);
    Py_CLEAR(self->miss);
    Py_CLEAR(self->lock);
    Py_CLEAR(self->st);
    Py_CLEAR(self->segment_type);
    Py_CLEAR(self->freelist_type);
    Py_CLEAR(self->lists);
    Py_CLEAR(self->general);
    Py_CLEAR(self->alloc_slow);
    Py_CLEAR(self->new_list);
    Py_CLEAR(self->drain);
    Py_CLEAR(self->segment_refused);
    Py_CLEAR(self->release_segment);
    return 0;
}

static void
hot_dealloc(HotAlloc *self)
{
    PyObject_GC_UnTrack(self);
    hot_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* the offset of ``type``'s __slots__ entry ``name`` (-1 with an exception otherwise) */
static Py_ssize_t
slot_offset(PyObject *type, const char *name)
{
    PyObject *d = PyObject_GetAttrString(type, name);
    if (d == NULL && !PyErr_ExceptionMatches(PyExc_AttributeError))
        return -1;
    PyErr_Clear();
    Py_ssize_t off = -1;
    if (d != NULL && Py_IS_TYPE(d, &PyMemberDescr_Type)
        && ((PyMemberDescrObject *)d)->d_member->type == MEMBER_OBJECT_EX)
        off = ((PyMemberDescrObject *)d)->d_member->offset;
    else
        PyErr_Format(PyExc_TypeError, "HotAlloc: %R.%s must be a __slots__ entry", type, name);
    Py_XDECREF(d);
    return off;
}

static PyObject *
hot_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"pool", "block_type", "stream_fn", "segment_type", "freelist_type",
                             NULL};
    PyObject *pool, *block_type, *fn = Py_None, *seg_type = Py_None, *fl_type = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!|O$OO:HotAlloc", kwlist, &pool,
                                     &PyType_Type, &block_type, &fn, &seg_type, &fl_type))
        return NULL;
    if ((seg_type == Py_None) != (fl_type == Py_None) || (seg_type != Py_None
            && (!PyType_Check(seg_type) || !PyType_Check(fl_type)))) {
        PyErr_SetString(PyExc_TypeError, "HotAlloc: segment_type and freelist_type are two "
                                         "types, or both None (the general path is Python's)");
        return NULL;
    }
    stream_fn get_stream = NULL;
    if (fn != Py_None) {
        if (!PyCapsule_CheckExact(fn)) {
            PyErr_Format(PyExc_TypeError, "HotAlloc: stream_fn must be None or a capsule of "
                         "intptr_t (*)(void), got %R", fn);
            return NULL;
        }
        get_stream = (stream_fn)PyCapsule_GetPointer(fn, PyCapsule_GetName(fn));
        if (get_stream == NULL)
            return NULL;
    }
    HotAlloc *self = (HotAlloc *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = (vectorcallfunc)hot_call;
    self->get_stream = get_stream;
    self->pool = Py_NewRef(pool);
    self->block_type = Py_NewRef(block_type);
    self->owner = Py_NewRef(fn);
    for (int i = 0; i < B_N; i++)
        if ((self->off[i] = slot_offset(block_type, block_slots[i])) < 0)
            goto fail;
    PyObject *lock;
    if ((self->attrs = PyObject_GenericGetDict(pool, NULL)) == NULL
        || (self->quick = PyObject_GetAttrString(pool, "_quick")) == NULL
        || (self->live = PyObject_GetAttrString(pool, "_live")) == NULL
        || (self->freed = PyObject_GetAttrString(pool, "_freed")) == NULL
        || (self->free_other = PyObject_GetAttrString(pool, "_free_locked")) == NULL
        || (self->miss = PyObject_GetAttrString(pool, "_alloc_miss")) == NULL
        || (self->popitem = PyObject_GetAttrString(self->freed, "popitem")) == NULL
        || (lock = PyObject_GetAttrString(pool, "_lock")) == NULL)
        goto fail;
    self->lock = (PoolLock *)lock;
    PyObject *st = PyObject_GetAttrString(pool, "_state");
    if (st == NULL)
        goto fail;
    self->st = (PoolState *)st;
    if (!Py_IS_TYPE(st, &PoolStateType)) {
        PyErr_Format(PyExc_TypeError, "HotAlloc: the pool's _state must be a PoolState, got %R",
                     st);
        goto fail;
    }
    if (seg_type != Py_None && fl_type == (PyObject *)&FreeListType) {
        /* the general path works on the compiled free lists (a pool of _blocks.FreeList
         * runs Python's) */
        self->segment_type = Py_NewRef(seg_type);
        self->freelist_type = Py_NewRef(fl_type);
        for (int i = 0; i < X_N; i++)
            if ((self->xoff[i] = slot_offset(seg_type, segment_slots[i])) < 0)
                goto fail;
        if ((self->lists = PyObject_GetAttrString(pool, "_lists")) == NULL
            || (self->general = PyObject_GetAttrString(pool, "_general")) == NULL
            || (self->alloc_slow = PyObject_GetAttrString(pool, "_alloc_slow")) == NULL
            || (self->new_list = PyObject_GetAttrString(pool, "_list")) == NULL
            || (self->drain = PyObject_GetAttrString(pool, "_drain")) == NULL
            || (self->segment_refused = PyObject_GetAttrString(pool, "_segment_refused")) == NULL
            || (self->release_segment = PyObject_GetAttrString(pool, "_release_segment")) == NULL)
            goto fail;
        if (!PyDict_Check(self->lists) || !PyDict_Check(self->general)) {
            PyErr_SetString(PyExc_TypeError, "HotAlloc: the pool's _lists must be a dict");
            goto fail;
        }
    }
    if (!Py_IS_TYPE(lock, &PoolLockType)) {
        PyErr_Format(PyExc_TypeError, "HotAlloc: the pool's _lock must be a PoolLock, got %R",
                     lock);
        goto fail;
    }
    if (!PyDict_Check(self->attrs) || !PyDict_Check(self->quick) || !PyDict_Check(self->live)
        || !PyDict_Check(self->freed)) {
        PyErr_SetString(PyExc_TypeError, "HotAlloc: the pool's __dict__, _quick, _live and "
                                         "_freed must be dicts");
        goto fail;
    }
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

static PyTypeObject HotAllocType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cuflow.memory._hotpath.HotAlloc",
    .tp_doc = "alloc(nbytes, stream_or_device_id) -> pointer: Pool._make_alloc's closure in C",
    .tp_basicsize = sizeof(HotAlloc),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(HotAlloc, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = hot_new,
    .tp_dealloc = (destructor)hot_dealloc,
    .tp_traverse = (traverseproc)hot_traverse,
    .tp_clear = (inquiry)hot_clear,
};

/* ----------------------------------------------------------- CuPy's allocator hook */

/* Give a lent block back: queue its pointer ``key`` in the pool's freed dict, keeping any
 * exception being raised (it is fetched, not normalized: this runs in deallocators).  A
 * failure is reported with key, never with a deallocating object (whose count is 0: a new
 * reference would free it a second time). */
static void
give_back(PyObject *freed, PyObject *key)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc = PyErr_GetRaisedException();
#else
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
#endif
    if (PyDict_SetItem(freed, key, Py_None) < 0)
        PyErr_WriteUnraisable(key);
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exc);
#else
    PyErr_Restore(et, ev, tb);
#endif
}

/* Lent(freed, ptr): the owner of one lent block, kept by the CuPy memory object of an
 * array; its deallocation queues ptr in the pool's freed dict (Pool._freed).  It is not
 * tracked by the garbage collector, so a collection of a reference cycle never clears it
 * before it runs: the free cannot be lost.  (CuPy's PythonFunctionAllocatorMemory keeps
 * its free callback in a collected field, which a collection may clear to None first;
 * tests/test_faults.py, where exceptions' tracebacks hold arrays in cycles.) */
typedef struct {
    PyObject_HEAD
    PyObject *freed;
    PyObject *ptr;
} Lent;

static void
lent_dealloc(Lent *self)
{
    give_back(self->freed, self->ptr);
    Py_DECREF(self->freed);
    Py_DECREF(self->ptr);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
lent_repr(Lent *self)
{
    return PyUnicode_FromFormat("<cuflow pool block %R>", self->ptr);
}

static PyTypeObject LentType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cuflow.memory._hotpath.Lent",
    .tp_doc = "The owner of one block lent to CuPy: its deallocation gives the block back",
    .tp_basicsize = sizeof(Lent),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)lent_dealloc,
    .tp_repr = (reprfunc)lent_repr,
};

static PyObject *
lent_new(PyObject *freed, PyObject *ptr)
{
    Lent *l = PyObject_New(Lent, &LentType);
    if (l == NULL)
        return NULL;
    l->freed = Py_NewRef(freed);
    l->ptr = Py_NewRef(ptr);
    return (PyObject *)l;
}

/* PoolMemory: CuPy's memory object for a block of the pool, in C.  A subclass of CuPy's
 * BaseMemory (Cython, ``cupy/cuda/memory.pxd``: the C fields ptr, size and device_id, no
 * garbage-collector support) with two fields of its own: the pool's freed dict and the
 * block's pointer as a Python int.  Its deallocation queues the pointer there, as Lent's
 * does, so one object per allocation does what UnownedMemory and its Lent owner did: no
 * owner object, no argument parsing of a Cython __init__, nothing for the garbage collector
 * to track (bench/test_bench_memory.py::test_empty_hit_latency).
 *
 * It writes BaseMemory's and MemoryPointer's fields at their offsets.  Those come from the
 * pxd's declarations, and memory_type() finds and checks them on probe objects (each field's
 * value found once, where it is expected); where they are not found, the hook builds
 * objects by calling their types, as it does for any other memory type. */
typedef struct {
    PyObject *freed; /* NULL: nothing to give back (a 0-byte allocation) */
    PyObject *key;
} PoolMemoryFields;

static Py_ssize_t off_mem_ptr = -1, off_mem_size, off_mem_dev, off_extra;
static Py_ssize_t off_mp_ptr, off_mp_dev, off_mp_mem;
static PyTypeObject *pointer_type; /* the MemoryPointer type whose layout was checked */
static PyObject *empty_tuple;


static void
pm_dealloc(PyObject *self)
{
    PoolMemoryFields *x = &FIELD(self, off_extra, PoolMemoryFields);
    if (x->freed != NULL)
        give_back(x->freed, x->key);
    Py_CLEAR(x->freed);
    Py_CLEAR(x->key);
    Py_TYPE(self)->tp_base->tp_dealloc(self);
}

static PyObject *
pm_repr(PyObject *self)
{
    char ptr[24]; /* (PyUnicode_FromFormat has %zx from Python 3.12 on) */
    snprintf(ptr, sizeof ptr, "0x%zx", (size_t)FIELD(self, off_mem_ptr, intptr_t));
    return PyUnicode_FromFormat("<cuflow pool block %s, %zu bytes, device %d>", ptr,
                                FIELD(self, off_mem_size, size_t), FIELD(self, off_mem_dev, int));
}

static PyTypeObject PoolMemoryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cuflow.memory.PoolMemory",
    .tp_doc = "A block of cuflow's memory pool (given back when the last array using it goes)",
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, /* pool_pointer only */
    .tp_dealloc = pm_dealloc,
    .tp_repr = pm_repr,
};

/* memory_type(base_memory, memory_pointer): PoolMemory, built over CuPy's BaseMemory, where
 * the fields of both types were found (see PoolMemory); None otherwise. */
static PyObject *
memory_type(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyType_Check(args[0]) || !PyType_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "memory_type(base_memory, memory_pointer) takes two types");
        return NULL;
    }
    PyTypeObject *base = (PyTypeObject *)args[0], *mpt = (PyTypeObject *)args[1];
    if (PoolMemoryType.tp_base != NULL) /* built: for these types only */
        return Py_NewRef(PoolMemoryType.tp_base == base && pointer_type == mpt
                             ? (PyObject *)&PoolMemoryType : Py_None);
    if (!(base->tp_flags & Py_TPFLAGS_BASETYPE) || base->tp_flags & Py_TPFLAGS_HAVE_GC
        || base->tp_flags & Py_TPFLAGS_HEAPTYPE /* (CuPy built with type specs) */
        || base->tp_itemsize != 0 || mpt->tp_itemsize != 0 || base->tp_dealloc == NULL
        || mpt->tp_new == NULL || base->tp_new == NULL)
        Py_RETURN_NONE;
    /* probe values no other field holds */
    const intptr_t ptr = (intptr_t)0x5eed5eed0000LL, shift = 0x40;
    const size_t size = (size_t)0x123456789aLL;
    const int dev = 0x5a5a1234;
    Py_ssize_t fm = -1, fs = -1, fd = -1, gp = -1, gd = -1, gm = -1;
    PyObject *m = PyObject_CallNoArgs((PyObject *)base), *p = NULL;
    if (m == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *vp = PyLong_FromSsize_t(ptr), *vs = PyLong_FromSize_t(size), *vd = PyLong_FromLong(dev);
    if (vp != NULL && vs != NULL && vd != NULL && PyObject_SetAttrString(m, "ptr", vp) == 0
        && PyObject_SetAttrString(m, "size", vs) == 0
        && PyObject_SetAttrString(m, "device_id", vd) == 0) {
        fm = find_field(m, base->tp_basicsize, &ptr, sizeof ptr);
        fs = find_field(m, base->tp_basicsize, &size, sizeof size);
        fd = find_field(m, base->tp_basicsize, &dev, sizeof dev);
        p = PyObject_CallFunction((PyObject *)mpt, "On", m, (Py_ssize_t)shift);
    }
    if (p != NULL) {
        const intptr_t pv = ptr + shift;
        gp = find_field(p, mpt->tp_basicsize, &pv, sizeof pv);
        gd = find_field(p, mpt->tp_basicsize, &dev, sizeof dev);
        gm = find_field(p, mpt->tp_basicsize, &m, sizeof m);
    }
    Py_XDECREF(p);
    Py_XDECREF(vp);
    Py_XDECREF(vs);
    Py_XDECREF(vd);
    Py_DECREF(m);
    PyErr_Clear(); /* a type without these attributes is simply not used */
    if (fm < 0 || fs < 0 || fd < 0 || gp < 0 || gd < 0 || gm < 0)
        Py_RETURN_NONE;
    off_mem_ptr = fm, off_mem_size = fs, off_mem_dev = fd;
    off_mp_ptr = gp, off_mp_dev = gd, off_mp_mem = gm;
    off_extra = (base->tp_basicsize + sizeof(void *) - 1) / sizeof(void *) * sizeof(void *);
    PoolMemoryType.tp_basicsize = off_extra + sizeof(PoolMemoryFields);
    PoolMemoryType.tp_base = (PyTypeObject *)Py_NewRef(base);
    if (PyType_Ready(&PoolMemoryType) < 0) {
        Py_CLEAR(PoolMemoryType.tp_base);
        return NULL;
    }
    pointer_type = (PyTypeObject *)Py_NewRef(mpt);
    return Py_NewRef((PyObject *)&PoolMemoryType);
}

/* MemoryPointer(PoolMemory(ptr, nbytes, device), 0) whose memory queues key in freed when
 * it goes (freed NULL: nothing to give back).  Steals key; on failure the block is given
 * back all the same. */
static PyObject *
pool_pointer(PyObject *key, size_t nbytes, int dev, PyObject *freed)
{
    intptr_t ptr = (intptr_t)PyLong_AsVoidPtr(key);
    PyObject *m = ptr == 0 && PyErr_Occurred()
                      ? NULL : PoolMemoryType.tp_base->tp_new(&PoolMemoryType, empty_tuple, NULL);
    if (m == NULL) {
        if (freed != NULL)
            give_back(freed, key);
        Py_DECREF(key);
        return NULL;
    }
    FIELD(m, off_mem_ptr, intptr_t) = ptr;
    FIELD(m, off_mem_size, size_t) = nbytes;
    FIELD(m, off_mem_dev, int) = dev;
    PoolMemoryFields *x = &FIELD(m, off_extra, PoolMemoryFields);
    x->key = key;
    x->freed = Py_XNewRef(freed); /* from here, m gives the block back when it goes */
    PyObject *p = pointer_type->tp_new(pointer_type, empty_tuple, NULL);
    if (p == NULL) {
        Py_DECREF(m);
        return NULL;
    }
    FIELD(p, off_mp_ptr, intptr_t) = ptr;
    FIELD(p, off_mp_dev, int) = dev;
    PyObject *old = FIELD(p, off_mp_mem, PyObject *);
    FIELD(p, off_mp_mem, PyObject *) = m; /* p takes m's reference */
    Py_XDECREF(old);
    return p;
}

/* CupyMalloc(alloc, freed, memory_type, pointer_type, device_id): CuPy's allocator,
 * malloc(nbytes) -> MemoryPointer(memory_type(ptr, nbytes, Lent(freed, ptr), device_id), 0)
 * with ptr = alloc(nbytes, device_id) (the pool's hot path); with PoolMemory and the
 * pointer type memory_type() checked, the same objects built at their fields. */
typedef struct {
    PyObject_HEAD
    PyObject *alloc, *freed, *mem_type, *ptr_type, *dev, *zero;
    int fast, dev_v;
    vectorcallfunc vectorcall;
} CupyMalloc;

static PyObject *
cm_vectorcall(CupyMalloc *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (PyVectorcall_NARGS(nargsf) != 1 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "malloc(nbytes) takes one argument");
        return NULL;
    }
    PyObject *size = args[0], *ptr, *owner;
    int empty = PyObject_Not(size);
    if (empty < 0)
        return NULL;
    if (self->fast) {
        size_t n = empty ? 0 : PyLong_AsSize_t(size);
        if (n == (size_t)-1 && PyErr_Occurred())
            return NULL;
        if (empty) /* CuPy's 0-byte allocation: a null pointer, nothing lent */
            return pool_pointer(Py_NewRef(self->zero), 0, self->dev_v, NULL);
        PyObject *aargs[] = {size, self->dev};
        if ((ptr = PyObject_Vectorcall(self->alloc, aargs, 2, NULL)) == NULL)
            return NULL;
        return pool_pointer(ptr, n, self->dev_v, self->freed);
    }
    if (empty) { /* CuPy's 0-byte allocation: a null pointer, nothing lent */
        ptr = Py_NewRef(self->zero);
        owner = Py_NewRef(Py_None);
    }
    else {
        PyObject *aargs[] = {size, self->dev};
        ptr = PyObject_Vectorcall(self->alloc, aargs, 2, NULL);
        if (ptr == NULL)
            return NULL;
        owner = lent_new(self->freed, ptr);
        if (owner == NULL) {
            give_back(self->freed, ptr);
            Py_DECREF(ptr);
            return NULL;
        }
    }
    PyObject *margs[] = {ptr, size, owner, self->dev};
    PyObject *mem = PyObject_Vectorcall(self->mem_type, margs, 4, NULL);
    Py_DECREF(ptr);
    Py_DECREF(owner); /* the memory keeps it; on failure this gives the block back */
    if (mem == NULL)
        return NULL;
    PyObject *pargs[] = {mem, self->zero};
    PyObject *r = PyObject_Vectorcall(self->ptr_type, pargs, 2, NULL);
    Py_DECREF(mem);
    return r;
}

static PyObject *
cm_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"alloc", "freed", "memory_type", "pointer_type", "device_id", NULL};
    PyObject *alloc, *freed, *mem_type, *ptr_type, *dev;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!OOO!:CupyMalloc", kwlist, &alloc,
                                     &PyDict_Type, &freed, &mem_type, &ptr_type, &PyLong_Type,
                                     &dev))
        return NULL;
    CupyMalloc *self = (CupyMalloc *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    if ((self->zero = PyLong_FromLong(0)) == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->alloc = Py_NewRef(alloc);
    self->freed = Py_NewRef(freed);
    self->mem_type = Py_NewRef(mem_type);
    self->ptr_type = Py_NewRef(ptr_type);
    self->dev = Py_NewRef(dev);
    long d = PyLong_AsLong(dev);
    if ((d == -1 && PyErr_Occurred()) || d < INT_MIN || d > INT_MAX) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_OverflowError, "CupyMalloc: device_id out of range");
        Py_DECREF(self);
        return NULL;
    }
    self->dev_v = (int)d;
    self->fast = mem_type == (PyObject *)&PoolMemoryType;
    if (self->fast && ptr_type != (PyObject *)pointer_type) {
        PyErr_SetString(PyExc_ValueError,
                        "CupyMalloc: PoolMemory goes with the pointer type memory_type() checked");
        Py_DECREF(self);
        return NULL;
    }
    self->vectorcall = (vectorcallfunc)cm_vectorcall;
    return (PyObject *)self;
}

static int
cm_traverse(CupyMalloc *self, visitproc visit, void *arg)
{
    Py_VISIT(self->alloc);
    Py_VISIT(self->freed);
    Py_VISIT(self->mem_type);
    Py_VISIT(self->ptr_type);
    return 0;
}

static int
cm_clear(CupyMalloc *self)
{
    Py_CLEAR(self->alloc);
    Py_CLEAR(self->freed);
    Py_CLEAR(self->mem_type);
    Py_CLEAR(self->ptr_type);
    Py_CLEAR(self->dev);
    Py_CLEAR(self->zero);
    return 0;
}

static void
cm_dealloc(CupyMalloc *self)
{
    PyObject_GC_UnTrack(self);
    cm_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject CupyMallocType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cuflow.memory._hotpath.CupyMalloc",
    .tp_doc = "CupyMalloc(alloc, freed, memory_type, pointer_type, device_id): CuPy's "
              "allocator over the pool's hot path, malloc(nbytes) -> MemoryPointer",
    .tp_basicsize = sizeof(CupyMalloc),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = cm_new,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(CupyMalloc, vectorcall),
    .tp_traverse = (traverseproc)cm_traverse,
    .tp_clear = (inquiry)cm_clear,
    .tp_dealloc = (destructor)cm_dealloc,
};

/* DeviceMalloc(device_fn, lookup): CuPy's allocator with several devices, malloc(nbytes) ->
 * the current device's pool's malloc(nbytes), with no Python frame once a device was met.
 * device_fn is the address of ``int (*)(int *device)`` (the driver's cuCtxGetDevice: the
 * device of the current context, which CuPy's current device makes current); lookup(device)
 * gives a device's malloc, called once per device, and lookup(None) serves a thread with no
 * current context yet (its first allocation: CuPy's current device, in Python). */
#define DM_DEVICES 64
typedef int (*device_fn)(int *device);

typedef struct {
    PyObject_HEAD
    device_fn get_device;
    PyObject *lookup;
    PyObject *table[DM_DEVICES];
    vectorcallfunc vectorcall;
} DeviceMalloc;

static PyObject *
dm_vectorcall(DeviceMalloc *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    int dev = -1;
    PyObject *m;
    if (self->get_device(&dev) != 0 || dev < 0 || dev >= DM_DEVICES) {
        if ((m = PyObject_CallOneArg(self->lookup, Py_None)) == NULL)
            return NULL;
    }
    else if ((m = self->table[dev]) != NULL)
        Py_INCREF(m);
    else {
        PyObject *d = PyLong_FromLong(dev);
        if (d == NULL)
            return NULL;
        m = PyObject_CallOneArg(self->lookup, d);
        Py_DECREF(d);
        if (m == NULL)
            return NULL;
        Py_XSETREF(self->table[dev], Py_NewRef(m));
    }
    PyObject *r = PyObject_Vectorcall(m, args, nargsf, kwnames);
    Py_DECREF(m);
    return r;
}

static PyObject *
dm_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"device_fn", "lookup", NULL};
    unsigned long long fn;
    PyObject *lookup;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "KO:DeviceMalloc", kwlist, &fn, &lookup))
        return NULL;
    if (fn == 0 || !PyCallable_Check(lookup)) {
        PyErr_SetString(PyExc_ValueError,
                        "DeviceMalloc: device_fn must be a non-zero address and lookup a callable");
        return NULL;
    }
    DeviceMalloc *self = (DeviceMalloc *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->get_device = (device_fn)(uintptr_t)fn;
    self->lookup = Py_NewRef(lookup);
    self->vectorcall = (vectorcallfunc)dm_vectorcall;
    return (PyObject *)self;
}

static int
dm_traverse(DeviceMalloc *self, visitproc visit, void *arg)
{
    Py_VISIT(self->lookup);
    for (int i = 0; i < DM_DEVICES; i++)
        Py_VISIT(self->table[i]);
    return 0;
}

static int
dm_clear(DeviceMalloc *self)
{
    Py_CLEAR(self->lookup);
    for (int i = 0; i < DM_DEVICES; i++)
        Py_CLEAR(self->table[i]);
    return 0;
}

static void
dm_dealloc(DeviceMalloc *self)
{
    PyObject_GC_UnTrack(self);
    dm_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
dm_devices(DeviceMalloc *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *r = PyList_New(0);
    for (int i = 0; r != NULL && i < DM_DEVICES; i++)
        if (self->table[i] != NULL) {
            PyObject *d = PyLong_FromLong(i);
            if (d == NULL || PyList_Append(r, d) < 0)
                Py_CLEAR(r);
            Py_XDECREF(d);
        }
    return r;
}

static PyMethodDef dm_methods[] = {
    {"devices", (PyCFunction)dm_devices, METH_NOARGS, "The devices whose malloc was looked up."},
    {NULL, NULL, 0, NULL},
};

/* CuflowPoolAPI.malloc_on: cm_vectorcall's fast path with the stream given (_poolapi.h) */
static PyObject *
malloc_on(PyObject *hook, PyObject *size, intptr_t s)
{
    CupyMalloc *self = (CupyMalloc *)hook;
    if (!Py_IS_TYPE(hook, &CupyMallocType) || !self->fast
        || !Py_IS_TYPE(self->alloc, &HotAllocType) || ((HotAlloc *)self->alloc)->get_stream == NULL)
        Py_RETURN_NONE;
    int over;
    long long nbytes = PyLong_AsLongLongAndOverflow(size, &over);
    if (nbytes == -1 && PyErr_Occurred())
        return NULL;
    if (over || nbytes <= 0) /* (an empty request, and those the pool refuses: the hook's) */
        Py_RETURN_NONE;
    PyObject *stream = PyLong_FromSsize_t((Py_ssize_t)s);
    if (stream == NULL)
        return NULL;
    PyObject *ptr = alloc_taking_lock((HotAlloc *)self->alloc, size, nbytes, stream);
    return ptr == NULL ? NULL : pool_pointer(ptr, (size_t)nbytes, self->dev_v, self->freed);
}

static CuflowPoolAPI pool_api = {&CupyMallocType, malloc_on};

static PyTypeObject DeviceMallocType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cuflow.memory._hotpath.DeviceMalloc",
    .tp_doc = "DeviceMalloc(device_fn, lookup): CuPy's allocator with several devices, "
              "malloc(nbytes) -> the current device's pool's malloc(nbytes)",
    .tp_basicsize = sizeof(DeviceMalloc),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = dm_new,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(DeviceMalloc, vectorcall),
    .tp_traverse = (traverseproc)dm_traverse,
    .tp_clear = (inquiry)dm_clear,
    .tp_dealloc = (destructor)dm_dealloc,
    .tp_methods = dm_methods,
};

static PyMethodDef module_functions[] = {
    {"memory_type", (PyCFunction)(void (*)(void))memory_type, METH_FASTCALL,
     "memory_type(base_memory, memory_pointer) -> PoolMemory over CuPy's BaseMemory, or None "
     "where the two types' fields were not found"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_hotpath",
    "The memory pool's allocation hot path in C (HotAlloc), its lock (PoolLock) and CuPy's "
    "allocator hook (CupyMalloc, PoolMemory; DeviceMalloc with several devices).", -1,
    module_functions,
};

int add_pageheap(PyObject *m); /* _pageheap.c: expandable segments' placement */

PyMODINIT_FUNC
PyInit__hotpath(void)
{
#define INTERN(v, s) if ((v = PyUnicode_InternFromString(s)) == NULL) return NULL
    INTERN(s_gone, "_gone");
    INTERN(s_watched, "_watched");
    INTERN(s_on_new_stream, "_on_new_stream");
    INTERN(s_capturing, "_capturing");
    INTERN(s_backend, "backend");
    INTERN(s_cheap_release, "cheap_release");
    INTERN(s_segment_granularity, "segment_granularity");
    INTERN(s_segment_granularity_min, "segment_granularity_min");
    INTERN(s_recording, "_recording");
    INTERN(s_source, "_source");
    INTERN(s_pending, "_pending");
    INTERN(s_deferred, "_deferred");
    INTERN(s_orphans, "_orphans");
    INTERN(s_warming, "_warming");
    INTERN(s_misses, "misses");
    INTERN(s_segments, "_segments");
    INTERN(s_whole, "_whole");
    INTERN(s_alloc, "alloc");
    INTERN(s_free, "free");
#undef INTERN
    if ((empty_tuple = PyTuple_New(0)) == NULL)
        return NULL;
    if (PyType_Ready(&HotAllocType) < 0 || PyType_Ready(&PoolLockType) < 0
        || PyType_Ready(&PoolStateType) < 0 || PyType_Ready(&FreeListType) < 0
        || PyType_Ready(&LentType) < 0 || PyType_Ready(&CupyMallocType) < 0
        || PyType_Ready(&DeviceMallocType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "HotAlloc", (PyObject *)&HotAllocType) < 0
        || PyModule_AddObjectRef(m, "PoolLock", (PyObject *)&PoolLockType) < 0
        || PyModule_AddObjectRef(m, "PoolState", (PyObject *)&PoolStateType) < 0
        || PyModule_AddObjectRef(m, "FreeList", (PyObject *)&FreeListType) < 0
        || PyModule_AddObjectRef(m, "Lent", (PyObject *)&LentType) < 0
        || PyModule_AddObjectRef(m, "CupyMalloc", (PyObject *)&CupyMallocType) < 0
        || PyModule_AddObjectRef(m, "DeviceMalloc", (PyObject *)&DeviceMallocType) < 0
        || add_pageheap(m) < 0 /* _pageheap.c */
        /* the sizing constants, which _blocks also defines (a test checks they agree) */
        || PyModule_AddIntConstant(m, "SMALL", SMALL) < 0
        || PyModule_AddIntConstant(m, "LARGE_ROUND", LARGE_ROUND) < 0
        || PyModule_AddIntConstant(m, "MIN_SEGMENT", MIN_SEGMENT) < 0
        || PyModule_AddIntConstant(m, "SPLIT_MIN", SPLIT_MIN) < 0
        || PyModule_AddIntConstant(m, "LARGE_SPLIT_MAX", LARGE_SPLIT_MAX) < 0
        || PyModule_AddIntConstant(m, "DEAD_STREAM", DEAD_STREAM) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    PyObject *api = PyCapsule_New(&pool_api, CUFLOW_POOL_API, NULL);
    if (api == NULL || PyModule_AddObjectRef(m, "_C_API", api) < 0) {
        Py_XDECREF(api);
        Py_DECREF(m);
        return NULL;
    }
    Py_DECREF(api);
    return m;
}
