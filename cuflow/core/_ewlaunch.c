/* The launches of cuflow's elementwise engine in C (core/_engine.py, EwOp): the dispatch of
 * single ops and cuflow.fuse calls without the Python bytecode around cuLaunchKernel.  An
 * optional extension: without a C compiler (or on a free-threaded build) these calls take
 * CuPy's path.
 *
 * Launcher(darray, ndarray, stream_fn, launch, fail, device_fn=None, memset=None) has three
 * methods:
 *   ew(op, args, dst): op's generated kernel over args (see launcher_ew),
 *   empty(shape, dtype): a new C-contiguous darray (see launcher_empty), and
 *   fill(a, value): a C-contiguous array set to a value whose bytes repeat (launcher_fill);
 * each returns None where it does not apply (the caller then takes its checked path): only
 * arrays of exactly the types ``darray`` and ``ndarray`` are launched on.
 *   - stream_fn: a capsule of ``intptr_t (*)(void)`` (CuPy's
 *     cupy_backends.cuda.stream.get_current_stream_ptr, the current stream);
 *   - launch: the address of the driver's cuLaunchKernel;
 *   - fail(status): raises the driver error of a failed launch or memset;
 *   - device_fn: with several devices, the address of the driver's cuCtxGetDevice: plans are
 *     then kept per device, and operands of another device are declined;
 *   - memset: the addresses of the driver's cuMemsetD8Async, cuMemsetD16Async and
 *     cuMemsetD32Async (without them fill declines everything).
 * Kernel parameters live on the C stack, so concurrent threads never share them.
 *
 * FastCall(op, fn, nin, source, kind=0) is the entry point of a function, an operator,
 * empty/zeros, fill or a subscript: it calls those methods from C for the calls they take,
 * and fn for every other call (see the FastCall section below).
 *
 * Where CuPy's array fields check out on probe arrays (layout_for), ew reads its operands
 * there and builds its new results there (new_at_fields), and darray's basic indexing
 * builds CuPy's views there (basic_view).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "_cfields.h" /* FIELD, find_field */
#include "_poolapi.h" /* CuflowPoolAPI: new results through the pool, on the launch stream */
#include <limits.h>
#include <math.h>
#include <string.h>
#include <stddef.h>
#include <stdint.h>

#ifdef Py_GIL_DISABLED
#error "the launcher reads dicts with borrowed references under the GIL; free-threaded builds take CuPy's path"
#endif

#define BLOCK 256 /* threads per block: _ewgen.BLOCK */
/* a row of a last-axis reduction gets a block from this many vectors: _ewgen */
#define ROW_BLOCK_VECTORS (2 * BLOCK)

typedef intptr_t (*stream_fn)(void);
typedef int (*device_fn)(int *device);
typedef int (*launch_fn)(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                         unsigned by, unsigned bz, unsigned shared, void *stream,
                         void **params, void **extra);
/* cuMemsetD8Async / D16 / D32: (pointer, value, count of elements, stream) */
typedef int (*memset8_fn)(unsigned long long dst, unsigned char value, size_t n, void *stream);
typedef int (*memset16_fn)(unsigned long long dst, unsigned short value, size_t n, void *stream);
typedef int (*memset32_fn)(unsigned long long dst, unsigned int value, size_t n, void *stream);

typedef struct {
    PyObject_HEAD
    PyObject *darray, *ndarray, *owner, *fail;
    PyObject *dtypes; /* empty()'s dtype argument -> numpy dtype of numbers, as met */
    newfunc base_new; /* the array base type's tp_new (NULL: results built by calling darray) */
    int fields;       /* operands read at CuPy's fields: 1, 0, or -1 not yet asked (layout_for) */
    stream_fn get_stream;
    launch_fn launch;
    device_fn get_device; /* NULL with one device */
    void *memset[3];      /* cuMemsetD8/D16/D32Async; NULL: fill declines */
} Launcher;

static PyObject *s_dtype, *s_contig, *s_shape, *s_size, *s_data, *s_ptr, *s_num, *s_itemsize,
    *s_device_id, *s_init, *s_empty, *s_kind, *np_dtype;

/* getattr(o, name) as a C integer; -1 with an exception set on failure */
static long long
attr_ll(PyObject *o, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL)
        return -1;
    long long r = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return r;
}

/* o.data.ptr; 0 with an exception set on failure.  With dev >= 0, *here is whether o's
 * memory is on device dev. */
static unsigned long long
data_ptr(PyObject *o, int dev, int *here)
{
    PyObject *d = PyObject_GetAttr(o, s_data);
    if (d == NULL)
        return 0;
    if (dev >= 0) {
        long long id = attr_ll(d, s_device_id);
        if (id == -1 && PyErr_Occurred()) {
            Py_DECREF(d);
            return 0;
        }
        *here = id == dev;
    }
    PyObject *p = PyObject_GetAttr(d, s_ptr);
    Py_DECREF(d);
    if (p == NULL)
        return 0;
    unsigned long long r = PyLong_AsUnsignedLongLong(p);
    Py_DECREF(p);
    return r;
}

/* 1 when o._c_contiguous is True, 0 when not, -1 on error */
static int
contiguous(PyObject *o)
{
    PyObject *v = PyObject_GetAttr(o, s_contig);
    if (v == NULL)
        return -1;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

/* 1 when o.shape == shape, 0 when not, -1 on error */
static int
same_shape(PyObject *o, PyObject *shape)
{
    PyObject *s = PyObject_GetAttr(o, s_shape);
    if (s == NULL)
        return -1;
    int r = PyObject_RichCompareBool(s, shape, Py_EQ);
    Py_DECREF(s);
    return r;
}

/* ---- CuPy's array fields at their offsets ----------------------------------------------
 * layout_for(ndarray) finds where _ndarray_base (Cython, cupy/_core/
 * core.pxd) keeps size, _shape and _strides (std::vector<Py_ssize_t>: three pointers),
 * _c_contiguous, _f_contiguous and _index_32_bits (C ints), dtype, data and base, and where
 * a MemoryPointer keeps ptr.  It checks them on three probe arrays, a C-contiguous one, its
 * transpose and a strided view of it (every field found once, at the pxd's order, with each
 * probe's values), and only then turns on what reads or writes them: the launcher's reads
 * of its operands (0.3-0.4 us an array: bench/ab.py's add(a, b, dst=c)), its new results
 * (new_at_fields) and basic indexing's views (basic_view).  Where any check fails, they
 * keep their attribute paths and CuPy's constructor. */
typedef struct {
    Py_ssize_t *begin, *end, *cap;
} SsizeVector;

typedef struct {
    int ok;
    int fresh;             /* new arrays are built at the fields (new_at_fields, checked) */
    PyObject *ndarray;     /* the array type checked (a strong reference) */
    PyTypeObject *pointer; /* the MemoryPointer type checked (a strong reference) */
    PyObject *alloc;       /* CuPy's memory.alloc (a strong reference), for fresh arrays */
    Py_ssize_t size, shape, strides, c_contig, f_contig, index32, dtype, data, base, mp_ptr;
} Layout;

/* the layout found, published whole once checked (see layout_for) */
static Layout L;
static PyObject *s_set_shape; /* "_set_shape_and_strides" */

#define VEC(o, off) (&FIELD(o, off, SsizeVector))
#define VEC_LEN(o, off) (VEC(o, off)->end - VEC(o, off)->begin)

/* *r = a * b or a + b: 1, or 0 where it overflows Py_ssize_t */
static inline int
mul_fits(Py_ssize_t a, Py_ssize_t b, Py_ssize_t *r)
{
#if defined(__GNUC__) || defined(__clang__)
    return !__builtin_mul_overflow(a, b, r);
#else
    if (a > (1LL << 31) || a < -(1LL << 31) || b > (1LL << 31) || b < -(1LL << 31))
        return 0; /* (without the builtin: a bound that cannot overflow) */
    *r = a * b;
    return 1;
#endif
}

static inline int
add_fits(Py_ssize_t a, Py_ssize_t b, Py_ssize_t *r)
{
#if defined(__GNUC__) || defined(__clang__)
    return !__builtin_add_overflow(a, b, r);
#else
    if ((b > 0 && a > PY_SSIZE_T_MAX - b) || (b < 0 && a < PY_SSIZE_T_MIN - b))
        return 0;
    *r = a + b;
    return 1;
#endif
}


/* 1 when o holds at off a vector of exactly the ints of tuple t: its pointers are checked
 * to be a vector's of that length before any element is read */
static int
vector_is(PyObject *o, Py_ssize_t off, PyObject *t)
{
    SsizeVector *v = VEC(o, off);
    Py_ssize_t n = PyTuple_Check(t) ? PyTuple_GET_SIZE(t) : -1;
    if (n < 1 || v->begin == NULL || ((uintptr_t)v->begin & (sizeof(Py_ssize_t) - 1))
        || v->end - v->begin != n || v->cap < v->end)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t x = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, i));
        if (x == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        if (v->begin[i] != x)
            return 0;
    }
    return 1;
}

/* 1 when darray inherits ndarray's __new__, _init and __array_finalize__ and ndarray
 * has a base type: a result built by that base's tp_new and _init (or a view filled in at
 * the fields) is what calling darray builds */
static int
construction_inherited(PyObject *darray, PyObject *ndarray)
{
    PyTypeObject *base = ((PyTypeObject *)ndarray)->tp_base;
    int same = base != NULL && base->tp_new != NULL
               && PyType_IsSubtype((PyTypeObject *)darray, (PyTypeObject *)ndarray);
    static const char *const inherited[] = {"__new__", "__init__", "__array_finalize__"};
    for (int i = 0; same && i < 3; i++) {
        PyObject *d = PyObject_GetAttrString(darray, inherited[i]);
        PyObject *n = d == NULL ? NULL : PyObject_GetAttrString(ndarray, inherited[i]);
        same = n != NULL && d == n;
        Py_XDECREF(d);
        Py_XDECREF(n);
        PyErr_Clear(); /* a missing method: the plain call */
    }
    return same;
}

/* o's attribute name, or NULL (no exception) */
static PyObject *
attr(PyObject *o, const char *name)
{
    PyObject *v = PyObject_GetAttrString(o, name);
    if (v == NULL)
        PyErr_Clear();
    return v;
}

/* 1 when probe o holds its own values at the offsets found: size, shape, strides, the
 * flags, dtype, data and base (base_is: the object base should be) */
