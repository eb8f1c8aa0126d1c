/* Reading and writing another extension's object fields at their offsets, shared by the
 * compiled pool (memory/_hotpath.c: CuPy's BaseMemory and MemoryPointer) and the
 * elementwise launcher (core/_ewlaunch.c: CuPy's array).  Offsets are never assumed: each
 * extension finds them on probe objects whose values it knows, and checks them there,
 * before it reads or writes any field this way. */
#ifndef CUFLOW_CFIELDS_H
#define CUFLOW_CFIELDS_H

#include <Python.h>
#include <string.h>

/* the field of type T at byte offset off of object o */
#define FIELD(o, off, T) (*(T *)((char *)(o) + (off)))

/* the one offset in [sizeof(PyObject), end) at which o holds the n bytes of v, aligned to
 * n; -1 when there is none or more than one */
static Py_ssize_t
find_field(PyObject *o, Py_ssize_t end, const void *v, size_t n)
{
    Py_ssize_t found = -1;
    for (Py_ssize_t off = sizeof(PyObject); off + (Py_ssize_t)n <= end; off += n)
        if (memcmp((char *)o + off, v, n) == 0) {
            if (found >= 0)
                return -1;
            found = off;
        }
    return found;
}

#endif
