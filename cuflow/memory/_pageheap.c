/* Expandable segments' placement in C: cuflow/memory/_expandable.py's PageHeap, decision
 * for decision (tests/memory/test_expandable.py runs both on the same random sequences and
 * compares every offset).  A miss of the pool over CUFLOW_POOL_BACKEND=vmm places a segment
 * here, where the Python placement's microseconds a call were most of a miss's host time
 * (python -m cuflow bench traces, "cuflow vmm"; docs/performance.md).
 *
 * State: free ranges in two sorted arrays (by offset, for the neighbours; by size then
 * offset, for the fits), one byte per 2 MiB page for what is mapped, and the mapped pages'
 * runs in a sorted array with their running page counts.  A placement reads the runs, so
 * its cost grows with the free ranges and the runs, not with the pages the ranges span: the
 * free space below the top of a long-running workload spans tens of thousands of unmapped
 * pages (bench/test_bench_memory.py::test_placement_cost_flat).  Mapping and unmapping
 * go through the methods map_pages / unmap_pages, which a subclass overrides (the backend
 * maps device pages there) and which call these to record the pages.
 *
 * lend / give_back are the backend's alloc and free whole (the Python PageHeap's twins): the
 * rounding, the demand read from the pool's counters, and the stream ordering of the ranges
 * given back (per stream one event, recorded again at each give-back, and the spans given
 * back there).  The events are the six callables of `events`; for a device they are CuPy's
 * runtime functions, so a give-back runs no Python frame (a pair lend + give_back cost
 * 2.3-2.8 us through the Python backend, 0.6-1.0 us here: the performance page, "What
 * limits the figures").  The callbacks may run any Python code (a
 * collection's finalizers give back ranges or destroy streams): the loops over the entries
 * take the events to visit first and find each entry again by its event. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <limits.h>
#include <string.h>

#define PAGE (2LL << 20)

typedef struct {
    long long a, n; /* offset, size */
} Range;

typedef struct {
    long long lo, hi;
} Span;

typedef struct { /* mapped pages [s, e) */
    long long s, e;
} PageRun;

typedef struct { /* a stream's give-backs whose work may not be done */
    long long key;    /* the stream's handle; below -1 once the stream was destroyed */
    PyObject *event;  /* recorded after the last of them */
    Span *spans;
    Py_ssize_t nspans, cap;
} Pending;

enum { EV_CREATE, EV_RECORD, EV_QUERY, EV_WAIT, EV_SYNC, EV_DESTROY, EV_COUNT };
#define NOT_READY 600 /* cudaErrorNotReady */
#define ALIGN 512LL
#define MOST_SPANS 64 /* a stream's spans past this become one span over them */
#define MOST_STREAMS 8 /* past this, streams whose work is done are forgotten */

typedef struct {
    PyObject_HEAD
    long long capacity, top, live, peak_live, peak_mapped;
    long long cap_bytes; /* most bytes mapped, where free pages allow (0: none; a limit) */
    double keep;
    unsigned char *map; /* a byte per page: mapped */
    Py_ssize_t npages, mapped;
    Range *by_off, *by_size; /* the free ranges, by offset and by (size, offset) */
    Py_ssize_t nfree, cap;
    long long base, gone_key;   /* the range's address; the last key of a destroyed stream */
    PyObject *events, *state;   /* a tuple of EV_COUNT callables or None; the pool's counters */
    Pending *pend;
    Py_ssize_t npend, cappend;
    PageRun *runs;     /* the mapped runs, ascending */
    long long *before; /* before[i]: the mapped pages of runs[0..i) (nruns + 1 of them) */
    Py_ssize_t nruns, capruns;
} PageHeap;

static PyObject *s_map_pages, *s_unmap_pages, *s_requested, *s_peak_requested;