static int
probe_matches(const Layout *l, PyObject *o, PyObject *base_is)
{
    PyObject *size = attr(o, "size"), *shape = attr(o, "shape"), *strides = attr(o, "strides"),
             *dtype = attr(o, "dtype"), *data = attr(o, "data"), *c = attr(o, "_c_contiguous"),
             *f = attr(o, "_f_contiguous"), *i32 = attr(o, "_index_32_bits"),
             *ptr = data == NULL ? NULL : attr(data, "ptr");
    int ok = size != NULL && shape != NULL && strides != NULL && dtype != NULL && data != NULL
             && c != NULL && f != NULL && i32 != NULL && ptr != NULL;
    ok = ok && FIELD(o, l->size, Py_ssize_t) == PyLong_AsSsize_t(size)
         && vector_is(o, l->shape, shape) && vector_is(o, l->strides, strides)
         && FIELD(o, l->c_contig, int) == PyObject_IsTrue(c)
         && FIELD(o, l->f_contig, int) == PyObject_IsTrue(f)
         && FIELD(o, l->index32, int) == PyObject_IsTrue(i32)
         && FIELD(o, l->dtype, PyObject *) == dtype && FIELD(o, l->data, PyObject *) == data
         && FIELD(o, l->base, PyObject *) == base_is
         && FIELD(data, l->mp_ptr, intptr_t) == (intptr_t)PyLong_AsSsize_t(ptr);
    PyErr_Clear();
    Py_XDECREF(size), Py_XDECREF(shape), Py_XDECREF(strides), Py_XDECREF(dtype);
    Py_XDECREF(data), Py_XDECREF(c), Py_XDECREF(f), Py_XDECREF(i32), Py_XDECREF(ptr);
    return ok;
}

/* probes a, t, v of type ndarray hold the fields at the pxd's offsets: 1 (*l filled in, but for
 * its references), or 0 */
static int
layout_of_probes(Layout *l, PyObject *ndarray, PyObject *a, PyObject *t, PyObject *v)
{
    if (Py_TYPE(a) != (PyTypeObject *)ndarray || Py_TYPE(t) != (PyTypeObject *)ndarray
        || Py_TYPE(v) != (PyTypeObject *)ndarray)
        return 0;
    Py_ssize_t end = ((PyTypeObject *)ndarray)->tp_base->tp_basicsize;
    PyObject *dtype = attr(a, "dtype"), *data = attr(a, "data"), *size = attr(a, "size"),
             *ptr = data == NULL ? NULL : attr(data, "ptr");
    Py_ssize_t n = size == NULL ? -1 : PyLong_AsSsize_t(size);
    intptr_t p = ptr == NULL ? 0 : (intptr_t)PyLong_AsSsize_t(ptr);
    PyErr_Clear();
    int ok = dtype != NULL && data != NULL && n > 1 && p != 0;
    if (ok) {
        l->size = find_field(a, end, &n, sizeof n);
        l->dtype = find_field(a, end, &dtype, sizeof dtype);
        l->data = find_field(a, end, &data, sizeof data);
        l->base = find_field(v, end, &a, sizeof a);
        l->mp_ptr = find_field(data, Py_TYPE(data)->tp_basicsize, &p, sizeof p);
        /* the pxd's order from size on: _shape, _strides, three bints, dtype, data, base */
        l->shape = l->size + (Py_ssize_t)sizeof(Py_ssize_t);
        l->strides = l->shape + (Py_ssize_t)sizeof(SsizeVector);
        l->c_contig = l->strides + (Py_ssize_t)sizeof(SsizeVector);
        l->f_contig = l->c_contig + (Py_ssize_t)sizeof(int);
        l->index32 = l->f_contig + (Py_ssize_t)sizeof(int);
        Py_ssize_t after = l->index32 + (Py_ssize_t)sizeof(int);
        ok = l->size > 0 && l->mp_ptr > 0 && l->base + (Py_ssize_t)sizeof(PyObject *) <= end
             && l->dtype == (after + (Py_ssize_t)sizeof(PyObject *) - 1)
                           / (Py_ssize_t)sizeof(PyObject *) * (Py_ssize_t)sizeof(PyObject *)
             && l->data == l->dtype + (Py_ssize_t)sizeof(PyObject *)
             && l->base == l->data + (Py_ssize_t)sizeof(PyObject *)
             && probe_matches(l, a, Py_None) && probe_matches(l, t, a) && probe_matches(l, v, a);
    }
    if (ok)
        l->pointer = Py_TYPE(data);
    Py_XDECREF(dtype), Py_XDECREF(data), Py_XDECREF(size), Py_XDECREF(ptr);
    return ok;
}

static PyObject *new_at_fields(newfunc base_new, PyTypeObject *cls, PyObject *shape,
                               PyObject *dt, intptr_t stream);

/* cuflow's pool, as cuflow.memory hands it over (use_pool); NULL: memory.alloc serves all */
static const CuflowPoolAPI *pool_api;
/* core/_vectors.cpp's capsule: std::vector<Py_ssize_t> assignment, where it was built */
typedef struct {
    size_t vector_size;
    int (*assign)(void *vec, const Py_ssize_t *values, Py_ssize_t n);
} VectorsAPI;
static const VectorsAPI *vectors;
static PyObject *get_allocator; /* CuPy's memory.get_allocator (a strong reference) */

/* 1 when an array built at the fields (new_at_fields) over probe a's shape and dtype holds
 * what CuPy's constructor put in a: size, shape, strides, flags, dtype, _index_32_bits, no
 * base, and data of the checked MemoryPointer type */
static int
fresh_matches(PyObject *ndarray, PyObject *a)
{
    PyObject *shape = PyObject_GetAttrString(a, "shape");
    PyObject *y = shape == NULL ? NULL
                  : new_at_fields(((PyTypeObject *)ndarray)->tp_base->tp_new,
                                  (PyTypeObject *)ndarray, shape, FIELD(a, L.dtype, PyObject *), -1);
    Py_ssize_t n = VEC_LEN(a, L.shape);
    int ok = y != NULL && y != Py_None && Py_TYPE(y) == (PyTypeObject *)ndarray
             && FIELD(y, L.size, Py_ssize_t) == FIELD(a, L.size, Py_ssize_t)
             && VEC_LEN(y, L.shape) == n && VEC_LEN(y, L.strides) == n
             && memcmp(VEC(y, L.shape)->begin, VEC(a, L.shape)->begin, n * sizeof(Py_ssize_t)) == 0
             && memcmp(VEC(y, L.strides)->begin, VEC(a, L.strides)->begin, n * sizeof(Py_ssize_t)) == 0
             && FIELD(y, L.c_contig, int) == FIELD(a, L.c_contig, int)
             && FIELD(y, L.f_contig, int) == FIELD(a, L.f_contig, int)
             && FIELD(y, L.index32, int) == FIELD(a, L.index32, int)
             && FIELD(y, L.dtype, PyObject *) == FIELD(a, L.dtype, PyObject *)
             && FIELD(y, L.base, PyObject *) == Py_None
             && Py_TYPE(FIELD(y, L.data, PyObject *)) == L.pointer;
    Py_XDECREF(y);
    Py_XDECREF(shape);
    PyErr_Clear();
    return ok;
}

/* Whether new arrays may be built at the fields (L.fresh): arrays built there match what
 * CuPy's constructor gives for probe a, (3, 5, 7), and for (1, 4, 1) (its one long axis makes
 * it F-contiguous too), with their data from CuPy's memory.alloc (found first).  Their
 * vectors are set by core/_vectors.cpp where it was built and checks out, else by CuPy's
 * _set_shape_and_strides. */
static int
fresh_checked(PyObject *ndarray, PyObject *a)
{
    PyObject *mem = PyImport_ImportModule("cupy.cuda.memory");
    L.alloc = mem == NULL ? NULL : PyObject_GetAttrString(mem, "alloc");
    get_allocator = mem == NULL ? NULL : PyObject_GetAttrString(mem, "get_allocator");
    Py_XDECREF(mem);
    /* (imported first: PyCapsule_Import reads a dotted name's submodules as attributes) */
    PyObject *vmod = PyImport_ImportModule("cuflow.core._vectors");
    PyObject *vcap = vmod == NULL ? NULL : PyObject_GetAttrString(vmod, "_C_API");
    vectors = vcap == NULL ? NULL : PyCapsule_GetPointer(vcap, "cuflow.core._vectors._C_API");
    Py_XDECREF(vcap); /* (the module stays imported: a C extension is never unloaded) */
    Py_XDECREF(vmod);
    PyErr_Clear(); /* (not built: CuPy's _set_shape_and_strides sets new arrays' vectors) */
    if (vectors != NULL && vectors->vector_size != sizeof(SsizeVector))
        vectors = NULL;
    PyObject *b = PyObject_CallFunction(ndarray, "(nnn)s", (Py_ssize_t)1, (Py_ssize_t)4,
                                        (Py_ssize_t)1, "int16");
    int ok = L.alloc != NULL && b != NULL && fresh_matches(ndarray, a) && fresh_matches(ndarray, b);
    if (!ok && vectors != NULL && b != NULL) { /* the vectors' fields did not check out */
        vectors = NULL;
        ok = L.alloc != NULL && fresh_matches(ndarray, a) && fresh_matches(ndarray, b);
    }
    Py_XDECREF(b);
    PyErr_Clear(); /* (a failed check: new arrays keep CuPy's _init) */
    return ok;
}

/* Whether CuPy's fields were found for arrays of type ndarray: 1, 0 (not for this type), -1
 * (the probes could not be made for want of memory: ask again later) or -2 (an exception
 * that is not an Exception, a KeyboardInterrupt say, is set).  The first call for a type
 * makes the probes, ndarray((3, 5, 7), "int16"), its .T and [1:, ::2, 3:], on the current
 * device, which has a context wherever an array of that type is at hand (the launcher asks
 * at its first array operand, indexing at its first subscript).  The probes run Python
 * code, so the layout is checked in a local copy and published whole, under the GIL. */
