/* The elementwise fast path's launch in C: cuflow._elementwise._py_binary / _py_unary,
 * decision for decision, without the Python bytecode around cuLaunchKernel.  An optional
 * extension: without a C compiler (or on a free-threaded build) the Python functions run.
 *
 * Launcher(darray, ndarray, stream_fn, launch, fail) has two methods:
 *   binary(kernel, a, b, dst) and unary(kernel, a, dst)
 * which return the result array (``dst`` when given), or None when the fast path does not
 * apply (the caller then takes CuPy's path): any argument may be passed, only arrays of
 * exactly the types ``darray`` and ``ndarray`` are launched on.  ``kernel`` is an _elementwise.Kernel: its
 * ``ptrs`` dict maps dtype.num to a CUfunction, and ``kernel.load(dtype)`` fills a miss.
 *   - stream_fn: a capsule of ``intptr_t (*)(void)`` (CuPy's
 *     cupy_backends.cuda.stream.get_current_stream_ptr, the current stream);
 *   - launch: the address of the driver's cuLaunchKernel;
 *   - fail(status): raises the driver error of a failed launch.
 * The attribute ``max_grid`` caps the grid (0: not known yet, set by Kernel.load).
 * Kernel parameters live on the C stack, so concurrent threads never share them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <string.h>
#include <stddef.h>
#include <stdint.h>
#include <structmember.h> /* PyMemberDef (Python < 3.12) */

#ifdef Py_GIL_DISABLED
#error "the launcher reads dicts with borrowed references under the GIL; free-threaded builds run the Python functions"
#endif

#define BLOCK 256 /* threads per block: _ewgen.BLOCK */
/* a row of a last-axis reduction gets a block from this many vectors: _ewgen */
#define ROW_BLOCK_VECTORS (2 * BLOCK)

typedef intptr_t (*stream_fn)(void);
typedef int (*launch_fn)(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                         unsigned by, unsigned bz, unsigned shared, void *stream,
                         void **params, void **extra);

typedef struct {
    PyObject_HEAD
    PyObject *darray, *ndarray, *owner, *fail;
    PyObject *dtypes; /* empty()'s dtype argument -> numpy dtype of numbers, as met */
    newfunc base_new; /* the array base type's tp_new (NULL: results built by calling darray) */
    stream_fn get_stream;
    launch_fn launch;
    Py_ssize_t max_grid;
} Launcher;

static PyObject *s_dtype, *s_contig, *s_shape, *s_size, *s_data, *s_ptr, *s_num, *s_itemsize,
    *s_ptrs, *s_load, *s_init, *s_empty, *s_kind, *np_dtype;

/* A new C-contiguous darray of ``shape`` and ``dt``: what ``darray(shape, dt)`` gives,
 * without cupy.ndarray's Python-level __new__, __init__ and __array_finalize__ frames (about
 * a microsecond of every result: bench op zoo).  The base extension type's tp_new, then its
 * _init, which allocates through CuPy's current allocator.  Only where darray inherits those
 * three methods unchanged (checked when the Launcher is built), so nothing is skipped. */