/* ------------------------------------------------------------ free ranges */
static Py_ssize_t
off_index(PageHeap *h, long long a) /* the first range at or above a */
{
    Py_ssize_t lo = 0, hi = h->nfree;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (h->by_off[mid].a < a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static Py_ssize_t
size_index(PageHeap *h, long long n, long long a) /* the first (size, offset) >= (n, a) */
{
    Py_ssize_t lo = 0, hi = h->nfree;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        Range r = h->by_size[mid];
        if (r.n < n || (r.n == n && r.a < a))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int
reserve(PageHeap *h, Py_ssize_t need) /* room for need free ranges */
{
    if (need > h->cap) {
        Py_ssize_t cap = h->cap ? 2 * h->cap : 16;
        if (cap < need)
            cap = need;
        Range *o = PyMem_Realloc(h->by_off, cap * sizeof(Range));
        if (o == NULL)
            return PyErr_NoMemory(), -1;
        h->by_off = o;
        Range *s = PyMem_Realloc(h->by_size, cap * sizeof(Range));
        if (s == NULL)
            return PyErr_NoMemory(), -1;
        h->by_size = s;
        h->cap = cap;
    }
    return 0;
}

static int
put(PageHeap *h, long long a, long long n)
{
    if (reserve(h, h->nfree + 1) < 0)
        return -1;
    Range r = {a, n};
    Py_ssize_t i = off_index(h, a), j = size_index(h, n, a);
    memmove(h->by_off + i + 1, h->by_off + i, (h->nfree - i) * sizeof(Range));
    h->by_off[i] = r;
    memmove(h->by_size + j + 1, h->by_size + j, (h->nfree - j) * sizeof(Range));
    h->by_size[j] = r;
    h->nfree++;
    return 0;
}

static long long
take(PageHeap *h, Py_ssize_t i) /* remove by_off[i]; its size */
{
    Range r = h->by_off[i];
    Py_ssize_t j = size_index(h, r.n, r.a);
    memmove(h->by_off + i, h->by_off + i + 1, (h->nfree - i - 1) * sizeof(Range));
    memmove(h->by_size + j, h->by_size + j + 1, (h->nfree - j - 1) * sizeof(Range));
    h->nfree--;
    return r.n;
}

static Py_ssize_t
starting_at(PageHeap *h, long long a) /* the index of the free range at a, or -1 */
{
    Py_ssize_t i = off_index(h, a);
    return i < h->nfree && h->by_off[i].a == a ? i : -1;
}

static Py_ssize_t
ending_at(PageHeap *h, long long e) /* the index of the free range ending at e, or -1 */
{
    Py_ssize_t i = off_index(h, e) - 1;
    return i >= 0 && h->by_off[i].a + h->by_off[i].n == e ? i : -1;
}

static int
release(PageHeap *h, long long a, long long n) /* back to the free ranges, coalesced */
{
    Py_ssize_t i = starting_at(h, a + n);
    if (i >= 0)
        n += take(h, i);
    i = ending_at(h, a);
    if (i >= 0) {
        long long b = h->by_off[i].a;
        n += take(h, i);
        a = b;
    }
    return put(h, a, n);
}

/* ------------------------------------------------------------ placement */
static Py_ssize_t
run_after(PageHeap *h, long long q) /* the first mapped run ending after page q */
{
    Py_ssize_t lo = 0, hi = h->nruns;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (h->runs[mid].e <= q)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static long long
mapped_in(PageHeap *h, long long q0, long long q1) /* the mapped pages in [q0, q1) */
{
    if (q0 >= q1)
        return 0;
    Py_ssize_t i = run_after(h, q0), j = run_after(h, q1);
    long long k = 0;
    if (j > i) { /* runs i..j-1 end by q1; run i may start before q0 */
        k = h->before[j] - h->before[i];
        if (h->runs[i].s < q0)
            k -= q0 - h->runs[i].s;
    }
    if (j < h->nruns && h->runs[j].s < q1) /* run j goes past q1 */
        k += q1 - (h->runs[j].s > q0 ? h->runs[j].s : q0);
    return k;
}

static long long
new_pages(PageHeap *h, long long p, long long n)
{
    long long q0 = p / PAGE, q1 = (p + n - 1) / PAGE + 1;
    return q1 - q0 - mapped_in(h, q0, q1);
}

static int
reserve_runs(PageHeap *h, Py_ssize_t need) /* room for need runs */
{
    if (need > h->capruns) {
        Py_ssize_t cap = h->capruns ? 2 * h->capruns : 16;
        if (cap < need)
            cap = need;
        PageRun *r = PyMem_Realloc(h->runs, cap * sizeof(PageRun));
        if (r == NULL)
            return PyErr_NoMemory(), -1;
        h->runs = r;
        long long *b = PyMem_Realloc(h->before, (cap + 1) * sizeof(long long));
        if (b == NULL)
            return PyErr_NoMemory(), -1;
        h->before = b;
        h->capruns = cap;
    }
    return 0;
}

/* page p, not mapped before, into the runs (room for one more run reserved) */
static void
runs_add(PageHeap *h, long long p)
{
    Py_ssize_t i = run_after(h, p);
    int left = i > 0 && h->runs[i - 1].e == p, right = i < h->nruns && h->runs[i].s == p + 1;
    if (left && right) {
        h->runs[i - 1].e = h->runs[i].e;
        memmove(h->runs + i, h->runs + i + 1, (h->nruns - i - 1) * sizeof(PageRun));
        h->nruns--;
    }
    else if (left)
        h->runs[i - 1].e = p + 1;
    else if (right)
        h->runs[i].s = p;
    else {
        memmove(h->runs + i + 1, h->runs + i, (h->nruns - i) * sizeof(PageRun));
        h->runs[i] = (PageRun){p, p + 1};
        h->nruns++;
    }
}

/* page p, mapped before, out of the runs (room for one more run reserved) */
static void
runs_remove(PageHeap *h, long long p)
{
    Py_ssize_t i = run_after(h, p); /* the run holding p */
    PageRun r = h->runs[i];
    if (r.s == p && r.e == p + 1) {
        memmove(h->runs + i, h->runs + i + 1, (h->nruns - i - 1) * sizeof(PageRun));
        h->nruns--;
    }
    else if (r.s == p)
        h->runs[i].s = p + 1;
    else if (r.e == p + 1)
        h->runs[i].e = p;
    else {
        memmove(h->runs + i + 2, h->runs + i + 1, (h->nruns - i - 1) * sizeof(PageRun));
        h->runs[i].e = p;
        h->runs[i + 1] = (PageRun){p + 1, r.e};
        h->nruns++;
    }
}

static void
count_runs(PageHeap *h) /* before[] from the runs */
{
    h->before[0] = 0;
    for (Py_ssize_t i = 0; i < h->nruns; i++)
        h->before[i + 1] = h->before[i] + h->runs[i].e - h->runs[i].s;
}

typedef struct {
    long long np, size, notedge, p, a;
} Key;

static int
key_less(const Key *x, const Key *y)
{
    if (x->np != y->np)
        return x->np < y->np;
    if (x->size != y->size)
        return x->size < y->size;
    if (x->notedge != y->notedge)
        return x->notedge < y->notedge;
    if (x->p != y->p)
        return x->p < y->p;
    return x->a < y->a;
}

static void
consider(PageHeap *h, long long p, long long a, long long size, long long n, Key *best,
         int *have)
{
    Key k = {new_pages(h, p, n), size, !(p == a || p == a + size - n), p, a};
    if (!*have || key_less(&k, best)) {
        *best = k;
        *have = 1;
    }
}

/* _expandable.PageHeap._spot: 1 with the spot (*pos, *ra, *rsize, *mapped), 0: the top */
static int
spot(PageHeap *h, long long n, long long *pos, long long *ra, long long *rsize, int *mapped)
{
    int have_fit = 0, have = 0;
    long long fit_lo = 0, fit_a = 0, fit_size = 0;
    Key best = {0, 0, 0, 0, 0};
    for (Py_ssize_t i = size_index(h, n, -1); i < h->nfree; i++) {
        long long size = h->by_size[i].n, a = h->by_size[i].a, end = a + size;
        consider(h, a, a, size, n, &best, &have);
        consider(h, end - n, a, size, n, &best, &have);
        long long first = a / PAGE, last = (end - 1) / PAGE;
        for (Py_ssize_t r = run_after(h, first); r < h->nruns && h->runs[r].s <= last; r++) {
            /* the mapped runs over the range: pages [rs, q) */
            long long rs = h->runs[r].s > first ? h->runs[r].s : first;
            long long q = h->runs[r].e < last + 1 ? h->runs[r].e : last + 1;
            long long lo = a > rs * PAGE ? a : rs * PAGE, hi = end < q * PAGE ? end : q * PAGE;
            if (hi - lo >= n && (!have_fit || lo < fit_lo)) {
                have_fit = 1;
                fit_lo = lo, fit_a = a, fit_size = size;
            }
            if (a <= lo && lo <= end - n)
                consider(h, lo, a, size, n, &best, &have);
            if (a <= hi - n && hi - n <= end - n)
                consider(h, hi - n, a, size, n, &best, &have);
        }
    }
    if (have_fit) {
        *pos = fit_lo, *ra = fit_a, *rsize = fit_size, *mapped = 1;
        return 1;
    }
    if (!have)
        return 0;
    Py_ssize_t t = ending_at(h, h->top);
    long long top = t >= 0 ? h->by_off[t].a : h->top;
    if (n <= h->capacity - top && new_pages(h, top, n) < best.np)
        return 0; /* the top, where it fits */
    *pos = best.p, *ra = best.a, *rsize = best.size, *mapped = 0;
    return 1;
}

static PyObject *
page_list(long long *pages, Py_ssize_t k)
{
    PyObject *lst = PyList_New(k);
    if (lst == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *v = PyLong_FromLongLong(pages[i]);
        if (v == NULL) {
            Py_DECREF(lst);
            return NULL;
        }
        PyList_SET_ITEM(lst, i, v);
    }
    return lst;
}

static int
call_pages(PageHeap *h, PyObject *name, long long *pages, Py_ssize_t k)
{
    PyObject *lst = page_list(pages, k);
    if (lst == NULL)
        return -1;
    PyObject *r = PyObject_CallMethodOneArg((PyObject *)h, name, lst);
    Py_DECREF(lst);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* the mapped pages no live range touches, ascending (a new array, *k of them) */
static long long *
free_pages(PageHeap *h, Py_ssize_t *k)
{
    long long *out = PyMem_Malloc((h->mapped + 1) * sizeof(long long));
    if (out == NULL)
        return (long long *)PyErr_NoMemory();
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < h->nfree; i++) {
        long long a = h->by_off[i].a, end = a + h->by_off[i].n;
        long long first = (a + PAGE - 1) / PAGE;
        long long last = end == h->top ? (end + PAGE - 1) / PAGE : end / PAGE;
        for (Py_ssize_t r = run_after(h, first); r < h->nruns && h->runs[r].s < last; r++)
            for (long long p = h->runs[r].s > first ? h->runs[r].s : first;
                 p < h->runs[r].e && p < last; p++)
                out[m++] = p;
    }
    *k = m;
    return out;
}

typedef struct {
    Py_ssize_t start, len;
} Run;

static int
run_cmp(const void *x, const void *y) /* longest first; then lowest (a stable sort's order) */
{
    const Run *a = x, *b = y;
    if (a->len != b->len)
        return a->len > b->len ? -1 : 1;
    return a->start < b->start ? -1 : a->start > b->start;
}

/* unmap need free pages (need < 0: all), the largest free runs first, each from its high
 * end; the number unmapped, or -1 */
static Py_ssize_t
unmap_free(PageHeap *h, long long need)
{
    Py_ssize_t k, nruns = 0, done = 0;
    long long *pages = free_pages(h, &k);
    if (pages == NULL)
        return -1;
    Run *runs = PyMem_Malloc((k + 1) * sizeof(Run));
    if (runs == NULL) {
        PyMem_Free(pages);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        if (nruns && pages[i] == pages[i - 1] + 1)
            runs[nruns - 1].len++;
        else
            runs[nruns++] = (Run){i, 1};
    }
    qsort(runs, nruns, sizeof(Run), run_cmp);
    for (Py_ssize_t r = 0; r < nruns; r++) {
        if (need >= 0 && done >= need)
            break;
        Py_ssize_t len = runs[r].len;
        if (need >= 0 && need - done < len)
            len = (Py_ssize_t)(need - done);
        if (call_pages(h, s_unmap_pages, pages + runs[r].start + runs[r].len - len, len) < 0) {
            done = -1;
            break;
        }
        done += len;
    }
    PyMem_Free(runs);
    PyMem_Free(pages);
    return done;
}

static int
map_missing(PageHeap *h, long long *pages, Py_ssize_t k, long long peak)
{
    double excess = (double)(h->mapped + k) * PAGE - h->keep * (double)peak;
    int rc = 0;
    if (h->cap_bytes > 0 && (double)(h->mapped + k) * PAGE - (double)h->cap_bytes > excess)
        excess = (double)(h->mapped + k) * PAGE - (double)h->cap_bytes;
    if (excess > 0) {
        long long e = (long long)excess;
        if (unmap_free(h, (e + PAGE - 1) / PAGE) < 0)
            return -1;
    }
    if (call_pages(h, s_map_pages, pages, k) < 0) {
        rc = -1;
        if (PyErr_ExceptionMatches(PyExc_MemoryError)) {
            PyObject *et, *ev, *tb;
            PyErr_Fetch(&et, &ev, &tb);
            Py_ssize_t freed = unmap_free(h, -1);
            if (freed == 0) {
                PyErr_Restore(et, ev, tb);
            } else {
                Py_XDECREF(et);
                Py_XDECREF(ev);
                Py_XDECREF(tb);
                if (freed > 0) { /* the pages the refused call did not map, once more */
                    Py_ssize_t left = 0;
                    for (Py_ssize_t i = 0; i < k; i++)
                        if (!h->map[pages[i]])
                            pages[left++] = pages[i];
                    rc = left ? call_pages(h, s_map_pages, pages, left) : 0;
                }
            }
        }
    }
    if (h->mapped > h->peak_mapped)
        h->peak_mapped = h->mapped;
    return rc;
}

/* ------------------------------------------------------------ the type */
static int heap_clear(PageHeap *h);

static int
heap_init(PageHeap *h, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"capacity", "keep", NULL};
    long long capacity;
    double keep = 1.25;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "L|d", kwlist, &capacity, &keep))
        return -1;
    if (capacity <= 0) {
        PyErr_Format(PyExc_ValueError, "PageHeap: capacity must be > 0, got %lld", capacity);
        return -1;
    }
    heap_clear(h); /* (a second __init__ starts from nothing, as the Python heap's does) */
    PyMem_Free(h->map);
    h->npages = (Py_ssize_t)((capacity + PAGE - 1) / PAGE);
    h->map = PyMem_Calloc(h->npages, 1);
    if (h->map == NULL || reserve_runs(h, 1) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    h->nruns = 0;
    count_runs(h);
    h->capacity = capacity, h->keep = keep, h->cap_bytes = 0;
    h->top = h->live = h->peak_live = h->peak_mapped = 0;
    h->mapped = h->nfree = 0;
    h->base = 0, h->gone_key = -1; /* (DEAD_STREAM: gone keys lie below it) */
    return 0;
}

static int
heap_traverse(PageHeap *h, visitproc visit, void *arg)
{
    Py_VISIT(h->events);
    Py_VISIT(h->state);
    for (Py_ssize_t i = 0; i < h->npend; i++)
        Py_VISIT(h->pend[i].event);
    return 0;
}

static int
heap_clear(PageHeap *h)
{
    Py_CLEAR(h->events);
    Py_CLEAR(h->state);
    /* detached first: an event's finalizer may give back ranges here meanwhile */
    Pending *p = h->pend;
    Py_ssize_t n = h->npend;
    h->pend = NULL, h->npend = h->cappend = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyMem_Free(p[i].spans);
        Py_DECREF(p[i].event);
    }
    PyMem_Free(p);
    return 0;
}

static void
heap_dealloc(PageHeap *h)
{
    PyObject_GC_UnTrack(h);
    heap_clear(h);
    PyMem_Free(h->pend);
    PyMem_Free(h->map);
    PyMem_Free(h->by_off);
    PyMem_Free(h->by_size);
    PyMem_Free(h->runs);
    PyMem_Free(h->before);
    Py_TYPE(h)->tp_free((PyObject *)h);
}

/* a new range of n bytes (demand: the peak the mapped bytes stay within keep x of; 0: the
 * live ranges'); its offset, or -1 with an exception */
static long long
place(PageHeap *h, long long n, long long demand)
{
    long long a, b, size;
    int mapped = 0;
    if (h->map == NULL)
        return PyErr_Format(PyExc_ValueError, "PageHeap.alloc: the heap was not built"), -1;
    if (n <= 0)
        return PyErr_Format(PyExc_ValueError, "PageHeap.alloc: n must be > 0, got %lld", n), -1;
    if (n > h->capacity)
        return PyErr_Format(PyExc_MemoryError, "expandable segments: %lld bytes do not fit in "
                            "the %lld reserved bytes of address space", n, h->capacity), -1;
    if (reserve(h, h->nfree + 2) < 0) /* (the puts below cannot fail then) */
        return -1;
    if (spot(h, n, &a, &b, &size, &mapped)) {
        take(h, starting_at(h, b));
        if (a > b)
            put(h, b, a - b);
        if (a + n < b + size)
            put(h, a + n, b + size - a - n);
    }
    else {
        Py_ssize_t t = ending_at(h, h->top);
        a = t >= 0 ? h->by_off[t].a : h->top;
        if (n > h->capacity - a)
            return PyErr_Format(PyExc_MemoryError, "expandable segments: %lld bytes do not "
                                "fit in the %lld reserved bytes of address space", n,
                                h->capacity), -1;
        if (t >= 0)
            take(h, t);
        h->top = a + n;
    }
    long long peak = h->peak_live > h->live + n ? h->peak_live : h->live + n;
    if (!mapped) { /* (the range is out of the free ranges: an unmap for room skips it) */
        long long first = a / PAGE, last = (a + n - 1) / PAGE, *missing;
        Py_ssize_t k = 0;
        missing = PyMem_Malloc((last - first + 1) * sizeof(long long));
        if (missing == NULL) {
            PyErr_NoMemory();
            (void)release(h, a, n); /* (room reserved above) */
            return -1;
        }
        for (long long p = first; p <= last; p++)
            if (!h->map[p])
                missing[k++] = p;
        int rc = k ? map_missing(h, missing, k, demand ? demand : peak) : 0;
        PyMem_Free(missing);
        if (rc < 0) {
            PyObject *et, *ev, *tb;
            PyErr_Fetch(&et, &ev, &tb);
            if (release(h, a, n) < 0) {
                Py_XDECREF(et);
                Py_XDECREF(ev);
                Py_XDECREF(tb);
                return -1;
            }
            PyErr_Restore(et, ev, tb);
            return -1;
        }
    }
    h->live += n;
    h->peak_live = peak;
    return a;
}

static PyObject *
heap_alloc(PageHeap *h, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"n", "demand", NULL};
    long long n, demand = 0;
    PyObject *demand_obj = NULL;
    int over = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "L|O", kwlist, &n, &demand_obj))
        return NULL;
    if (demand_obj != NULL) { /* (a Python int of any size: past 2**63 - 1, that) */
        demand = PyLong_AsLongLongAndOverflow(demand_obj, &over);
        if (demand == -1 && PyErr_Occurred())
            return NULL;
        if (over)
            demand = over > 0 ? LLONG_MAX : 0;
    }
    long long a = place(h, n, demand);
    return a < 0 ? NULL : PyLong_FromLongLong(a);
}