static int
layout_for(PyObject *ndarray)
{
    if (L.ok)
        return L.ndarray == ndarray;
    PyTypeObject *base = PyType_Check(ndarray) ? ((PyTypeObject *)ndarray)->tp_base : NULL;
    if (base == NULL || base->tp_flags & Py_TPFLAGS_HEAPTYPE || base->tp_itemsize != 0)
        return 0; /* not an array type over an extension type's fields: no probes made */
    PyObject *a = PyObject_CallFunction(ndarray, "(nnn)s", (Py_ssize_t)3, (Py_ssize_t)5,
                                        (Py_ssize_t)7, "int16");
    PyObject *t = a == NULL ? NULL : PyObject_GetAttrString(a, "T"), *v = NULL, *key = NULL;
    if (t != NULL) {
        PyObject *one = PyLong_FromLong(1), *two = PyLong_FromLong(2), *three = PyLong_FromLong(3);
        PyObject *s1 = one == NULL ? NULL : PySlice_New(one, NULL, NULL);
        PyObject *s2 = two == NULL ? NULL : PySlice_New(NULL, NULL, two);
        PyObject *s3 = three == NULL ? NULL : PySlice_New(three, NULL, NULL);
        key = s1 == NULL || s2 == NULL || s3 == NULL ? NULL : PyTuple_Pack(3, s1, s2, s3);
        v = key == NULL ? NULL : PyObject_GetItem(a, key);
        Py_XDECREF(one), Py_XDECREF(two), Py_XDECREF(three);
        Py_XDECREF(s1), Py_XDECREF(s2), Py_XDECREF(s3);
    }
    int r = 0;
    if (v == NULL && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            r = -2;
        else if (PyErr_ExceptionMatches(PyExc_MemoryError)) /* CuPy's OutOfMemoryError too */
            r = -1;
    }
    if (r != -2)
        PyErr_Clear(); /* a type without such fields keeps the attribute paths */
    Layout found = {0};
    if (v != NULL && layout_of_probes(&found, ndarray, a, t, v) && !L.ok) {
        found.pointer = (PyTypeObject *)Py_NewRef((PyObject *)found.pointer);
        found.ndarray = Py_NewRef(ndarray);
        found.ok = 1;
        L = found;
        L.fresh = fresh_checked(ndarray, a);
    }
    Py_XDECREF(a), Py_XDECREF(t), Py_XDECREF(v), Py_XDECREF(key);
    return r < 0 ? r : L.ok && L.ndarray == ndarray;
}

static PyObject *
cupy_layout(PyObject *Py_UNUSED(module), PyObject *ndarray)
{
    int r = layout_for(ndarray);
    return r == -2 ? NULL : PyBool_FromLong(r == 1);
}

/* the key of an array operand's dtype: its number (dtype.num), kept per dtype object (a
 * strong reference each, so an address is never reused) for the first DTYPE_NUMS met */
#define DTYPE_NUMS 32
static PyObject *num_dtypes[DTYPE_NUMS];
static long long num_values[DTYPE_NUMS];
static int num_count;

static long long
dtype_num(PyObject *dt)
{
    for (int i = 0; i < num_count; i++)
        if (num_dtypes[i] == dt)
            return num_values[i];
    long long num = attr_ll(dt, s_num);
    if (!(num == -1 && PyErr_Occurred()) && num_count < DTYPE_NUMS) {
        num_dtypes[num_count] = Py_NewRef(dt);
        num_values[num_count++] = num;
    }
    return num;
}

/* 1 when arrays x and y have the same shape (read at the fields) */
static int
same_vector(PyObject *x, PyObject *y)
{
    Py_ssize_t n = VEC_LEN(x, L.shape);
    return n == VEC_LEN(y, L.shape)
           && (n == 0 /* (0-d: no buffer to compare) */
               || memcmp(VEC(x, L.shape)->begin, VEC(y, L.shape)->begin, n * sizeof(Py_ssize_t)) == 0);
}

/* x.data.ptr at the fields into *p: 1, or 0 where data is not of the MemoryPointer type
 * checked (a subclass from another allocator: the attribute path reads it) */
static int
pointer_at_fields(PyObject *x, unsigned long long *p)
{
    PyObject *d = FIELD(x, L.data, PyObject *);
    if (Py_TYPE(d) != L.pointer)
        return 0;
    *p = (unsigned long long)FIELD(d, L.mp_ptr, intptr_t);
    return 1;
}

/* array_code at the fields (one device) */
static int
array_code_at_fields(PyObject *x, unsigned long long *code, unsigned long long *ptr)
{
    long long num = dtype_num(FIELD(x, L.dtype, PyObject *));
    if (num == -1 && PyErr_Occurred())
        return -1;
    unsigned long long p;
    if (!pointer_at_fields(x, &p) || num < 0 || num > 100)
        return 0;
    *code = 2 + 2 * (unsigned long long)num + ((p & 15) == 0);
    *ptr = p;
    return 1;
}

/* the item sizes of NumPy's numeric type numbers (0: not fixed here) */
static const signed char num_sizes[24] = {
    1, 1, 1, 2, 2, 4, 4, (signed char)sizeof(long), (signed char)sizeof(long), 8, 8, 4,
    8, 0, 8, 16, 0, 0, 0, 0, 0, 8, 8, 2};

/* A new C-contiguous array of type cls (whose base's tp_new is base_new), of shape (a tuple
 * of at most NEW_NDIM ints > 0) and a numeric dtype dt, built at the fields: what CuPy's
 * _init builds, without its argument checks (get_size's per-dimension checks and the
 * dtype's conversion: a third of what a new result adds to a launch, bench/ab.py's
 * add(a, b)):
 * base_new, dtype, the shape and contiguous strides with size and both flags (what
 * _set_shape_and_strides sets: through core/_vectors.cpp where it checked out, else that
 * method), data from the current allocator (CuPy's memory.alloc, or the pool's C entry on
 * ``stream`` where the allocator is the pool's hook; stream -1: memory.alloc) and
 * _index_32_bits.  None where dt's item size is not fixed here, or the shape is not such a
 * tuple (an empty array's strides are CuPy's _init's to choose). */
#define NEW_NDIM 8

static PyObject *
new_at_fields(newfunc base_new, PyTypeObject *cls, PyObject *shape, PyObject *dt,
              intptr_t stream)
{
    long long num = dtype_num(dt);
    if (num == -1 && PyErr_Occurred())
        return NULL;
    if (num < 0 || num >= 24 || num_sizes[num] == 0)
        Py_RETURN_NONE;
    Py_ssize_t nd = PyTuple_GET_SIZE(shape), dims[NEW_NDIM], nbytes = num_sizes[num];
    if (nd > NEW_NDIM)
        Py_RETURN_NONE;
    for (Py_ssize_t i = nd - 1; i >= 0; i--) { /* (the C-order strides: from the last axis) */
        PyObject *d = PyTuple_GET_ITEM(shape, i);
        dims[i] = PyLong_CheckExact(d) ? PyLong_AsSsize_t(d) : -1;
        if (dims[i] == -1 && PyErr_Occurred())
            PyErr_Clear();
        if (dims[i] <= 0)
            Py_RETURN_NONE;
    }
    Py_ssize_t st[NEW_NDIM], size = 1, ones = 0;
    for (Py_ssize_t i = nd - 1; i >= 0; i--) {
        st[i] = nbytes;
        if (!mul_fits(nbytes, dims[i], &nbytes)) /* (_init's error to raise) */
            Py_RETURN_NONE;
        size *= dims[i];
        ones += dims[i] == 1;
    }
    PyObject *strides = NULL, *x = base_new(cls, s_empty, NULL);
    if (x == NULL)
        return NULL;
    Py_XSETREF(FIELD(x, L.dtype, PyObject *), Py_NewRef(dt));
    if (vectors != NULL) { /* what _set_shape_and_strides(shape, strides, True, True) sets */
        if (vectors->assign(&FIELD(x, L.shape, SsizeVector), dims, nd) < 0
            || vectors->assign(&FIELD(x, L.strides, SsizeVector), st, nd) < 0) {
            PyErr_NoMemory();
            goto fail;
        }
        FIELD(x, L.size, Py_ssize_t) = size;
        FIELD(x, L.c_contig, int) = 1;
        /* CuPy's _update_f_contiguity of a C-contiguous array: one axis longer than 1 */
        FIELD(x, L.f_contig, int) = nd - ones <= 1;
    }
    else {
        if ((strides = PyTuple_New(nd)) == NULL)
            goto fail;
        for (Py_ssize_t i = 0; i < nd; i++) {
            PyObject *v = PyLong_FromSsize_t(st[i]);
            if (v == NULL)
                goto fail;
            PyTuple_SET_ITEM(strides, i, v);
        }
        PyObject *margs[] = {x, shape, strides, Py_True, Py_True};
        PyObject *r = PyObject_VectorcallMethod(s_set_shape, margs, 5, NULL);
        if (r == NULL)
            goto fail;
        Py_DECREF(r);
    }
    PyObject *nb = PyLong_FromSsize_t(nbytes), *mp = NULL;
    if (nb != NULL && pool_api != NULL && get_allocator != NULL && stream != -1) {
        /* memory.alloc(nb): get_allocator()(nb), the pool's hook through its C entry */
        PyObject *hook = PyObject_CallNoArgs(get_allocator);
        mp = hook == NULL ? NULL
             : Py_IS_TYPE(hook, pool_api->cupy_malloc_type) ? pool_api->malloc_on(hook, nb, stream)
                                                            : Py_NewRef(Py_None);
        Py_XDECREF(hook);
        if (mp == Py_None)
            Py_CLEAR(mp);
        else if (mp == NULL)
            Py_CLEAR(nb);
    }
    if (nb != NULL && mp == NULL)
        mp = PyObject_CallOneArg(L.alloc, nb); /* (it checks the result's type) */
    Py_XDECREF(nb);
    if (mp == NULL)
        goto fail;
    Py_XSETREF(FIELD(x, L.data, PyObject *), mp);
    FIELD(x, L.index32, int) = nbytes <= (1LL << 31);
    Py_XDECREF(strides);
    return x;
fail:
    Py_XDECREF(strides);
    Py_DECREF(x);
    return NULL;
}

/* A new C-contiguous darray of ``shape`` and ``dt``: what ``darray(shape, dt)`` gives,
 * without cupy.ndarray's Python-level __new__, __init__ and __array_finalize__ frames (about
 * a microsecond of every result: bench op zoo).  The base extension type's tp_new, then its
 * _init, which allocates through CuPy's current allocator, or, where the launcher reads
 * CuPy's fields and a fresh array built there checked out (L.fresh), new_at_fields.  Only
 * where darray inherits those three methods unchanged (checked when the Launcher is built),
 * so nothing is skipped. */
