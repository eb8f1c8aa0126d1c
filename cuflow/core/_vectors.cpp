// CuPy's arrays keep their shape and strides in std::vector<Py_ssize_t> fields (shape_t and
// strides_t, cupy/_core/_carray.pxd).  The launcher (_ewlaunch.c) sets a new result's two
// vectors through this module's capsule, as _set_shape_and_strides assigns them, without
// the tuples that method takes and their conversion: about a fifth of what a new result adds
// (bench/ab.py, fused_gelu_new_host_us).  C++ because the vectors' memory must come from
// the same operator new their destructor gives it back to; an optional extension of its
// own, so that the launcher builds and runs without a C++ compiler (and then calls the
// method).
#include <Python.h>

#include <new>
#include <vector>

namespace {

typedef std::vector<Py_ssize_t> Vector;

// vec: a std::vector<Py_ssize_t>; its contents become values[0:n]; 0, or -1 (no memory)
int assign(void *vec, const Py_ssize_t *values, Py_ssize_t n)
{
    try {
        static_cast<Vector *>(vec)->assign(values, values + n);
        return 0;
    }
    catch (...) {
        return -1;
    }
}

struct VectorsAPI {
    size_t vector_size; // sizeof(std::vector<Py_ssize_t>): the launcher checks the fields'
    int (*assign)(void *vec, const Py_ssize_t *values, Py_ssize_t n);
};

VectorsAPI api = {sizeof(Vector), assign};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "cuflow.core._vectors",
                      "std::vector<Py_ssize_t> assignment for the launcher's new arrays", -1,
                      nullptr};

} // namespace

PyMODINIT_FUNC
PyInit__vectors(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == nullptr)
        return nullptr;
    PyObject *cap = PyCapsule_New(&api, "cuflow.core._vectors._C_API", nullptr);
    if (cap == nullptr || PyModule_AddObjectRef(m, "_C_API", cap) < 0) {
        Py_XDECREF(cap);
        Py_DECREF(m);
        return nullptr;
    }
    Py_DECREF(cap);
    return m;
}