/* the range at a of n bytes back to the free ranges; 0, or -1 with a ValueError */
static int
unplace(PageHeap *h, long long a, long long n)
{
    if (h->map == NULL)
        return PyErr_Format(PyExc_ValueError, "PageHeap.free: the heap was not built"), -1;
    if (a < 0 || n <= 0 || n > h->top - a)
        return PyErr_Format(PyExc_ValueError, "PageHeap.free: the range at %lld of %lld bytes "
                            "must lie in [0, %lld), the ranges placed", a, n, h->top), -1;
    Py_ssize_t i = off_index(h, a);
    if ((i > 0 && h->by_off[i - 1].a + h->by_off[i - 1].n > a)
        || (i < h->nfree && h->by_off[i].a < a + n))
        return PyErr_Format(PyExc_ValueError, "PageHeap.free: the range at %lld of %lld bytes "
                            "must be placed, and it overlaps a free one (freed twice?)", a, n),
               -1;
    h->live -= n;
    return release(h, a, n);
}

static PyObject *
heap_free(PageHeap *h, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "PageHeap.free(a, n)");
        return NULL;
    }
    long long a = PyLong_AsLongLong(args[0]), n = PyLong_AsLongLong(args[1]);
    if ((a == -1 || n == -1) && PyErr_Occurred())
        return NULL;
    if (unplace(h, a, n) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------ stream ordering */
static PyObject *
error_class(const char *module, const char *name) /* a cuflow exception class (new ref) */
{
    PyObject *m = PyImport_ImportModule(module);
    if (m == NULL)
        return NULL;
    PyObject *c = PyObject_GetAttrString(m, name);
    Py_DECREF(m);
    return c;
}

/* events[which](args...): its result (new reference), or NULL.  The callable is held for
 * the call: the callback may set the heap's events anew. */
static PyObject *
ev_call(PageHeap *h, int which, PyObject *const *args, Py_ssize_t nargs)
{
    if (h->events == NULL || h->events == Py_None) {
        PyErr_SetString(PyExc_ValueError, "PageHeap: no events to order the give-backs by");
        return NULL;
    }
    PyObject *f = Py_NewRef(PyTuple_GET_ITEM(h->events, which));
    PyObject *r = PyObject_Vectorcall(f, args, nargs, NULL);
    Py_DECREF(f);
    return r;
}

static int
ev_call0(PageHeap *h, int which, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *r = ev_call(h, which, args, nargs);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* whether event's work is done: 1, 0, or -1 with a CudaError */
static int
ev_done(PageHeap *h, PyObject *event)
{
    PyObject *r = ev_call(h, EV_QUERY, &event, 1);
    if (r == NULL)
        return -1;
    long status = PyLong_AsLong(r);
    Py_DECREF(r);
    if (status == -1 && PyErr_Occurred())
        return -1;
    if (status == 0 || status == NOT_READY)
        return status == 0;
    PyObject *c = error_class("cuflow._errors", "CudaError");
    if (c != NULL) {
        PyErr_Format(c, "cuflow.memory: expandable segments: a query of the event ordering "
                     "a range given back returned CUDA status %ld", status);
        Py_DECREF(c);
    }
    return -1;
}

static Py_ssize_t
find_pending(PageHeap *h, long long key)
{
    for (Py_ssize_t i = 0; i < h->npend; i++)
        if (h->pend[i].key == key)
            return i;
    return -1;
}

static Py_ssize_t
find_event(PageHeap *h, PyObject *event) /* the entry of event (callbacks move entries) */
{
    for (Py_ssize_t i = 0; i < h->npend; i++)
        if (h->pend[i].event == event)
            return i;
    return -1;
}

static int
overlaps(Pending *p, long long lo, long long hi)
{
    for (Py_ssize_t j = 0; j < p->nspans; j++)
        if (p->spans[j].lo < hi && lo < p->spans[j].hi)
            return 1;
    return 0;
}

/* event destroyed and its entry (wherever it is now) forgotten; 0, or -1 (the entry stays) */
static int
drop_event(PageHeap *h, PyObject *event)
{
    if (ev_call0(h, EV_DESTROY, &event, 1) < 0)
        return -1;
    Py_ssize_t i = find_event(h, event);
    if (i >= 0) {
        Pending p = h->pend[i];
        memmove(h->pend + i, h->pend + i + 1, (h->npend - i - 1) * sizeof(Pending));
        h->npend--;
        PyMem_Free(p.spans);
        Py_DECREF(p.event);
    }
    return 0;
}

/* the events of the entries (other than stream's) over [lo, hi) (every one for an empty
 * range): a new list, taken before any callback runs (callbacks may move the entries) */
static PyObject *
events_over(PageHeap *h, long long lo, long long hi, long long stream)
{
    PyObject *out = PyList_New(0);
    for (Py_ssize_t i = 0; out != NULL && i < h->npend; i++) {
        Pending *p = &h->pend[i];
        if (p->key != stream && (lo >= hi || overlaps(p, lo, hi))
            && PyList_Append(out, p->event) < 0)
            Py_CLEAR(out);
    }
    return out;
}

/* make stream wait for the give-backs of other streams over [lo, hi) whose work is not done;
 * forget the streams whose work is (every other one, for an empty range) */
static int
order(PageHeap *h, long long lo, long long hi, long long stream)
{
    PyObject *evs = events_over(h, lo, hi, stream);
    if (evs == NULL)
        return -1;
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(evs); i++) {
        PyObject *event = PyList_GET_ITEM(evs, i);
        if (find_event(h, event) < 0)
            continue; /* (forgotten meanwhile) */
        int done = ev_done(h, event);
        if (done < 0)
            rc = -1;
        else if (done)
            rc = drop_event(h, event);
        else if (lo < hi) {
            PyObject *args[3] = {PyLong_FromLongLong(stream), event, PyLong_FromLong(0)};
            rc = args[0] == NULL || args[2] == NULL ? -1 : ev_call0(h, EV_WAIT, args, 3);
            Py_XDECREF(args[0]);
            Py_XDECREF(args[2]);
        }
    }
    Py_DECREF(evs);
    return rc;
}

/* wait on the host for the work of the streams that gave back ranges over [lo, hi), and
 * forget them (before their pages are unmapped) */
static int
settle(PageHeap *h, long long lo, long long hi)
{
    PyObject *evs = events_over(h, lo, hi > lo ? hi : lo + 1, LLONG_MIN);
    if (evs == NULL)
        return -1;
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(evs); i++) {
        PyObject *event = PyList_GET_ITEM(evs, i);
        if (find_event(h, event) >= 0)
            rc = ev_call0(h, EV_SYNC, &event, 1) < 0 ? -1 : drop_event(h, event);
    }
    Py_DECREF(evs);
    return rc;
}