static PyObject *
new_result(Launcher *self, PyObject *shape, PyObject *dt, intptr_t stream)
{
    PyObject *args[] = {shape, dt};
    if (self->base_new == NULL)
        return PyObject_Vectorcall(self->darray, args, 2, NULL);
    if (self->fields == 1 && L.fresh && PyTuple_CheckExact(shape)
        && PyTuple_GET_SIZE(shape) <= NEW_NDIM) {
        PyObject *x = new_at_fields(self->base_new, (PyTypeObject *)self->darray, shape, dt,
                                    stream);
        if (x != Py_None)
            return x;
        Py_DECREF(x);
    }
    PyObject *x = self->base_new((PyTypeObject *)self->darray, s_empty, NULL);
    if (x == NULL)
        return NULL;
    PyObject *margs[] = {x, shape, dt};
    PyObject *r = PyObject_VectorcallMethod(s_init, margs, 3, NULL);
    if (r == NULL) {
        Py_DECREF(x);
        return NULL;
    }
    Py_DECREF(r);
    return x;
}

/* ew(op, args, dst): the engine's launch of a generated kernel over same-shape C-contiguous
 * arrays and Python float/int scalars (core/_engine.py, EwOp).  The key packs, per operand,
 * 2 + 2 * dtype.num + (16-byte aligned) for an array and 250 / 251 for a float / int
 * scalar, one byte each, the dst dtype's code above them, and with several devices the
 * current device + 1 in the top byte; op.plans[key] is
 * (function, result dtype, vector width, most blocks, trailing zero parameters, result
 * shape or None for the operands' shape, most elements or 0) or None (the engine does
 * not take these operands).  A miss calls op.load(key, args, dst), which builds and stores the
 * plan.  Returns the result, or None for the caller's other path. */
#define EW_MAX 6

/* An array operand's key code (2 + 2 * dtype.num + 16-byte aligned) and data pointer:
 * 1, or 0 for a dtype number the key cannot hold or memory of another device than dev (with
 * dev >= 0; the caller's other path), or -1 with an exception set. */
static int
array_code(PyObject *x, int dev, unsigned long long *code, unsigned long long *ptr)
{
    PyObject *dt = PyObject_GetAttr(x, s_dtype);
    if (dt == NULL)
        return -1;
    long long num = attr_ll(dt, s_num);
    Py_DECREF(dt);
    if (num == -1 && PyErr_Occurred())
        return -1;
    int here = 1;
    unsigned long long p = data_ptr(x, dev, &here);
    if (p == 0 && PyErr_Occurred())
        return -1;
    if (num < 0 || num > 100 || !here)
        return 0;
    *code = 2 + 2 * (unsigned long long)num + ((p & 15) == 0);
    *ptr = p;
    return 1;
}

/* The item size of an operand of key code ``code`` (NumPy's type number (code - 2) / 2):
 * the numeric types' fixed sizes, else its dtype's itemsize (-1 with an exception set). */
static long long
code_itemsize(PyObject *x, unsigned long long code)
{
    unsigned long long num = (code - 2) / 2;
    if (num < 24 && num_sizes[num])
        return num_sizes[num];
    PyObject *dt = PyObject_GetAttr(x, s_dtype);
    if (dt == NULL)
        return -1;
    long long r = attr_ll(dt, s_itemsize);
    Py_DECREF(dt);
    return r;
}
static PyObject *s_plans, *s_ew_load;

/* ew over the operands items[0:na]; args is them as a tuple, or NULL (built where a plan
 * must be loaded) */
static PyObject *
ew_impl(Launcher *self, PyObject *op, PyObject *const *items, Py_ssize_t na, PyObject *args,
        PyObject *dst)
{
    if (na < 1 || na > EW_MAX)
        Py_RETURN_NONE;
    int dev = -1; /* several devices: the current one (a plan is a function of one device) */
    if (self->get_device != NULL && self->get_device(&dev) != 0)
        Py_RETURN_NONE;
    unsigned long long key = 0, ptrs[EW_MAX + 1];
    union { double d; long long q; } sc[EW_MAX];
    int nptr = 0, nsc = 0;
    PyObject *shape = NULL, *first = NULL;
    long long n = -1;
    /* with one device, operands are read at CuPy's fields, decided at the first array
     * operand; shape, first's shape as a tuple, is then made only where needed */
    int fields = 0;
    for (Py_ssize_t i = 0; i < na; i++) {
        PyObject *x = items[i];
        unsigned long long code;
        if (Py_TYPE(x) == (PyTypeObject *)self->darray || Py_TYPE(x) == (PyTypeObject *)self->ndarray) {
            int ok;
            unsigned long long p;
            if (first == NULL && dev < 0 && self->fields != 0) {
                if (self->fields < 0) {
                    int r = layout_for(self->ndarray);
                    if (r == -2)
                        goto error;
                    if (r >= 0) /* (-1: asked again at the next launch) */
                        self->fields = r;
                }
                fields = self->fields == 1;
            }
            if (fields) {
                if (first == NULL) {
                    first = x;
                    n = FIELD(x, L.size, Py_ssize_t);
                }
                else if (!same_vector(x, first))
                    goto none;
                if (!FIELD(x, L.c_contig, int))
                    goto none;
                ok = array_code_at_fields(x, &code, &p);
            }
            else {
                if ((ok = contiguous(x)) <= 0)
                    goto out_none_or_err;
                if (first == NULL) {
                    first = x;
                    if ((shape = PyObject_GetAttr(x, s_shape)) == NULL)
                        return NULL;
                    if ((n = attr_ll(x, s_size)) == -1 && PyErr_Occurred())
                        goto error;
                }
                else if ((ok = same_shape(x, shape)) <= 0)
                    goto out_none_or_err;
                ok = array_code(x, dev, &code, &p);
            }
            if (ok <= 0)
                goto out_none_or_err;
            ptrs[nptr++] = p;
        }
        else if (PyFloat_CheckExact(x)) {
            sc[nsc++].d = PyFloat_AS_DOUBLE(x);
            code = 250;
        }
        else if (PyLong_CheckExact(x)) {
            int overflow = 0;
            long long v = PyLong_AsLongLongAndOverflow(x, &overflow);
            if (overflow || (v == -1 && PyErr_Occurred())) {
                PyErr_Clear();
                goto none;
            }
            sc[nsc++].q = v;
            code = 251;
        }
        else
            goto none;
        key |= code << (8 * i);
    }
    if (first == NULL)
        goto none;
    if (dst != Py_None) {
        if (Py_TYPE(dst) != (PyTypeObject *)self->darray && Py_TYPE(dst) != (PyTypeObject *)self->ndarray)
            goto none;
        int ok;
        unsigned long long code, p;
        if (fields) {
            if (!FIELD(dst, L.c_contig, int) || !same_vector(dst, first))
                goto none;
            ok = array_code_at_fields(dst, &code, &p);
        }
        else {
            if ((ok = contiguous(dst)) <= 0 || (ok = same_shape(dst, shape)) <= 0)
                goto out_none_or_err;
            ok = array_code(dst, dev, &code, &p);
        }
        if (ok <= 0)
            goto out_none_or_err;
        key |= code << 48;
        ptrs[nptr] = p;
    }
    if (dev >= 0)
        key |= (unsigned long long)(dev + 1) << 56;

    PyObject *plans = PyObject_GetAttr(op, s_plans);
    if (plans == NULL)
        goto error;
    PyObject *k = PyLong_FromUnsignedLongLong(key);
    PyObject *plan = k == NULL ? NULL : PyDict_GetItemWithError(plans, k); /* borrowed */
    Py_XINCREF(plan);
    Py_DECREF(plans);
    if (plan == NULL) {
        if (k == NULL || PyErr_Occurred()) {
            Py_XDECREF(k);
            goto error;
        }
        PyObject *t = args != NULL ? Py_NewRef(args) : PyTuple_New(na);
        if (t == NULL) {
            Py_DECREF(k);
            goto error;
        }
        if (args == NULL)
            for (Py_ssize_t i = 0; i < na; i++)
                PyTuple_SET_ITEM(t, i, Py_NewRef(items[i]));
        PyObject *cargs[] = {op, k, t, dst};
        plan = PyObject_VectorcallMethod(s_ew_load, cargs, 4, NULL);
        Py_DECREF(t);
        if (plan == NULL) {
            Py_DECREF(k);
            goto error;
        }
    }
    Py_DECREF(k);
    if (plan == Py_None || !PyTuple_Check(plan) || PyTuple_GET_SIZE(plan) != 7) {
        Py_DECREF(plan);
        goto none;
    }
    void *fp = PyLong_AsVoidPtr(PyTuple_GET_ITEM(plan, 0));
    PyObject *odt = PyTuple_GET_ITEM(plan, 1);
    long long vec = PyLong_AsLongLong(PyTuple_GET_ITEM(plan, 2));
    long long cap = PyLong_AsLongLong(PyTuple_GET_ITEM(plan, 3));
    long long nzero = PyLong_AsLongLong(PyTuple_GET_ITEM(plan, 4));
    PyObject *oshape = PyTuple_GET_ITEM(plan, 5);
    long long max_n = PyLong_AsLongLong(PyTuple_GET_ITEM(plan, 6));
    if (PyErr_Occurred()) {
        Py_DECREF(plan);
        goto error;
    }
    if (nzero != 0 && n == 0) { /* an empty reduction: its identity or error (Python) */
        Py_DECREF(plan);
        goto none;
    }
    /* nzero -1: a last-axis reduction; the kernel takes (row length, 1), the result drops
     * the last axis */
    long long rlen = 0;
    if (shape == NULL && (nzero == -1 || dst == Py_None)
        && (shape = PyObject_GetAttr(first, s_shape)) == NULL) {
        Py_DECREF(plan);
        goto error;
    }
    if (nzero == -1) {
        Py_ssize_t nd = PyTuple_Check(shape) ? PyTuple_GET_SIZE(shape) : 0;
        if (nd < 1 || dst != Py_None) {
            Py_DECREF(plan);
            goto none;
        }
        rlen = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, nd - 1));
        if (rlen == -1 && PyErr_Occurred()) {
            Py_DECREF(plan);
            goto error;
        }
        /* rows read vec elements at a time; few long rows: CuPy's path */
        if (rlen < 1 || rlen % vec || (n / rlen < 64 && rlen > 4096)) {
            Py_DECREF(plan);
            goto none;
        }
        oshape = PyTuple_GetSlice(shape, 0, nd - 1);
        if (oshape == NULL) {
            Py_DECREF(plan);
            goto error;
        }
    }
    else
        Py_INCREF(oshape);
    if ((max_n > 0 && n > max_n) || nzero < -1 || nzero > 2 || (oshape != Py_None && dst != Py_None)) {
        Py_DECREF(oshape);
        Py_DECREF(plan);
        goto none;
    }
    PyObject *c;
    intptr_t stream = self->get_stream(); /* the result's memory and the launch */
    if (dst == Py_None) {
        c = new_result(self, oshape == Py_None ? shape : oshape, odt, stream);
        Py_DECREF(oshape);
        Py_DECREF(plan);
        if (c == NULL)
            goto error;
        if (!fields || (Py_TYPE(c) != (PyTypeObject *)self->darray
                        && Py_TYPE(c) != (PyTypeObject *)self->ndarray)
            || !pointer_at_fields(c, &ptrs[nptr]))
            ptrs[nptr] = data_ptr(c, -1, NULL);
        if (ptrs[nptr] == 0 && PyErr_Occurred()) {
            Py_DECREF(c);
            goto error;
        }
    }
    else {
        Py_DECREF(oshape);
        Py_DECREF(plan);
        /* an input sharing memory with dst other than exactly: the contract's copy (Python) */
        long long disz = code_itemsize(dst, (key >> 48) & 255);
        if (disz == -1 && PyErr_Occurred())
            goto error;
        unsigned long long dnb = (unsigned long long)n * (unsigned long long)disz;
        int j = 0;
        for (Py_ssize_t i = 0; i < na; i++) {
            PyObject *x = items[i];
            if (Py_TYPE(x) != (PyTypeObject *)self->darray && Py_TYPE(x) != (PyTypeObject *)self->ndarray)
                continue;
            unsigned long long p = ptrs[j++];
            long long xisz = code_itemsize(x, (key >> (8 * i)) & 255);
            if (xisz == -1 && PyErr_Occurred())
                goto error;
            unsigned long long xnb = (unsigned long long)n * (unsigned long long)xisz;
            int same = p == ptrs[nptr] && xisz == disz;
            if (!same && p < ptrs[nptr] + dnb && ptrs[nptr] < p + xnb)
                goto none;
        }
        c = Py_NewRef(dst);
    }
    if (n > 0) {
        void *kargs[2 * EW_MAX + 4];
        unsigned long long zero = 0;
        int a = 0;
        for (int i = 0; i <= nptr; i++)
            kargs[a++] = &ptrs[i];
        kargs[a++] = &n;
        for (int i = 0; i < nsc; i++)
            kargs[a++] = &sc[i];
        for (long long i = 0; i < nzero; i++)
            kargs[a++] = &zero; /* the partials of a one-block reduction: unused */
        long long one = 1;
        if (nzero == -1) {
            kargs[a++] = &rlen;
            kargs[a++] = &one;
        }
        unsigned long long chunks = ((unsigned long long)n + (unsigned long long)vec - 1) / (unsigned long long)vec;
        if (nzero == -1) /* a block per long row, else a warp */
            chunks = (unsigned long long)(n / rlen) * (rlen >= ROW_BLOCK_VECTORS * vec ? BLOCK : 32);
        unsigned long long g = (chunks + BLOCK - 1) / BLOCK;
        if (cap > 0 && g > (unsigned long long)cap)
            g = (unsigned long long)cap;
        int status;
        Py_BEGIN_ALLOW_THREADS
        status = self->launch(fp, (unsigned)g, 1, 1, BLOCK, 1, 1, 0, (void *)stream, kargs, NULL);
        Py_END_ALLOW_THREADS
        if (status != 0) {
            Py_DECREF(c);
            PyObject *st = PyLong_FromLong(status);
            PyObject *r = st == NULL ? NULL : PyObject_CallOneArg(self->fail, st);
            Py_XDECREF(st);
            if (r != NULL) {
                Py_DECREF(r);
                PyErr_Format(PyExc_RuntimeError, "cuLaunchKernel failed with status %d", status);
            }
            goto error;
        }
    }
    Py_XDECREF(shape);
    return c;
