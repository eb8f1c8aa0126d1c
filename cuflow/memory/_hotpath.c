/* The pool's allocation hot path in C: Pool._make_alloc's Python closure, decision for
 * decision, on the same Python containers (so every other path of the pool, written in
 * Python, sees the same state).  An optional extension: without a C compiler the pool
 * runs the Python closure.
 *
 * PoolLock: the pool's reentrant lock (threading.RLock's acquire / release / with), whose
 * state the hot path reads and takes without a Python call.
 *
 * HotAlloc(pool, block_type, stream_fn=None) is a callable alloc(nbytes, arg) -> pointer:
 *   - stream_fn None: arg is the stream (Pool.alloc_ptr);
 *   - stream_fn a capsule of ``intptr_t (*)(void)`` (CuPy's
 *     cupy_backends.cuda.stream.get_current_stream_ptr): arg is CuPy's device id (the
 *     PythonFunctionAllocator callback) and the stream is the current one.
 * It holds the GIL throughout and runs no Python code on a hit: dictionary and list
 * operations on int keys, the pool's instance dictionary, and Block's slots read and
 * written at their offsets.  Anything but a hit calls the pool's Python methods.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
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

/* ------------------------------------------------------------------- HotAlloc */

typedef intptr_t (*stream_fn)(void);

/* Block's slots used here, by offset */
enum { B_PLAIN, B_REQ, B_STREAM, B_SIZE, B_PTR, B_FREE, B_QUICK, B_N };
static const char *block_slots[B_N] = {"plain", "req", "stream", "size", "ptr", "free", "quick"};

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *pool, *attrs, *quick, *live, *freed, *hits, *block_type, *owner;
    PyObject *popitem, *free_other, *miss;
    PoolLock *lock;
    Py_ssize_t off[B_N];
    stream_fn get_stream;
} HotAlloc;

static PyObject *s_busy, *s_slow, *s_requested, *s_allocated, *s_peak_requested,
    *s_peak_allocated, *s_peak_active, *s_pending_bytes;

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

/* the pool's attribute ``name`` (an instance attribute) as a C integer */
static int
get_ll(HotAlloc *self, PyObject *name, long long *out)
{
    PyObject *v = PyDict_GetItemWithError(self->attrs, name);
    if (v == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_AttributeError, name);
        return -1;
    }
    *out = PyLong_AsLongLong(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int
set_ll(HotAlloc *self, PyObject *name, long long value)
{
    PyObject *v = PyLong_FromLongLong(value);
    if (v == NULL)
        return -1;
    int r = PyDict_SetItem(self->attrs, name, v);
    Py_DECREF(v);
    return r;
}

static int
get_flag(HotAlloc *self, PyObject *name)
{
    PyObject *v = PyDict_GetItemWithError(self->attrs, name);
    if (v == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_AttributeError, name);
        return -1;
    }
    return v == Py_False ? 0 : v == Py_True ? 1 : PyObject_IsTrue(v);
}

/* pool.<name> += delta, and pool.<peak> = max(pool.<peak>, the new value) when peak */
static int
add(HotAlloc *self, PyObject *name, long long delta, PyObject *peak, long long *now)
{
    long long v, p;
    if (get_ll(self, name, &v) < 0 || set_ll(self, name, v + delta) < 0)
        return -1;
    *now = v + delta;
    if (peak != NULL) {
        if (get_ll(self, peak, &p) < 0)
            return -1;
        if (*now > p && set_ll(self, peak, *now) < 0)
            return -1;
    }
    return 0;
}