static long long
rounded(long long nbytes) /* (past the largest multiple of ALIGN: that, which fits nowhere) */
{
    if (nbytes > LLONG_MAX - ALIGN)
        return LLONG_MAX / ALIGN * ALIGN;
    return nbytes <= ALIGN ? ALIGN : (nbytes + ALIGN - 1) / ALIGN * ALIGN;
}

/* the arguments named names[0..want) (positional, then keywords) as long longs */
static int
fast_ll(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, Py_ssize_t want,
        const char *const *names, const char *sig, long long *out)
{
    PyObject *got[4] = {NULL, NULL, NULL, NULL};
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs > want)
        goto bad;
    for (Py_ssize_t i = 0; i < nargs; i++)
        got[i] = args[i];
    for (Py_ssize_t k = 0; k < nkw; k++) {
        const char *name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
        Py_ssize_t i = 0;
        if (name == NULL)
            return -1;
        while (i < want && strcmp(name, names[i]) != 0)
            i++;
        if (i == want || got[i] != NULL)
            goto bad;
        got[i] = args[nargs + k];
    }
    for (Py_ssize_t i = 0; i < want; i++) {
        if (got[i] == NULL)
            goto bad;
        out[i] = PyLong_AsLongLong(got[i]);
        if (out[i] == -1 && PyErr_Occurred())
            return -1;
    }
    return 0;