out_none_or_err:
    if (PyErr_Occurred())
        goto error;
none:
    Py_XDECREF(shape);
    Py_RETURN_NONE;
error:
    Py_XDECREF(shape);
    return NULL;
}

static PyObject *
launcher_ew(Launcher *self, PyObject *const *argv, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyTuple_Check(argv[1])) {
        PyErr_SetString(PyExc_TypeError, "ew(op, args: tuple, dst) takes 3 arguments");
        return NULL;
    }
    PyObject *args = argv[1];
    return ew_impl(self, argv[0], PySequence_Fast_ITEMS(args), PyTuple_GET_SIZE(args), args,
                   argv[2]);
}

/* empty(shape, dtype): a new C-contiguous darray, or None where cuflow.empty's Python path
 * must check the arguments: anything but an int or a tuple of ints >= 0 (bools and NumPy
 * integers included), a size past the address space, or a dtype that is not one of numbers.
 * numpy.dtype(dtype) is asked once per dtype argument (at most EMPTY_DTYPES of them). */
#define EMPTY_DTYPES 64
static PyObject *
launcher_empty(Launcher *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "empty(shape, dtype) takes 2 arguments, got %zd", nargs);
        return NULL;
    }
    PyObject *shape = args[0], *spec = args[1], *dims;
    if (PyLong_CheckExact(shape))
        dims = PyTuple_Pack(1, shape);
    else if (PyTuple_CheckExact(shape))
        dims = Py_NewRef(shape);
    else
        Py_RETURN_NONE;
    if (dims == NULL)
        return NULL;
    unsigned long long count = 1;
    int ok = 1;
    for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(dims); i++) {
        PyObject *d = PyTuple_GET_ITEM(dims, i);
        int overflow = 0;
        long long v = PyLong_CheckExact(d) ? PyLong_AsLongLongAndOverflow(d, &overflow) : -1;
        if (v == -1 && PyErr_Occurred())
            PyErr_Clear();
        if (v < 0 || overflow || (v && count > (unsigned long long)LLONG_MAX / (unsigned long long)v))
            ok = 0;
        else
            count *= (unsigned long long)v;
    }
    PyObject *dt = NULL;
    if (ok) {
        dt = PyDict_GetItemWithError(self->dtypes, spec); /* borrowed */
        if (dt != NULL)
            Py_INCREF(dt);
        else if (PyErr_Occurred()) { /* unhashable: the Python path says what is wrong */
            PyErr_Clear();
            ok = 0;
        }
        else if ((dt = PyObject_CallOneArg(np_dtype, spec)) == NULL) {
            PyErr_Clear();
            ok = 0;
        }
        else {
            PyObject *k = PyObject_GetAttr(dt, s_kind);
            const char *ks = k == NULL ? NULL : PyUnicode_AsUTF8(k);
            ok = ks != NULL && ks[0] != 0 && ks[1] == 0 && strchr("biufc", ks[0]) != NULL;
            Py_XDECREF(k);
            PyErr_Clear();
            if (ok && PyDict_GET_SIZE(self->dtypes) < EMPTY_DTYPES
                && PyDict_SetItem(self->dtypes, spec, dt) < 0)
                PyErr_Clear();
        }
    }
    if (ok) {
        long long isz = attr_ll(dt, s_itemsize);
        if (isz == -1 && PyErr_Occurred())
            PyErr_Clear();
        ok = isz > 0 && count <= (unsigned long long)LLONG_MAX / (unsigned long long)isz;
    }
    PyObject *r = ok ? new_result(self, dims, dt, self->get_stream()) : Py_NewRef(Py_None);
    Py_XDECREF(dt);
    Py_DECREF(dims);
    return r;
}

/* fill(a, value): a C-contiguous array of exactly darray or ndarray set to ``value`` by one
 * cuMemsetD8/D16/D32Async on the current stream, where the value's bytes in a's dtype are
 * exact without NumPy: all-zero bytes (0, False or +0.0) in any numeric dtype, and in the
 * 1-, 2- and 4-byte integer dtypes, bool and float32 a Python bool, an int in range (bool:
 * 0 or 1; float32: |value| <= 2**24) or, for float32, a float.  Returns a, or None where
 * CuPy's fill must do it (other values and dtypes, NumPy scalars, strided arrays, elements
 * not aligned to their size, memory of another device). */
static PyObject *
launcher_fill(Launcher *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "fill(a, value) takes 2 arguments, got %zd", nargs);
        return NULL;
    }
    PyObject *a = args[0], *v = args[1];
    if (self->memset[0] == NULL
        || (Py_TYPE(a) != (PyTypeObject *)self->darray && Py_TYPE(a) != (PyTypeObject *)self->ndarray))
        Py_RETURN_NONE;
    /* the value: a double for floats, an integer for bools and ints */
    int is_float = 0;
    double d = 0.0;
    long long q = 0;
    if (PyFloat_CheckExact(v)) {
        is_float = 1;
        d = PyFloat_AS_DOUBLE(v);
    }
    else if (PyBool_Check(v))
        q = v == Py_True;
    else if (PyLong_CheckExact(v)) {
        int overflow = 0;
        q = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (q == -1 && PyErr_Occurred())
            return NULL;
        if (overflow)
            Py_RETURN_NONE;
    }
    else
        Py_RETURN_NONE;
    int ok = contiguous(a);
    if (ok <= 0)
        return ok < 0 ? NULL : Py_NewRef(Py_None);
    int dev = -1;
    if (self->get_device != NULL && self->get_device(&dev) != 0)
        Py_RETURN_NONE;
    unsigned long long code, p;
    if ((ok = array_code(a, dev, &code, &p)) <= 0)
        return ok < 0 ? NULL : Py_NewRef(Py_None);
    long long isz = code_itemsize(a, code), n = attr_ll(a, s_size);
    if ((isz == -1 || n == -1) && PyErr_Occurred())
        return NULL;
    unsigned long long num = (code - 2) / 2;
    /* width: bytes per memset element (0: not exact here); bits: the element's bytes */
    int width = 0, zero = is_float ? d == 0.0 && !signbit(d) : q == 0;
    unsigned bits = 0;
    if (zero) {
        width = 1; /* all-zero bytes: the widest memset the size and address allow */
        if (p % 4 == 0 && (n * isz) % 4 == 0)
            width = 4;
        else if (p % 2 == 0 && (n * isz) % 2 == 0)
            width = 2;
        n = n * isz / width;
    }
    else if (num == 0) { /* bool */
        if (!is_float && (q == 0 || q == 1))
            width = 1, bits = (unsigned)q;
    }
    else if (num >= 1 && num <= 6) { /* int8, uint8, int16, uint16, int32, uint32 */
        static const long long lo[] = {-128, 0, -32768, 0, -2147483648LL, 0};
        static const long long hi[] = {127, 255, 32767, 65535, 2147483647LL, 4294967295LL};
        if (!is_float && q >= lo[num - 1] && q <= hi[num - 1]) {
            width = (int)isz;
            bits = (unsigned)(q & (width == 4 ? 0xFFFFFFFFLL : (1LL << (8 * width)) - 1));
        }
    }
    else if (num == 11) { /* float32 */
        if (is_float || (q >= -(1LL << 24) && q <= (1LL << 24))) {
            float f = is_float ? (float)d : (float)q;
            memcpy(&bits, &f, 4);
            width = 4;
        }
    }
    if (width == 0 || (!zero && (isz != width || p % (unsigned long long)width != 0)))
        Py_RETURN_NONE; /* (a misaligned element: the driver refuses a wide memset there) */
    if (n > 0) {
        void *stream = (void *)self->get_stream();
        int status;
        Py_BEGIN_ALLOW_THREADS
        if (width == 1)
            status = ((memset8_fn)self->memset[0])(p, (unsigned char)bits, (size_t)n, stream);
        else if (width == 2)
            status = ((memset16_fn)self->memset[1])(p, (unsigned short)bits, (size_t)n, stream);
        else
            status = ((memset32_fn)self->memset[2])(p, bits, (size_t)n, stream);
        Py_END_ALLOW_THREADS
        if (status != 0) {
            PyObject *st = PyLong_FromLong(status);
            PyObject *r = st == NULL ? NULL : PyObject_CallOneArg(self->fail, st);
            Py_XDECREF(st);
            if (r != NULL) {
                Py_DECREF(r);
                PyErr_Format(PyExc_RuntimeError, "cuMemsetD%dAsync failed with status %d",
                             8 * width, status);
            }
            return NULL;
        }
    }
    return Py_NewRef(a);
}