static PyObject *
new_result(Launcher *self, PyObject *shape, PyObject *dt)
{
    PyObject *args[] = {shape, dt};
    if (self->base_new == NULL)
        return PyObject_Vectorcall(self->darray, args, 2, NULL);
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

/* o.data.ptr; 0 with an exception set on failure */
static unsigned long long
data_ptr(PyObject *o)
{
    PyObject *d = PyObject_GetAttr(o, s_data);
    if (d == NULL)
        return 0;
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

/* [x, x + nb) and [y, y + nb) overlap without being the same range */
static int
partial_overlap(unsigned long long x, unsigned long long y, unsigned long long nb)
{
    return x != y && x < y + nb && y < x + nb;
}

/* The shared body of binary (nin 2) and unary (nin 1); in[1] is ignored for unary. */
static PyObject *
run(Launcher *self, int nin, PyObject *k, PyObject *const *in, PyObject *dst)
{
    PyObject *a = in[0], *b = in[nin - 1];
    for (int i = 0; i < nin; i++) /* CuPy arrays only: scalars, host arrays, subclasses: None */
        if (Py_TYPE(in[i]) != (PyTypeObject *)self->darray
            && Py_TYPE(in[i]) != (PyTypeObject *)self->ndarray)
            Py_RETURN_NONE;
    PyObject *shape = NULL, *c = NULL, *dt = PyObject_GetAttr(a, s_dtype);
    if (dt == NULL)
        return NULL;
    int ok = 1;
    if (nin == 2) {
        PyObject *bdt = PyObject_GetAttr(b, s_dtype);
        if (bdt == NULL)
            goto error;
        ok = bdt == dt;
        Py_DECREF(bdt);
    }
    for (int i = 0; ok && i < nin; i++)
        if ((ok = contiguous(in[i])) < 0)
            goto error;
    if (!ok)
        goto none;
    if ((shape = PyObject_GetAttr(a, s_shape)) == NULL)
        goto error;
    if (nin == 2 && (ok = same_shape(b, shape)) <= 0)
        goto done;

    /* the kernel for this dtype (0: none, CuPy's path) */
    long long num = attr_ll(dt, s_num);
    if (num == -1 && PyErr_Occurred())
        goto error;
    PyObject *ptrs = PyObject_GetAttr(k, s_ptrs);
    if (ptrs == NULL)
        goto error;
    PyObject *key = PyLong_FromLongLong(num);
    PyObject *fo = key == NULL ? NULL : PyDict_GetItemWithError(ptrs, key); /* borrowed */
    Py_XINCREF(fo);
    Py_XDECREF(key);
    Py_DECREF(ptrs);
    if (fo == NULL) {
        if (PyErr_Occurred() || (fo = PyObject_CallMethodOneArg(k, s_load, dt)) == NULL)
            goto error;
    }
    void *fp = PyLong_AsVoidPtr(fo);
    Py_DECREF(fo);
    if (fp == NULL) {
        if (PyErr_Occurred())
            goto error;
        goto none;
    }

    long long n = attr_ll(a, s_size), itemsize = attr_ll(dt, s_itemsize);
    if ((n == -1 || itemsize == -1) && PyErr_Occurred())
        goto error;
    unsigned long long p[3];
    for (int i = 0; i < nin; i++)
        if ((p[i] = data_ptr(in[i])) == 0 && PyErr_Occurred())
            goto error;
    unsigned long long nb = (unsigned long long)n * (unsigned long long)itemsize;
    if (dst == Py_None) {
        if ((c = new_result(self, shape, dt)) == NULL)
            goto error;
    }
    else {
        PyTypeObject *td = Py_TYPE(dst);
        if (td != (PyTypeObject *)self->darray && td != (PyTypeObject *)self->ndarray)
            goto none;
        PyObject *ddt = PyObject_GetAttr(dst, s_dtype);
        if (ddt == NULL)
            goto error;
        ok = ddt == dt;
        Py_DECREF(ddt);
        if (!ok || (ok = contiguous(dst)) <= 0 || (ok = same_shape(dst, shape)) <= 0)
            goto done;
        c = Py_NewRef(dst);
    }
    p[nin] = data_ptr(c);
    if (p[nin] == 0 && PyErr_Occurred())
        goto error;
    if (dst != Py_None)
        for (int i = 0; i < nin; i++)
            if (in[i] != dst && partial_overlap(p[nin], p[i], nb))
                goto none; /* CuPy's path copies the input first */

    if (n > 0) {
        void *args[4];
        for (int i = 0; i <= nin; i++)
            args[i] = &p[i];
        args[nin + 1] = &n;
        unsigned long long g = (((nb + 15) >> 4) + BLOCK - 1) >> 8;
        if (self->max_grid > 0 && g > (unsigned long long)self->max_grid)
            g = (unsigned long long)self->max_grid;
        void *stream = (void *)self->get_stream();
        int status;
        Py_BEGIN_ALLOW_THREADS
        status = self->launch(fp, (unsigned)g, 1, 1, BLOCK, 1, 1, 0, stream, args, NULL);
        Py_END_ALLOW_THREADS
        if (status != 0) {
            PyObject *st = PyLong_FromLong(status);
            PyObject *r = st == NULL ? NULL : PyObject_CallOneArg(self->fail, st);
            Py_XDECREF(st);
            if (r != NULL) { /* fail() must raise */
                Py_DECREF(r);
                PyErr_Format(PyExc_RuntimeError, "cuLaunchKernel failed with status %d", status);
            }
            goto error;
        }
    }
    Py_DECREF(dt);
    Py_DECREF(shape);
    return c;
none:
    ok = 0;
done:
    Py_DECREF(dt);
    Py_XDECREF(shape);
    Py_XDECREF(c);
    if (ok < 0)
        return NULL;
    Py_RETURN_NONE;
error:
    Py_DECREF(dt);
    Py_XDECREF(shape);
    Py_XDECREF(c);
    return NULL;
}

/* ew(op, args, dst): the engine's launch of a generated kernel over same-shape C-contiguous
 * arrays and Python float/int scalars (core/_engine.py, EwOp).  The key packs, per operand,
 * 2 + 2 * dtype.num + (16-byte aligned) for an array and 250 / 251 for a float / int
 * scalar, one byte each, and the dst dtype's code above them; op.plans[key] is
 * (function, result dtype, vector width, most blocks, trailing zero parameters, result
 * shape or None for the operands' shape, most elements or 0) or None (the engine does
 * not take these operands).  A miss calls op.load(key, args, dst), which builds and stores the
 * plan.  Returns the result, or None for the caller's other path. */
#define EW_MAX 6

/* An array operand's key code (2 + 2 * dtype.num + 16-byte aligned) and data pointer:
 * 1, or 0 for a dtype number the key cannot hold (the caller's other path), or -1 with an
 * exception set. */
static int
array_code(PyObject *x, unsigned long long *code, unsigned long long *ptr)
{
    PyObject *dt = PyObject_GetAttr(x, s_dtype);
    if (dt == NULL)
        return -1;
    long long num = attr_ll(dt, s_num);
    Py_DECREF(dt);
    if (num == -1 && PyErr_Occurred())
        return -1;
    unsigned long long p = data_ptr(x);
    if (p == 0 && PyErr_Occurred())
        return -1;
    if (num < 0 || num > 100)
        return 0;
    *code = 2 + 2 * (unsigned long long)num + ((p & 15) == 0);
    *ptr = p;
    return 1;
}
static PyObject *s_plans, *s_ew_load;

static PyObject *
launcher_ew(Launcher *self, PyObject *const *argv, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyTuple_Check(argv[1])) {
        PyErr_SetString(PyExc_TypeError, "ew(op, args: tuple, dst) takes 3 arguments");
        return NULL;
    }
    PyObject *op = argv[0], *args = argv[1], *dst = argv[2];
    Py_ssize_t na = PyTuple_GET_SIZE(args);
    if (na < 1 || na > EW_MAX)
        Py_RETURN_NONE;
    unsigned long long key = 0, ptrs[EW_MAX + 1];
    union { double d; long long q; } sc[EW_MAX];
    int nptr = 0, nsc = 0;
    PyObject *shape = NULL, *first = NULL;
    long long n = -1;
    for (Py_ssize_t i = 0; i < na; i++) {
        PyObject *x = PyTuple_GET_ITEM(args, i);
        unsigned long long code;
        if (Py_TYPE(x) == (PyTypeObject *)self->darray || Py_TYPE(x) == (PyTypeObject *)self->ndarray) {
            int ok = contiguous(x);
            if (ok <= 0)
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
            unsigned long long p;
            if ((ok = array_code(x, &code, &p)) <= 0)
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
        int ok = contiguous(dst);
        if (ok <= 0 || (ok = same_shape(dst, shape)) <= 0)
            goto out_none_or_err;
        unsigned long long code, p;
        if ((ok = array_code(dst, &code, &p)) <= 0)
            goto out_none_or_err;
        key |= code << 48;
        ptrs[nptr] = p;
    }

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
        PyObject *cargs[] = {op, k, args, dst};
        plan = PyObject_VectorcallMethod(s_ew_load, cargs, 4, NULL);
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
    if (dst == Py_None) {
        c = new_result(self, oshape == Py_None ? shape : oshape, odt);
        Py_DECREF(oshape);
        Py_DECREF(plan);
        if (c == NULL)
            goto error;
        ptrs[nptr] = data_ptr(c);
        if (ptrs[nptr] == 0 && PyErr_Occurred()) {
            Py_DECREF(c);
            goto error;
        }
    }
    else {
        Py_DECREF(oshape);
        Py_DECREF(plan);
        /* an input sharing memory with dst other than exactly: the contract's copy (Python) */
        PyObject *dsz = PyObject_GetAttr(dst, s_dtype);
        if (dsz == NULL)
            goto error;
        long long disz = attr_ll(dsz, s_itemsize);
        Py_DECREF(dsz);
        if (disz == -1 && PyErr_Occurred())
            goto error;
        unsigned long long dnb = (unsigned long long)n * (unsigned long long)disz;
        int j = 0;
        for (Py_ssize_t i = 0; i < na; i++) {
            PyObject *x = PyTuple_GET_ITEM(args, i);
            if (Py_TYPE(x) != (PyTypeObject *)self->darray && Py_TYPE(x) != (PyTypeObject *)self->ndarray)
                continue;
            unsigned long long p = ptrs[j++];
            PyObject *xd = PyObject_GetAttr(x, s_dtype);
            if (xd == NULL)
                goto error;
            long long xisz = attr_ll(xd, s_itemsize);
            Py_DECREF(xd);
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
        void *stream = (void *)self->get_stream();
        int status;
        Py_BEGIN_ALLOW_THREADS
        status = self->launch(fp, (unsigned)g, 1, 1, BLOCK, 1, 1, 0, stream, kargs, NULL);
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
launcher_binary(Launcher *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "binary(kernel, a, b, dst) takes 4 arguments, got %zd",
                     nargs);
        return NULL;
    }
    return run(self, 2, args[0], args + 1, args[3]);
}

static PyObject *
launcher_unary(Launcher *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "unary(kernel, a, dst) takes 3 arguments, got %zd", nargs);
        return NULL;
    }
    return run(self, 1, args[0], args + 1, args[2]);
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
    PyObject *r = ok ? new_result(self, dims, dt) : Py_NewRef(Py_None);
    Py_XDECREF(dt);
    Py_DECREF(dims);
    return r;
}

static PyMethodDef launcher_methods[] = {
    {"empty", (PyCFunction)(void (*)(void))launcher_empty, METH_FASTCALL,
     "empty(shape, dtype) -> a new C-contiguous darray, or None (the caller's checks)"},
    {"binary", (PyCFunction)(void (*)(void))launcher_binary, METH_FASTCALL,
     "binary(kernel, a, b, dst) -> result or None: kernel(a, b) into dst (or a new darray)"},
    {"unary", (PyCFunction)(void (*)(void))launcher_unary, METH_FASTCALL,
     "unary(kernel, a, dst) -> result or None: kernel(a) into dst (or a new darray)"},
    {"ew", (PyCFunction)(void (*)(void))launcher_ew, METH_FASTCALL,
     "ew(op, args, dst) -> result or None: the engine's kernel of op over args"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef launcher_members[] = {
    {"max_grid", T_PYSSIZET, offsetof(Launcher, max_grid), 0,
     "most blocks per launch (0: no cap)"},
    {NULL, 0, 0, 0, NULL},
};

static PyObject *
launcher_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"darray", "ndarray", "stream_fn", "launch", "fail", NULL};
    PyObject *darray, *ndarray, *fn, *launch, *fail;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!O!OO:Launcher", kwlist, &PyType_Type,
                                     &darray, &PyType_Type, &ndarray, &PyCapsule_Type, &fn,
                                     &launch, &fail))
        return NULL;
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
    self->base_new = NULL;
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
    if (same)
        self->base_new = base->tp_new;
    self->max_grid = 0;
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
    .tp_doc = "Launcher(darray, ndarray, stream_fn, launch, fail): the elementwise fast path's "
              "binary and unary launches in C",
    .tp_basicsize = sizeof(Launcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = launcher_new,
    .tp_dealloc = (destructor)launcher_dealloc,
    .tp_traverse = (traverseproc)launcher_traverse,
    .tp_clear = (inquiry)launcher_clear,
    .tp_methods = launcher_methods,
    .tp_members = launcher_members,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_ewlaunch",
    "The elementwise fast path's launches in C (Launcher).", -1, NULL,
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
    INTERN(s_ptrs, "ptrs");
    INTERN(s_load, "load");
    INTERN(s_plans, "plans");
    INTERN(s_ew_load, "load");
    INTERN(s_init, "_init");
    INTERN(s_kind, "kind");
#undef INTERN
    PyObject *numpy = PyImport_ImportModule("numpy");
    if (numpy == NULL)
        return NULL;
    np_dtype = PyObject_GetAttrString(numpy, "dtype");
    Py_DECREF(numpy);
    if (np_dtype == NULL)
        return NULL;
    if ((s_empty = PyTuple_New(0)) == NULL)
        return NULL;
    if (PyType_Ready(&LauncherType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Launcher", (PyObject *)&LauncherType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