bad:
    PyErr_Format(PyExc_TypeError, "%s: the arguments are %s", sig, sig);
    return -1;
}

static const char *const LEND_ARGS[] = {"nbytes", "stream"};
static const char *const GIVE_BACK_ARGS[] = {"ptr", "nbytes", "stream"};
static const char *const SETTLE_ARGS[] = {"lo", "hi"};

static int
state_ll(PyObject *state, PyObject *name, long long *out)
{
    PyObject *v = PyObject_GetAttr(state, name);
    if (v == NULL)
        return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

static int
has_events(PageHeap *h)
{
    return h->events != NULL && h->events != Py_None;
}

static PyObject *
heap_lend(PageHeap *h, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    long long v[2], demand = 0;
    if (fast_ll(args, nargs, kwnames, 2, LEND_ARGS, "PageHeap.lend(nbytes, stream)", v) < 0)
        return NULL;
    long long n = rounded(v[0]), stream = v[1];
    if (h->state != NULL && h->state != Py_None) {
        long long peak, req;
        if (state_ll(h->state, s_peak_requested, &peak) < 0
            || state_ll(h->state, s_requested, &req) < 0)
            return NULL;
        demand = req > LLONG_MAX - n ? LLONG_MAX : req + n;
        if (peak > demand)
            demand = peak;
    }
    long long a = place(h, n, demand);
    if (a < 0)
        return NULL;
    if (has_events(h) && (h->npend > 1 || (h->npend == 1 && h->pend[0].key != stream))) {
        if (order(h, a, a + n, stream) < 0) {
            PyObject *et, *ev, *tb;
            PyErr_Fetch(&et, &ev, &tb);
            (void)unplace(h, a, n); /* (placed just now: it goes back) */
            PyErr_Restore(et, ev, tb);
            return NULL;
        }
    }
    return PyLong_FromLongLong(h->base + a);
}

/* event's entry forgotten if it holds no span (made for a give-back that failed), keeping
 * the exception set */
static void
drop_if_unused(PageHeap *h, PyObject *event)
{
    Py_ssize_t i = find_event(h, event);
    if (i >= 0 && h->pend[i].nspans == 0) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (drop_event(h, event) < 0)
            PyErr_Clear();
        PyErr_Restore(et, ev, tb);
    }
}