static PyMethodDef launcher_methods[] = {
    {"empty", (PyCFunction)(void (*)(void))launcher_empty, METH_FASTCALL,
     "empty(shape, dtype) -> a new C-contiguous darray, or None (the caller's checks)"},
    {"ew", (PyCFunction)(void (*)(void))launcher_ew, METH_FASTCALL,
     "ew(op, args, dst) -> result or None: the engine's kernel of op over args"},
    {"fill", (PyCFunction)(void (*)(void))launcher_fill, METH_FASTCALL,
     "fill(a, value) -> a or None: a set to value by one memset on the current stream"},
    {NULL, NULL, 0, NULL},
};

static PyObject *
launcher_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"darray", "ndarray", "stream_fn", "launch", "fail", "device_fn",
                             "memset", NULL};
    PyObject *darray, *ndarray, *fn, *launch, *fail, *devfn = Py_None, *ms = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!O!OO|OO:Launcher", kwlist, &PyType_Type,
                                     &darray, &PyType_Type, &ndarray, &PyCapsule_Type, &fn,
                                     &launch, &fail, &devfn, &ms))
        return NULL;
    void *msp[3] = {NULL, NULL, NULL};
    if (ms != Py_None) {
        if (!PyTuple_Check(ms) || PyTuple_GET_SIZE(ms) != 3) {
            PyErr_Format(PyExc_TypeError, "Launcher: memset must be 3 addresses (cuMemsetD8Async, "
                                          "D16, D32), got %R", ms);
            return NULL;
        }
        for (int i = 0; i < 3; i++) {
            msp[i] = PyLong_AsVoidPtr(PyTuple_GET_ITEM(ms, i));
            if (msp[i] == NULL) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_ValueError, "Launcher: memset addresses must be non-zero");
                return NULL;
            }
        }
    }
    void *dp = devfn == Py_None ? NULL : PyLong_AsVoidPtr(devfn);
    if (devfn != Py_None && dp == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "Launcher: device_fn must be a non-zero address");
        return NULL;
    }
    stream_fn get_stream = (stream_fn)PyCapsule_GetPointer(fn, PyCapsule_GetName(fn));
    if (get_stream == NULL)
        return NULL;
    void *lp = PyLong_AsVoidPtr(launch);
    if (lp == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "Launcher: launch must be a non-zero address");
        return NULL;
    }
    if (!PyCallable_Check(fail)) {
        PyErr_Format(PyExc_TypeError, "Launcher: fail must be callable, got %R", fail);
        return NULL;
    }
    Launcher *self = (Launcher *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->darray = Py_NewRef(darray);
    self->ndarray = Py_NewRef(ndarray);
    self->owner = Py_NewRef(fn);
    self->fail = Py_NewRef(fail);
    if ((self->dtypes = PyDict_New()) == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->get_stream = get_stream;
    self->launch = (launch_fn)lp;
    self->get_device = (device_fn)dp;
    for (int i = 0; i < 3; i++)
        self->memset[i] = msp[i];
    self->base_new = construction_inherited(darray, ndarray)
                     ? ((PyTypeObject *)ndarray)->tp_base->tp_new : NULL;
    /* asked at the first array operand (see layout_for) */
    self->fields = PyType_IsSubtype((PyTypeObject *)darray, (PyTypeObject *)ndarray) ? -1 : 0;
    return (PyObject *)self;
}

static int
launcher_traverse(Launcher *self, visitproc visit, void *arg)
{
    Py_VISIT(self->darray);
    Py_VISIT(self->ndarray);
    Py_VISIT(self->owner);
    Py_VISIT(self->fail);
    Py_VISIT(self->dtypes);
    return 0;
}

static int
launcher_clear(Launcher *self)
{
    Py_CLEAR(self->darray);
    Py_CLEAR(self->ndarray);
    Py_CLEAR(self->owner);
    Py_CLEAR(self->fail);
    Py_CLEAR(self->dtypes);
    return 0;
}

static void
launcher_dealloc(Launcher *self)
{
    PyObject_GC_UnTrack(self);
    launcher_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject LauncherType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cuflow._ewlaunch.Launcher",
    .tp_doc = "Launcher(darray, ndarray, stream_fn, launch, fail, device_fn=None, memset=None): "
              "the elementwise engine's launches (ew), empty arrays and memset fills in C",
    .tp_basicsize = sizeof(Launcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = launcher_new,
    .tp_dealloc = (destructor)launcher_dealloc,
    .tp_traverse = (traverseproc)launcher_traverse,
    .tp_clear = (inquiry)launcher_clear,
    .tp_methods = launcher_methods,
};


/* ------------------------------------------------------------------------ FastCall */

/* FastCall(op, fn, nin, source, kind=0): a callable that runs fn, with the engine's launch
 * first and no Python frame on the way (bench op zoo: about 0.5 us of a namespace function's
 * call).  Which calls launch, by kind:
 *   0 (a function): nin operands (nin < 0: any number), optionally dst, positional after
 *     the operands where nin >= 0 or the keyword dst=, and nothing else;
 *   1 (an operator, a + b): exactly nin operands;
 *   2 (a reflected operator, b.__radd__(a)): exactly two, launched in reverse order;
 *   3 (an in-place operator, a += b): exactly two, the first of them dst;
 *   4 (empty) and 5 (zeros): a shape and optionally a dtype (positional or dtype=), op
 *     being the default dtype: the launcher's empty (and fill with 0);
 *   6 (a.fill(value)): exactly two, the launcher's fill, returning None.
 * The launcher is source's: a module's current runtime (its ``_current.fast``), or any
 * other object, whose method of the kind (``ew``, ``empty`` or ``fill``) is read per call
 * and used where it is a Launcher's.  Every other call, a decline (None) and an Exception run
 * fn(*args, **kwargs) itself, which takes its own path to the result or to its error.  A
 * FastCall binds as a method, as a function does (operators are class attributes);
 * instances have a __dict__ (functools.update_wrapper), and the type may be subclassed
 * (cuflow.fuse). */
enum { FC_FUNCTION, FC_OPERATOR, FC_REFLECTED, FC_INPLACE, FC_EMPTY, FC_ZEROS, FC_FILL, FC_GETITEM };

typedef struct {
    PyObject_HEAD
    PyObject *op, *fn, *source, *rtdict, *dict; /* rtdict: source's dict, for a module */
    Py_ssize_t nin;
    int kind;
    int views; /* getitem: basic indexing builds views at CuPy's fields (1, 0, -1 not asked) */
    vectorcallfunc vectorcall;
} FastCall;

static PyObject *s_current, *s_fast, *s_ew, *s_dst, *s_empty_fn, *s_fill_fn, *s_dtype_kw, *s_class,
    *zero;

/* source's Launcher (a new reference), or NULL without an exception */
static Launcher *
current_launcher(FastCall *self)
{
    PyObject *fast;
    if (self->rtdict != NULL) {
        PyObject *rt = PyDict_GetItemWithError(self->rtdict, s_current); /* borrowed */
        if (rt == NULL || rt == Py_None) {
            PyErr_Clear();
            return NULL;
        }
        fast = PyObject_GetAttr(rt, s_fast);
    }
    else
        fast = Py_NewRef(self->source);
    if (fast == NULL || fast == Py_None) {
        Py_XDECREF(fast);
        PyErr_Clear();
        return NULL;
    }
    PyObject *method = self->kind == FC_FILL ? s_fill_fn
                       : self->kind == FC_EMPTY || self->kind == FC_ZEROS ? s_empty_fn : s_ew;
    PyObject *ew = PyObject_GetAttr(fast, method);
    Py_DECREF(fast);
    if (ew == NULL) {
        PyErr_Clear();
        return NULL;
    }
    Launcher *l = NULL;
    if (PyCFunction_Check(ew)) {
        PyObject *owner = PyCFunction_GET_SELF(ew);
        if (owner != NULL && Py_TYPE(owner) == &LauncherType)
            l = (Launcher *)Py_NewRef(owner);
    }
    Py_DECREF(ew);
    return l;
}

/* r (a new reference) where the launcher took the call; else fn(*args, **kwargs): for a
 * decline (None) and an Exception, which fn meets again and raises as its own (a
 * KeyboardInterrupt and the like propagate) */
static PyObject *
result_or_fn(FastCall *self, PyObject *r, PyObject *const *args, size_t nargsf,
             PyObject *kwnames)
{
    if (r == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return NULL;
        PyErr_Clear();
    }
    else if (r != Py_None)
        return r;
    else
        Py_DECREF(r);
    return PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
}

/* kinds 4 and 5: empty(shape[, dtype]) and zeros(shape[, dtype]) */
static PyObject *
fastcall_empty(FastCall *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    PyObject *spec[2] = {NULL, self->op};
    if (nargs < 1 || nargs + nkw > 2)
        goto call_fn;
    spec[0] = args[0];
    if (nargs == 2)
        spec[1] = args[1];
    else if (nkw == 1) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, 0);
        if (k != s_dtype_kw && PyUnicode_Compare(k, s_dtype_kw) != 0)
            goto call_fn;
        spec[1] = args[1];
    }
    Launcher *l = current_launcher(self);
    if (l == NULL)
        goto call_fn;
    PyObject *r = launcher_empty(l, spec, 2);
    if (r != NULL && r != Py_None && self->kind == FC_ZEROS) {
        PyObject *fargs[] = {r, zero};
        PyObject *f = launcher_fill(l, fargs, 2);
        if (f != r) { /* declined or failed: the function's path */
            Py_DECREF(r);
            r = f;
        }
        else
            Py_DECREF(f);
    }
    Py_DECREF(l);
    return result_or_fn(self, r, args, nargsf, kwnames);
call_fn:
    return PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
}