/* d[key] += 1 for a dict whose missing keys count as 0 (the pool's defaultdict(int)) */
static int
count(PyObject *d, PyObject *key)
{
    PyObject *v = PyDict_GetItemWithError(d, key);
    long long n = 0;
    if (v != NULL) {
        n = PyLong_AsLongLong(v);
        if (n == -1 && PyErr_Occurred())
            return -1;
    }
    else if (PyErr_Occurred())
        return -1;
    PyObject *nv = PyLong_FromLongLong(n + 1);
    if (nv == NULL)
        return -1;
    int r = PyDict_SetItem(d, key, nv);
    Py_DECREF(nv);
    return r;
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
    if (*again == NULL && req_v == nbytes) {
        int same = same_int(bstream, stream);
        if (same < 0)
            goto done;
        if (same) { /* it stays lent, its statistics unchanged; the other frees go on */
            if (count(self->hits, size) < 0)
                goto done;
            *again = Py_NewRef(ptr);
            r = 0;
            goto done;
        }
    }
    long long size_v = PyLong_AsLongLong(size), now;
    if ((size_v == -1 && PyErr_Occurred()) || PyDict_DelItem(self->live, ptr) < 0
        || add(self, s_requested, -req_v, NULL, &now) < 0
        || add(self, s_allocated, -size_v, NULL, &now) < 0)
        goto done;
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

/* An exact-size block freed earlier on this stream: a new reference to its pointer,
 * Py_None (borrowed) when there is none, NULL on error. */
static PyObject *
quick_hit(HotAlloc *self, long long nbytes, long long size_v, PyObject *stream)
{
    PyObject *q = PyDict_GetItemWithError(self->quick, stream);
    if (q == NULL)
        return PyErr_Occurred() ? NULL : Py_None;
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
    long long now, pending, peak;
    if (Py_TYPE(b) != (PyTypeObject *)self->block_type) {
        PyErr_Format(PyExc_TypeError, "the pool cached a %R, not a Block", Py_TYPE(b));
        goto fail;
    }
    if (PyList_SetSlice(lst, n - 1, n, NULL) < 0 || (req = PyLong_FromLongLong(nbytes)) == NULL)
        goto fail;
    set_slot(self, b, B_QUICK, Py_False);
    set_slot(self, b, B_FREE, Py_False);
    set_slot(self, b, B_REQ, req);
    if (count(self->hits, size) < 0
        || add(self, s_requested, nbytes, s_peak_requested, &now) < 0)
        goto fail;
    if (get_ll(self, s_peak_allocated, &peak) < 0
        || add(self, s_allocated, size_v, NULL, &now) < 0)
        goto fail;
    if (now > peak) { /* the peaks of allocated and active bytes */
        if (set_ll(self, s_peak_allocated, now) < 0 || get_ll(self, s_pending_bytes, &pending) < 0
            || get_ll(self, s_peak_active, &peak) < 0
            || (now + pending > peak && set_ll(self, s_peak_active, now + pending) < 0))
            goto fail;
    }
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

static PyObject *
alloc_locked(HotAlloc *self, PyObject *nbytes_obj, long long nbytes, PyObject *stream)
{
    if (PyDict_GET_SIZE(self->freed)) {
        int busy = get_flag(self, s_busy);
        if (busy < 0)
            return NULL;
        if (!busy) {
            int slow = get_flag(self, s_slow);
            if (slow < 0)
                return NULL;
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
    long long size;
    if (nbytes < SMALL)
        size = nbytes > 0 ? ((nbytes + 511) >> 9) << 9 : 512;
    else
        size = (nbytes + LARGE_ROUND - 1) & ~(long long)(LARGE_ROUND - 1);
    int slow = get_flag(self, s_slow);
    if (slow < 0)
        return NULL;
    if (!slow && nbytes >= 0) {
        PyObject *hit = quick_hit(self, nbytes, size, stream);
        if (hit != Py_None)
            return hit; /* a pointer, or NULL */
    }
    PyObject *size_obj = PyLong_FromLongLong(size);
    if (size_obj == NULL)
        return NULL;
    PyObject *args[3] = {size_obj, nbytes_obj, stream};
    PyObject *r = PyObject_Vectorcall(self->miss, args, 3, NULL);
    Py_DECREF(size_obj);
    return r;
}

static PyObject *
hot_call(HotAlloc *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (PyVectorcall_NARGS(nargsf) != 2 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "alloc(nbytes, stream_or_device_id) takes 2 "
                                         "positional arguments");
        return NULL;
    }
    long long nbytes = PyLong_AsLongLong(args[0]);
    if (nbytes == -1 && PyErr_Occurred())
        return NULL;
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
    lock_take(self->lock);
    PyObject *result = alloc_locked(self, args[0], nbytes, stream);
    Py_DECREF(stream);
    if (lock_give(self->lock) < 0) { /* only if the miss path released it: a bug */
        Py_XDECREF(result);
        return NULL;
    }
    return result;
}

static int
hot_traverse(HotAlloc *self, visitproc visit, void *arg)
{
    Py_VISIT(self->pool);
    Py_VISIT(self->attrs);
    Py_VISIT(self->quick);
    Py_VISIT(self->live);
    Py_VISIT(self->freed);
    Py_VISIT(self->hits);
    Py_VISIT(self->block_type);
    Py_VISIT(self->owner);
    Py_VISIT(self->popitem);
    Py_VISIT(self->free_other);
    Py_VISIT(self->miss);
    Py_VISIT(self->lock);
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
    Py_CLEAR(self->hits);
    Py_CLEAR(self->block_type);
    Py_CLEAR(self->owner);
    Py_CLEAR(self->popitem);
    Py_CLEAR(self->free_other);
    Py_CLEAR(self->miss);
    Py_CLEAR(self->lock);
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
    static char *kwlist[] = {"pool", "block_type", "stream_fn", NULL};
    PyObject *pool, *block_type, *fn = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!|O:HotAlloc", kwlist, &pool,
                                     &PyType_Type, &block_type, &fn))
        return NULL;
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
    /* the counters and flags are plain instance attributes, read and written in the
     * instance dictionary: no class attribute may shadow them */
    PyObject *names[] = {s_busy, s_slow, s_requested, s_allocated, s_peak_requested,
                         s_peak_allocated, s_peak_active, s_pending_bytes};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        PyObject *c = PyObject_GetAttr((PyObject *)Py_TYPE(pool), names[i]);
        if (c != NULL) {
            Py_DECREF(c);
            PyErr_Format(PyExc_TypeError, "HotAlloc: %R has a class attribute %R",
                         Py_TYPE(pool), names[i]);
            return NULL;
        }
        PyErr_Clear();
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
        || (self->hits = PyObject_GetAttrString(pool, "hits")) == NULL
        || (self->free_other = PyObject_GetAttrString(pool, "_free_locked")) == NULL
        || (self->miss = PyObject_GetAttrString(pool, "_alloc_miss")) == NULL
        || (self->popitem = PyObject_GetAttrString(self->freed, "popitem")) == NULL
        || (lock = PyObject_GetAttrString(pool, "_lock")) == NULL)
        goto fail;
    self->lock = (PoolLock *)lock;
    if (!Py_IS_TYPE(lock, &PoolLockType)) {
        PyErr_Format(PyExc_TypeError, "HotAlloc: the pool's _lock must be a PoolLock, got %R",
                     lock);
        goto fail;
    }
    if (!PyDict_Check(self->attrs) || !PyDict_Check(self->quick) || !PyDict_Check(self->live)
        || !PyDict_Check(self->freed) || !PyDict_Check(self->hits)) {
        PyErr_SetString(PyExc_TypeError, "HotAlloc: the pool's __dict__, _quick, _live, _freed "
                                         "and hits must be dicts");
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

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_hotpath",
    "The memory pool's allocation hot path in C (HotAlloc) and its lock (PoolLock).", -1, NULL,
};

PyMODINIT_FUNC
PyInit__hotpath(void)
{
#define INTERN(v, s) if ((v = PyUnicode_InternFromString(s)) == NULL) return NULL
    INTERN(s_busy, "_busy");
    INTERN(s_slow, "_slow");
    INTERN(s_requested, "requested");
    INTERN(s_allocated, "allocated");
    INTERN(s_peak_requested, "peak_requested");
    INTERN(s_peak_allocated, "peak_allocated");
    INTERN(s_peak_active, "peak_active");
    INTERN(s_pending_bytes, "pending_bytes");
#undef INTERN
    if (PyType_Ready(&HotAllocType) < 0 || PyType_Ready(&PoolLockType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "HotAlloc", (PyObject *)&HotAllocType) < 0
        || PyModule_AddObjectRef(m, "PoolLock", (PyObject *)&PoolLockType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