/* stream's entry, made (with a new event) where it has none; its event (a new reference) */
static PyObject *
entry_event(PageHeap *h, long long stream)
{
    Py_ssize_t i = find_pending(h, stream);
    if (i >= 0)
        return Py_NewRef(h->pend[i].event);
    PyObject *event = ev_call(h, EV_CREATE, NULL, 0);
    if (event == NULL)
        return NULL;
    i = find_pending(h, stream); /* (the callback may have made one) */
    if (i >= 0) {
        PyObject *made = Py_NewRef(h->pend[i].event);
        int rc = ev_call0(h, EV_DESTROY, &event, 1);
        Py_DECREF(event);
        if (rc < 0) {
            Py_DECREF(made);
            return NULL;
        }
        return made;
    }
    if (h->npend == h->cappend) {
        Py_ssize_t cap = h->cappend ? 2 * h->cappend : 4;
        Pending *q = PyMem_Realloc(h->pend, cap * sizeof(Pending));
        if (q == NULL) {
            Py_DECREF(event);
            return PyErr_NoMemory();
        }
        h->pend = q, h->cappend = cap;
    }
    h->pend[h->npend++] = (Pending){stream, Py_NewRef(event), NULL, 0, 0};
    return event;
}

static PyObject *
heap_give_back(PageHeap *h, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    long long v[3];
    if (fast_ll(args, nargs, kwnames, 3, GIVE_BACK_ARGS,
                "PageHeap.give_back(ptr, nbytes, stream)", v) < 0)
        return NULL;
    long long a = v[0] - h->base, n = rounded(v[1]), stream = v[2];
    PyObject *event = NULL;
    if (has_events(h)) {
        /* recorded before the range goes back: a failed record leaves it placed */
        if ((event = entry_event(h, stream)) == NULL)
            return NULL;
        PyObject *sargs[2] = {event, PyLong_FromLongLong(stream)};
        int rc = sargs[1] == NULL ? -1 : ev_call0(h, EV_RECORD, sargs, 2);
        Py_XDECREF(sargs[1]);
        Py_ssize_t i = find_event(h, event);
        if (rc == 0 && i >= 0 && h->pend[i].nspans == h->pend[i].cap) { /* room, first */
            Pending *p = &h->pend[i];
            Py_ssize_t cap = p->cap ? 2 * p->cap : 4;
            Span *q = PyMem_Realloc(p->spans, cap * sizeof(Span));
            if (q == NULL)
                rc = -1, PyErr_NoMemory();
            else
                p->spans = q, p->cap = cap;
        }
        if (rc < 0) {
            drop_if_unused(h, event);
            Py_DECREF(event);
            return NULL;
        }
    }
    if (unplace(h, a, n) < 0) {
        if (PyErr_ExceptionMatches(PyExc_ValueError)) {
            PyObject *et, *ev, *tb;
            PyErr_Fetch(&et, &ev, &tb);
            PyObject *c = error_class("cuflow.memory._exceptions", "DoubleFreeError");
            PyObject *ptr = PyLong_FromLongLong(v[0]);
            PyObject *hex = ptr == NULL ? NULL : PyNumber_ToBase(ptr, 16);
            PyObject *msg = ev == NULL ? NULL : PyObject_Str(ev);
            if (c != NULL && hex != NULL && msg != NULL)
                PyErr_Format(c, "cuflow.memory: expandable segments: %U of %lld bytes is no "
                             "segment this backend lends: %U", hex, v[1], msg);
            Py_XDECREF(c);
            Py_XDECREF(ptr);
            Py_XDECREF(hex);
            Py_XDECREF(msg);
            if (!PyErr_Occurred())
                PyErr_Restore(et, ev, tb);
            else {
                Py_XDECREF(et);
                Py_XDECREF(ev);
                Py_XDECREF(tb);
            }
        }
        if (event != NULL) {
            drop_if_unused(h, event);
            Py_DECREF(event);
        }
        return NULL;
    }
    if (event == NULL)
        Py_RETURN_NONE;
    Py_ssize_t i = find_event(h, event);
    Py_DECREF(event);
    if (i >= 0) { /* (the entry is the event's, under whatever key it has now) */
        Pending *p = &h->pend[i];
        if (p->nspans == MOST_SPANS) { /* one span over them: waiting for it waits for each */
            Span all = p->spans[0];
            for (Py_ssize_t j = 1; j < p->nspans; j++) {
                if (p->spans[j].lo < all.lo)
                    all.lo = p->spans[j].lo;
                if (p->spans[j].hi > all.hi)
                    all.hi = p->spans[j].hi;
            }
            p->spans[0] = all;
            p->nspans = 1;
        }
        p->spans[p->nspans++] = (Span){a, a + n}; /* (room made above) */
    }
    if (h->npend > MOST_STREAMS && order(h, 0, 0, stream) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
heap_settle(PageHeap *h, PyObject *const *args, Py_ssize_t nargs)
{
    long long v[2];
    if (fast_ll(args, nargs, NULL, 2, SETTLE_ARGS, "PageHeap.settle(lo, hi)", v) < 0)
        return NULL;
    if (has_events(h) && settle(h, v[0], v[1]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
heap_stream_gone(PageHeap *h, PyObject *arg)
{
    long long stream = PyLong_AsLongLong(arg);
    if (stream == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t i = find_pending(h, stream);
    if (i >= 0) { /* last, under its new key (the Python heap's dict order) */
        Pending p = h->pend[i];
        memmove(h->pend + i, h->pend + i + 1, (h->npend - i - 1) * sizeof(Pending));
        p.key = --h->gone_key;
        h->pend[h->npend - 1] = p;
    }
    Py_RETURN_NONE;
}

static PyObject *
heap_pending(PageHeap *h, PyObject *Py_UNUSED(ignored))
{
    /* a copy first: building the Python objects may run a collection, whose finalizers may
     * give back ranges here */
    Py_ssize_t n = h->npend, total = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        total += h->pend[i].nspans;
    Pending *cp = PyMem_Malloc((n + 1) * sizeof(Pending));
    Span *sp = PyMem_Malloc((total + 1) * sizeof(Span));
    PyObject *d = cp == NULL || sp == NULL ? PyErr_NoMemory() : PyDict_New();
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; d != NULL && i < n; i++) {
        cp[i] = h->pend[i];
        Py_INCREF(cp[i].event);
        memcpy(sp + at, h->pend[i].spans, cp[i].nspans * sizeof(Span));
        cp[i].spans = sp + at;
        at += cp[i].nspans;
    }
    for (Py_ssize_t i = 0; d != NULL && i < n; i++) {
        PyObject *lst = PyList_New(cp[i].nspans), *k = PyLong_FromLongLong(cp[i].key);
        for (Py_ssize_t j = 0; lst != NULL && j < cp[i].nspans; j++) {
            PyObject *t = Py_BuildValue("(LL)", cp[i].spans[j].lo, cp[i].spans[j].hi);
            if (t == NULL)
                Py_CLEAR(lst);
            else
                PyList_SET_ITEM(lst, j, t);
        }
        PyObject *t = lst == NULL ? NULL : PyTuple_Pack(2, cp[i].event, lst);
        if (t == NULL || k == NULL || PyDict_SetItem(d, k, t) < 0)
            Py_CLEAR(d);
        Py_XDECREF(t);
        Py_XDECREF(k);
        Py_XDECREF(lst);
    }
    if (cp != NULL && sp != NULL)
        for (Py_ssize_t i = 0; i < n; i++)
            Py_DECREF(cp[i].event);
    PyMem_Free(cp);
    PyMem_Free(sp);
    return d;
}

static PyObject *
heap_trim(PageHeap *h, PyObject *const *args, Py_ssize_t nargs)
{
    long long need = -1;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "PageHeap.trim(pages=None)");
        return NULL;
    }
    if (nargs == 1 && args[0] != Py_None) {
        need = PyLong_AsLongLong(args[0]);
        if (need == -1 && PyErr_Occurred())
            return NULL;
        if (need < 0)
            return PyErr_Format(PyExc_ValueError, "PageHeap.trim: pages must be >= 0 or None, "
                                "got %lld", need);
    }
    if (h->map == NULL)
        return PyLong_FromLong(0);
    Py_ssize_t k = unmap_free(h, need);
    return k < 0 ? NULL : PyLong_FromSsize_t(k);
}

static PyObject *
heap_free_pages(PageHeap *h, PyObject *Py_UNUSED(ignored))
{
    if (h->map == NULL)
        return PyList_New(0);
    Py_ssize_t k;
    long long *pages = free_pages(h, &k);
    if (pages == NULL)
        return NULL;
    PyObject *lst = page_list(pages, k);
    PyMem_Free(pages);
    return lst;
}

static PyObject *
heap_free_ranges(PageHeap *h, PyObject *Py_UNUSED(ignored))
{
    PyObject *lst = PyList_New(h->nfree);
    for (Py_ssize_t i = 0; lst != NULL && i < h->nfree; i++) {
        PyObject *t = Py_BuildValue("(LL)", h->by_off[i].a, h->by_off[i].n);
        if (t == NULL)
            Py_CLEAR(lst);
        else
            PyList_SET_ITEM(lst, i, t);
    }
    return lst;
}

static PyObject *
set_pages(PageHeap *h, PyObject *pages, unsigned char value)
{
    if (h->map == NULL)
        return PyErr_Format(PyExc_ValueError, "PageHeap: the heap was not built");
    PyObject *it = PyObject_GetIter(pages), *v;
    if (it == NULL)
        return NULL;
    while ((v = PyIter_Next(it)) != NULL) {
        long long p = PyLong_AsLongLong(v);
        Py_DECREF(v);
        if (p == -1 && PyErr_Occurred())
            break;
        if (p < 0 || p >= h->npages) {
            PyErr_Format(PyExc_ValueError, "page %lld outside [0, %zd)", p, h->npages);
            break;
        }
        if (h->map[p] != value) {
            if (reserve_runs(h, h->nruns + 1) < 0)
                break;
            if (value)
                runs_add(h, p);
            else
                runs_remove(h, p);
            h->map[p] = value;
            h->mapped += value ? 1 : -1;
        }
    }
    count_runs(h);
    Py_DECREF(it);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
heap_map_pages(PageHeap *h, PyObject *pages)
{
    return set_pages(h, pages, 1);
}

static PyObject *
heap_unmap_pages(PageHeap *h, PyObject *pages)
{
    return set_pages(h, pages, 0);
}

static PyObject *
heap_get_mapped(PageHeap *h, void *Py_UNUSED(closure))
{
    PyObject *s = PySet_New(NULL);
    for (Py_ssize_t p = 0; s != NULL && p < h->npages; p++) {
        if (!h->map[p])
            continue;
        PyObject *v = PyLong_FromSsize_t(p);
        if (v == NULL || PySet_Add(s, v) < 0)
            Py_CLEAR(s);
        Py_XDECREF(v);
    }
    return s;
}

static PyMethodDef heap_methods[] = {
    {"alloc", (PyCFunction)(void (*)(void))heap_alloc, METH_VARARGS | METH_KEYWORDS,
     "alloc(n, demand=0) -> the offset of a new range of n bytes"},
    {"free", (PyCFunction)(void (*)(void))heap_free, METH_FASTCALL,
     "free(a, n): the range back; its pages stay mapped"},
    {"trim", (PyCFunction)(void (*)(void))heap_trim, METH_FASTCALL,
     "trim(pages=None) -> free pages unmapped (every one, or that many)"},
    {"free_pages", (PyCFunction)heap_free_pages, METH_NOARGS,
     "free_pages() -> the mapped pages no live range touches, ascending"},
    {"free_ranges", (PyCFunction)heap_free_ranges, METH_NOARGS,
     "free_ranges() -> [(offset, size)] ascending"},
    {"map_pages", (PyCFunction)heap_map_pages, METH_O, "record pages as mapped"},
    {"unmap_pages", (PyCFunction)heap_unmap_pages, METH_O, "record pages as unmapped"},
    {"lend", (PyCFunction)(void (*)(void))heap_lend, METH_FASTCALL | METH_KEYWORDS,
     "lend(nbytes, stream) -> the address of a new segment (the backend's alloc)"},
    {"give_back", (PyCFunction)(void (*)(void))heap_give_back, METH_FASTCALL | METH_KEYWORDS,
     "give_back(ptr, nbytes, stream): a segment back (the backend's free)"},
    {"settle", (PyCFunction)(void (*)(void))heap_settle, METH_FASTCALL,
     "settle(lo, hi): wait for the work of the streams that gave back ranges over [lo, hi)"},
    {"stream_gone", (PyCFunction)heap_stream_gone, METH_O,
     "stream_gone(stream): its give-backs stay under a key no stream has"},
    {"pending", (PyCFunction)heap_pending, METH_NOARGS,
     "pending() -> {stream: (event, [(lo, hi)])}, the give-backs whose work may not be done"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef heap_members[] = {
    {"capacity", T_LONGLONG, offsetof(PageHeap, capacity), READONLY, NULL},
    {"keep", T_DOUBLE, offsetof(PageHeap, keep), READONLY, NULL},
    {"top", T_LONGLONG, offsetof(PageHeap, top), READONLY, NULL},
    {"live", T_LONGLONG, offsetof(PageHeap, live), READONLY, NULL},
    {"peak_live", T_LONGLONG, offsetof(PageHeap, peak_live), READONLY, NULL},
    {"peak_mapped", T_LONGLONG, offsetof(PageHeap, peak_mapped), 0,
     "the most pages mapped at once (settable: a peak reset)"},
    {"cap", T_LONGLONG, offsetof(PageHeap, cap_bytes), 0,
     "most bytes mapped where free pages allow (0: no cap)"},
    {"mapped_count", T_PYSSIZET, offsetof(PageHeap, mapped), READONLY, NULL},
    {"base", T_LONGLONG, offsetof(PageHeap, base), 0, "the address of offset 0"},
    {"state", T_OBJECT, offsetof(PageHeap, state), 0,
     "the pool's counters (peak_requested, requested), or None"},
    {NULL, 0, 0, 0, NULL},
};

static PyObject *
heap_get_events(PageHeap *h, void *Py_UNUSED(closure))
{
    PyObject *e = h->events == NULL ? Py_None : h->events;
    Py_INCREF(e);
    return e;
}

static int
heap_set_events(PageHeap *h, PyObject *value, void *Py_UNUSED(closure))
{
    if (value == NULL)
        value = Py_None;
    if (value != Py_None) {
        int ok = PyTuple_Check(value) && PyTuple_GET_SIZE(value) == EV_COUNT;
        for (Py_ssize_t i = 0; ok && i < EV_COUNT; i++)
            ok = PyCallable_Check(PyTuple_GET_ITEM(value, i));
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "PageHeap.events must be None or a tuple of %d "
                         "callables (create, record, query, wait, sync, destroy), got %R",
                         EV_COUNT, value);
            return -1;
        }
    }
    if (h->npend) {
        PyErr_SetString(PyExc_ValueError, "PageHeap.events: give-backs are pending on the "
                        "events in use (settle them first)");
        return -1;
    }
    Py_INCREF(value);
    Py_XSETREF(h->events, value);
    return 0;
}

static PyGetSetDef heap_getset[] = {
    {"mapped", (getter)heap_get_mapped, NULL, "the mapped pages (a new set)", NULL},
    {"events", (getter)heap_get_events, (setter)heap_set_events,
     "(create, record, query, wait, sync, destroy), or None: work is synchronous", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject PageHeapType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cuflow.memory._hotpath.PageHeap",
    .tp_doc = "Expandable segments' placement (cuflow.memory._expandable.PageHeap) in C.",
    .tp_basicsize = sizeof(PageHeap),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)heap_traverse,
    .tp_clear = (inquiry)heap_clear,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)heap_init,
    .tp_dealloc = (destructor)heap_dealloc,
    .tp_methods = heap_methods,
    .tp_members = heap_members,
    .tp_getset = heap_getset,
};

int
add_pageheap(PyObject *m)
{
    if ((s_map_pages = PyUnicode_InternFromString("map_pages")) == NULL
        || (s_unmap_pages = PyUnicode_InternFromString("unmap_pages")) == NULL
        || (s_requested = PyUnicode_InternFromString("requested")) == NULL
        || (s_peak_requested = PyUnicode_InternFromString("peak_requested")) == NULL
        || PyType_Ready(&PageHeapType) < 0)
        return -1;
    Py_INCREF(&PageHeapType);
    if (PyModule_AddObject(m, "PageHeap", (PyObject *)&PageHeapType) < 0) {
        Py_DECREF(&PageHeapType);
        return -1;
    }
    return 0;
}