/* kind 6: a.fill(value) */
static PyObject *
fastcall_fill(FastCall *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (PyVectorcall_NARGS(nargsf) != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0))
        goto call_fn;
    Launcher *l = current_launcher(self);
    if (l == NULL)
        goto call_fn;
    PyObject *r = launcher_fill(l, args, 2);
    Py_DECREF(l);
    if (r != NULL && r != Py_None) { /* filled: None, as NumPy's fill returns */
        Py_DECREF(r);
        Py_RETURN_NONE;
    }
    return result_or_fn(self, r, args, nargsf, kwnames);
call_fn:
    return PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
}

/* ---- basic indexing -------------------------------------------------------------------
 * x[key] for a key of ints, slices, Ellipsis and None (alone or in a tuple): the view CuPy's
 * _view_getitem builds, made at the fields (see layout_for) with no Python frame (bench op
 * zoo x[1:], x2[:, 0]): darray's base's tp_new, x's dtype, base (x's own, else x), data
 * (x's MemoryPointer plus the offset) and _index_32_bits, then _set_shape_and_strides, which
 * sets size and both contiguity flags as CuPy's view does.  None for anything else, which
 * CuPy's subscript then takes with its own errors: other index types (NumPy integers,
 * bools, arrays, lists, subclasses of int or tuple), slice bounds other than None and ints
 * of Py_ssize_t (nothing here runs Python code, which could reshape x under the vectors
 * read), an index out of bounds, a zero step, more indices than axes, an empty array or
 * result, an offset or stride past Py_ssize_t, and more than VIEW_NDIM axes. */
#define VIEW_NDIM 32
static unsigned long long views_built; /* views made here (views_built(): tests) */

/* a slice bound: None (*given 0) or an exact int of Py_ssize_t (*given 1); 0 for anything
 * else, with no exception */
static int
slice_bound(PyObject *o, Py_ssize_t *v, int *given)
{
    *given = o != Py_None;
    if (o == Py_None)
        return 1;
    if (!PyLong_CheckExact(o))
        return 0;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred()) || x < PY_SSIZE_T_MIN || x > PY_SSIZE_T_MAX) {
        PyErr_Clear();
        return 0;
    }
    *v = (Py_ssize_t)x;
    return 1;
}

static PyObject *
basic_view(PyTypeObject *cls, newfunc base_new, PyObject *x, PyObject *key)
{
    if (Py_TYPE(x) != cls || FIELD(x, L.size, Py_ssize_t) == 0)
        Py_RETURN_NONE;
    PyObject *const *items = &key;
    Py_ssize_t n = 1;
    if (PyTuple_CheckExact(key)) {
        items = &PyTuple_GET_ITEM(key, 0);
        n = PyTuple_GET_SIZE(key);
    }
    const Py_ssize_t ndim = VEC_LEN(x, L.shape);
    const Py_ssize_t *xs = VEC(x, L.shape)->begin, *xt = VEC(x, L.strides)->begin;
    Py_ssize_t used = 0, ellipses = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = items[i];
        if (PyLong_CheckExact(it) || PySlice_Check(it))
            used++;
        else if (it == Py_Ellipsis)
            ellipses++;
        else if (it != Py_None)
            Py_RETURN_NONE;
    }
    if (ellipses > 1 || used > ndim || n - used - ellipses + ndim > VIEW_NDIM)
        Py_RETURN_NONE;
    Py_ssize_t shape[VIEW_NDIM], strides[VIEW_NDIM], offset = 0;
    int nd = 0, ax = 0;
    for (Py_ssize_t i = 0; i <= n; i++) {
        PyObject *it = i < n ? items[i] : ellipses ? NULL : Py_Ellipsis; /* implicit ... last */
        if (it == NULL)
            break;
        if (it == Py_None) {
            shape[nd] = 1, strides[nd++] = 0;
        }
        else if (it == Py_Ellipsis) {
            for (Py_ssize_t k = 0; k < ndim - used; k++, ax++)
                shape[nd] = xs[ax], strides[nd++] = xt[ax];
        }
        else if (PySlice_Check(it)) { /* Python's slice.indices, on ints read without code */
            PySliceObject *sl = (PySliceObject *)it;
            Py_ssize_t start = 0, stop = 0, step = 1, at;
            int has_start, has_stop, has_step;
            if (!slice_bound(sl->step, &step, &has_step) || step == 0
                || !slice_bound(sl->start, &start, &has_start)
                || !slice_bound(sl->stop, &stop, &has_stop))
                Py_RETURN_NONE;
            if (step < -PY_SSIZE_T_MAX)
                step = -PY_SSIZE_T_MAX; /* (as PySlice_Unpack) */
            if (!has_start)
                start = step < 0 ? PY_SSIZE_T_MAX : 0;
            if (!has_stop)
                stop = step < 0 ? PY_SSIZE_T_MIN : PY_SSIZE_T_MAX;
            Py_ssize_t len = PySlice_AdjustIndices(xs[ax], &start, &stop, step), stride;
            if (len == 0 || !mul_fits(start, xt[ax], &at) || !add_fits(offset, at, &offset)
                || !mul_fits(xt[ax], step, &stride))
                Py_RETURN_NONE;
            shape[nd] = len, strides[nd++] = stride;
            ax++;
        }
        else {
            int overflow = 0;
            long long k = PyLong_AsLongLongAndOverflow(it, &overflow);
            Py_ssize_t at;
            if (overflow || (k == -1 && PyErr_Occurred())) {
                PyErr_Clear();
                Py_RETURN_NONE;
            }
            if (k < 0)
                k += xs[ax];
            if (k < 0 || k >= xs[ax] || !mul_fits((Py_ssize_t)k, xt[ax], &at)
                || !add_fits(offset, at, &offset))
                Py_RETURN_NONE;
            ax++;
        }
    }
    PyObject *st = PyTuple_New(nd), *tt = PyTuple_New(nd), *v = NULL, *d = NULL;
    if (st == NULL || tt == NULL)
        goto done;
    for (int i = 0; i < nd; i++) {
        PyObject *a = PyLong_FromSsize_t(shape[i]), *b = PyLong_FromSsize_t(strides[i]);
        if (a == NULL || b == NULL) {
            Py_XDECREF(a);
            Py_XDECREF(b);
            goto done;
        }
        PyTuple_SET_ITEM(st, i, a);
        PyTuple_SET_ITEM(tt, i, b);
    }
    /* CuPy's MemoryPointer + offset, a new one at offset 0 too, as CuPy's subscript makes
     * (a MemoryPointer is changed in place by +=, so a view must not share x's) */
    PyObject *xd = FIELD(x, L.data, PyObject *), *xb = FIELD(x, L.base, PyObject *);
    PyObject *o = PyLong_FromSsize_t(offset);
    d = o == NULL ? NULL : PyNumber_Add(xd, o);
    Py_XDECREF(o);
    if (d == NULL || (v = base_new(cls, s_empty, NULL)) == NULL)
        goto done;
    Py_XSETREF(FIELD(v, L.dtype, PyObject *), Py_NewRef(FIELD(x, L.dtype, PyObject *)));
    Py_XSETREF(FIELD(v, L.base, PyObject *), Py_NewRef(xb != Py_None ? xb : x));
    Py_XSETREF(FIELD(v, L.data, PyObject *), d);
    d = NULL;
    FIELD(v, L.index32, int) = FIELD(x, L.index32, int);
    PyObject *margs[] = {v, st, tt, Py_True, Py_True};
    PyObject *r = PyObject_VectorcallMethod(s_set_shape, margs, 5, NULL);
    if (r == NULL)
        Py_CLEAR(v);
    else
        views_built++;
    Py_XDECREF(r);
done:
    Py_XDECREF(d);
    Py_XDECREF(st);
    Py_XDECREF(tt);
    return v;
}

/* kind 7: a[key] with op = (base, darray): basic indexing's view built at the fields where
 * they were found (basic_view), else the base type's own subscript, a result of the base
 * type (advanced indexing builds one) re-classed to darray; no Python frame (bench
 * headline a[1:]).  Built only where the base's subscript is a C slot, which cannot call
 * back into this one. */
static PyObject *
fastcall_getitem(FastCall *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyTypeObject *base = (PyTypeObject *)PyTuple_GET_ITEM(self->op, 0);
    if (PyVectorcall_NARGS(nargsf) != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0))
        return PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
    PyObject *cls = PyTuple_GET_ITEM(self->op, 1);
    if (self->views < 0) { /* asked at the first call (see layout_for) */
        int found = layout_for((PyObject *)base);
        if (found == -2)
            return NULL;
        if (found >= 0) /* (-1: asked again at the next call) */
            self->views = found && construction_inherited(cls, (PyObject *)base);
    }
    PyObject *r = self->views == 1 ? basic_view((PyTypeObject *)cls, base->tp_base->tp_new, args[0],
                                           args[1])
                              : Py_NewRef(Py_None);
    if (r == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return NULL;
        PyErr_Clear(); /* CuPy's subscript meets it again, and raises its own */
        r = Py_NewRef(Py_None);
    }
    if (r != Py_None)
        return r;
    Py_DECREF(r);
    r = base->tp_as_mapping->mp_subscript(args[0], args[1]);
    if (r != NULL && Py_TYPE(r) == base
        && PyObject_SetAttr(r, s_class, PyTuple_GET_ITEM(self->op, 1)) < 0)
        Py_CLEAR(r);
    return r;
}

static PyObject *
fastcall_vectorcall(FastCall *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (self->fn == NULL) {
        PyErr_SetString(PyExc_TypeError, "FastCall: not initialized");
        return NULL;
    }
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (self->kind == FC_EMPTY || self->kind == FC_ZEROS)
        return fastcall_empty(self, args, nargsf, kwnames);
    if (self->kind == FC_FILL)
        return fastcall_fill(self, args, nargsf, kwnames);
    if (self->kind == FC_GETITEM)
        return fastcall_getitem(self, args, nargsf, kwnames);
    Py_ssize_t nops = self->nin < 0 ? nargs : self->nin;
    PyObject *dst = Py_None, *swapped[2];
    PyObject *const *items = args;
    if (self->kind != FC_FUNCTION) {
        if (nargs != nops || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0))
            goto call_fn;
        if (self->kind == FC_REFLECTED) {
            swapped[0] = args[1];
            swapped[1] = args[0];
            items = swapped;
        }
        else if (self->kind == FC_INPLACE)
            dst = args[0];
    }
    else {
        if (nargs < nops || nargs > nops + 1)
            goto call_fn;
        if (nargs > nops)
            dst = args[nops];
        if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) {
            PyObject *k = PyTuple_GET_ITEM(kwnames, 0);
            if (PyTuple_GET_SIZE(kwnames) != 1 || nargs > nops
                || (k != s_dst && PyUnicode_Compare(k, s_dst) != 0))
                goto call_fn;
            dst = args[nargs];
        }
    }
    Launcher *l = current_launcher(self);
    if (l == NULL)
        goto call_fn;
    PyObject *r = ew_impl(l, self->op, items, nops, NULL, dst);
    Py_DECREF(l);
    return result_or_fn(self, r, args, nargsf, kwnames);
call_fn:
    return PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
}

static PyObject *
fastcall_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    FastCall *self = (FastCall *)type->tp_alloc(type, 0);
    if (self != NULL)
        self->vectorcall = (vectorcallfunc)fastcall_vectorcall;
    return (PyObject *)self;
}

static int
fastcall_init(FastCall *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"op", "fn", "nin", "source", "kind", NULL};
    PyObject *op, *fn, *source;
    Py_ssize_t nin;
    int kind = FC_FUNCTION;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOnO|i:FastCall", kwlist, &op, &fn, &nin,
                                     &source, &kind))
        return -1;
    if (kind < FC_FUNCTION || kind > FC_GETITEM) {
        PyErr_Format(PyExc_ValueError, "FastCall: kind must be 0 (a function), 1 (an "
                     "operator), 2 (reflected), 3 (in place), 4 (empty), 5 (zeros), 6 "
                     "(fill) or 7 (getitem), got %d", kind);
        return -1;
    }
    if (kind == FC_GETITEM) {
        PyTypeObject *b = PyTuple_Check(op) && PyTuple_GET_SIZE(op) == 2
                          && PyType_Check(PyTuple_GET_ITEM(op, 0))
                          && PyType_Check(PyTuple_GET_ITEM(op, 1))
                          ? (PyTypeObject *)PyTuple_GET_ITEM(op, 0) : NULL;
        if (b == NULL || b->tp_as_mapping == NULL || b->tp_as_mapping->mp_subscript == NULL
            || !PyType_IsSubtype((PyTypeObject *)PyTuple_GET_ITEM(op, 1), b)) {
            PyErr_Format(PyExc_TypeError, "FastCall: getitem takes op=(base, subclass), the "
                         "base with a subscript, got %R", op);
            return -1;
        }
    }
    if ((kind == FC_REFLECTED || kind == FC_INPLACE) && nin != 2) {
        PyErr_Format(PyExc_ValueError, "FastCall: a reflected or in-place operator takes 2 "
                     "operands, got nin=%zd", nin);
        return -1;
    }
    if (kind == FC_OPERATOR && nin < 1) {
        PyErr_Format(PyExc_ValueError, "FastCall: an operator takes 1 or more operands, got "
                     "nin=%zd", nin);
        return -1;
    }
    if (!PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError, "FastCall: fn must be callable, got %R", fn);
        return -1;
    }
    if (nin > EW_MAX) {
        PyErr_Format(PyExc_ValueError, "FastCall: nin must be at most %d, got %zd", EW_MAX, nin);
        return -1;
    }
    PyObject *d = PyModule_Check(source) ? PyModule_GetDict(source) : NULL; /* borrowed */
    Py_XSETREF(self->op, Py_NewRef(op));
    Py_XSETREF(self->fn, Py_NewRef(fn));
    Py_XSETREF(self->source, Py_NewRef(source));
    Py_XSETREF(self->rtdict, Py_XNewRef(d));
    self->nin = nin;
    self->kind = kind;
    self->views = -1;
    return 0;
}

static int
fastcall_traverse(FastCall *self, visitproc visit, void *arg)
{
    Py_VISIT(self->op);
    Py_VISIT(self->fn);
    Py_VISIT(self->source);
    Py_VISIT(self->rtdict);
    Py_VISIT(self->dict);
    return 0;
}

static int
fastcall_clear(FastCall *self)
{
    Py_CLEAR(self->op);
    Py_CLEAR(self->fn);
    Py_CLEAR(self->source);
    Py_CLEAR(self->rtdict);
    Py_CLEAR(self->dict);
    return 0;
}

static void
fastcall_dealloc(FastCall *self)
{
    PyObject_GC_UnTrack(self);
    fastcall_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* bound as a function is: a method of the instance it is read from */
static PyObject *
fastcall_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

/* pickled by name, as a function is */
static PyObject *
fastcall_reduce(PyObject *self, PyObject *unused)
{
    return PyObject_GetAttrString(self, "__qualname__");
}

static PyObject *
fastcall_repr(FastCall *self)
{
    return self->fn != NULL ? PyObject_Repr(self->fn) : PyUnicode_FromString("<FastCall>");
}

static PyMethodDef fastcall_methods[] = {
    {"__reduce__", fastcall_reduce, METH_NOARGS, "the qualified name: pickled as a function is"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef fastcall_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject FastCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cuflow._ewlaunch.FastCall",
    .tp_doc = "FastCall(op, fn, nin, source, kind=0): fn, with the engine's launch of op "
              "first for calls of operands (and dst)",
    .tp_basicsize = sizeof(FastCall),
    .tp_dictoffset = offsetof(FastCall, dict),
    .tp_vectorcall_offset = offsetof(FastCall, vectorcall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE
                | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_descr_get = fastcall_descr_get,
    .tp_new = fastcall_new,
    .tp_init = (initproc)fastcall_init,
    .tp_call = PyVectorcall_Call,
    .tp_dealloc = (destructor)fastcall_dealloc,
    .tp_traverse = (traverseproc)fastcall_traverse,
    .tp_clear = (inquiry)fastcall_clear,
    .tp_getset = fastcall_getset,
    .tp_methods = fastcall_methods,
    .tp_repr = (reprfunc)fastcall_repr,
};

static PyObject *
layout_found(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(L.ok);
}

static PyObject *
fresh_found(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(L.ok && L.fresh);
}

static PyObject *
use_pool(PyObject *Py_UNUSED(module), PyObject *capsule)
{
    if (capsule == Py_None) {
        pool_api = NULL;
        Py_RETURN_NONE;
    }
    const CuflowPoolAPI *api = PyCapsule_GetPointer(capsule, CUFLOW_POOL_API);
    if (api == NULL)
        return NULL;
    pool_api = api; /* (the capsule's module stays imported: a C extension is never unloaded) */
    Py_RETURN_NONE;
}

static PyObject *
vectors_found(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(L.ok && L.fresh && vectors != NULL);
}

static PyObject *
views_built_fn(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromUnsignedLongLong(views_built);
}

static PyMethodDef module_functions[] = {
    {"cupy_layout", cupy_layout, METH_O,
     "cupy_layout(ndarray) -> bool: whether CuPy's array fields were found for arrays of type "
     "ndarray, checked on probe arrays made on the current device (then the launcher reads "
     "operands there and darray's basic indexing builds views there)"},
    {"layout_found", layout_found, METH_NOARGS,
     "layout_found() -> bool: whether CuPy's array fields were found, for any type"},
    {"fresh_found", fresh_found, METH_NOARGS,
     "fresh_found() -> bool: whether new results are built at CuPy's fields (checked against "
     "CuPy's constructor on probes)"},
    {"use_pool", use_pool, METH_O,
     "use_pool(capsule or None): new results allocate through the pool's C entry (the "
     "capsule cuflow.memory._hotpath._C_API) where CuPy's current allocator is its hook"},
    {"vectors_found", vectors_found, METH_NOARGS,
     "vectors_found() -> bool: whether new results' shape and strides are set by "
     "cuflow.core._vectors (checked as fresh_found)"},
    {"views_built", views_built_fn, METH_NOARGS,
     "views_built() -> int: how many views darray's basic indexing has built at the fields"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_ewlaunch",
    "The elementwise engine's launches in C (Launcher) and its entry points (FastCall).", -1,
    module_functions,
};

PyMODINIT_FUNC
PyInit__ewlaunch(void)
{
#define INTERN(v, s) if ((v = PyUnicode_InternFromString(s)) == NULL) return NULL
    INTERN(s_dtype, "dtype");
    INTERN(s_contig, "_c_contiguous");
    INTERN(s_shape, "shape");
    INTERN(s_size, "size");
    INTERN(s_data, "data");
    INTERN(s_ptr, "ptr");
    INTERN(s_num, "num");
    INTERN(s_itemsize, "itemsize");
    INTERN(s_device_id, "device_id");
    INTERN(s_plans, "plans");
    INTERN(s_ew_load, "load");
    INTERN(s_init, "_init");
    INTERN(s_kind, "kind");
    INTERN(s_current, "_current");
    INTERN(s_fast, "fast");
    INTERN(s_ew, "ew");
    INTERN(s_dst, "dst");
    INTERN(s_empty_fn, "empty");
    INTERN(s_fill_fn, "fill");
    INTERN(s_dtype_kw, "dtype");
    INTERN(s_class, "__class__");
    INTERN(s_set_shape, "_set_shape_and_strides");
#undef INTERN
    PyObject *numpy = PyImport_ImportModule("numpy");
    if (numpy == NULL)
        return NULL;
    np_dtype = PyObject_GetAttrString(numpy, "dtype");
    Py_DECREF(numpy);
    if (np_dtype == NULL)
        return NULL;
    if ((s_empty = PyTuple_New(0)) == NULL || (zero = PyLong_FromLong(0)) == NULL)
        return NULL;
    if (PyType_Ready(&LauncherType) < 0 || PyType_Ready(&FastCallType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Launcher", (PyObject *)&LauncherType) < 0
        || PyModule_AddObjectRef(m, "FastCall", (PyObject *)&FastCallType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
