/* tkjit's native launch path: one kernel's argument checks, parameter packing and
 * cuLaunchKernel, in C.
 *
 * Built on first use by tkjit/runtime/native.py with the system's C compiler (CPython's API
 * only: no torch or CUDA headers) and kept in tkjit's disk cache. A Launch object is made per
 * kernel from a plain-data spec (native.py, Launch.__init__ below) and does, per call, what the
 * Python fast path of launcher.py does, in the same order and with the same acceptance: anything
 * unusual goes to `slow(args, stream, checked)`, which names the problem (a LaunchError) or
 * normalizes the arguments and calls again. cuLaunchKernel is called through a function
 * pointer given as an integer (libcuda's symbol; tests give a ctypes callback).
 *
 * Tensors are read through their Python attributes, as the Python path reads them (dtype,
 * get_device(), is_contiguous(), shape, data_ptr()): a tensor's metadata can change in place
 * (resize_, set_, as_strided_), so nothing about it is cached between calls.
 *
 * Strided views (runtime/strides.py): a tensor whose spec entry says `views` (its metadata's
 * "strides": "map": only TMA maps address it) may be a view; its stride() is then read too and
 * judged as strides.acceptor judges it (last dimension contiguous, the effective strides,
 * an output that overlaps itself refused, every stride but the last a multiple of 16 bytes below
 * 2^40 where a map describes it), its end for the overlap check is its span, and its maps come
 * from the encoder's `strided(ptr, shape, strides)`. Anything else refuses, as before, and the
 * Python path (launcher.strided_path, the checker) takes or words it.
 *
 * Compiled with -DTKJIT_TORCH_READER and linked with fastlaunch_torch.cpp (against torch's
 * headers and libraries), it is the extension tkjit_fastlaunch_torch, which reads an exact
 * torch.Tensor's metadata through torch's C++ API instead (same values, same refusals; a
 * subclass is still read through its attributes). native.py builds that one where it can.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define MAX_PARAMS 64
#define MAX_RANK 8
#define MAX_DIMS 32
#define MAX_MAPS 16
#define MAX_GRID_OPS 64
#define MAX_CHECKS 16                /* launch-time divisors that must not be 0 (launch_checks.py) */
#define I32_LIMIT 2147483648LL

#ifdef TKJIT_TORCH_READER
#define MODULE_NAME "tkjit_fastlaunch_torch"
#define MODULE_INIT PyInit_tkjit_fastlaunch_torch
/* fastlaunch_torch.cpp */
int tkjit_torch_scalar_type(PyObject *dtype);
int tkjit_torch_read_tensor(PyObject *obj, int scalar_type, long dev, int rank, int views, uint64_t *ptr,
                            long long *shape, long long *strides);
#else
#define MODULE_NAME "tkjit_fastlaunch"
#define MODULE_INIT PyInit_tkjit_fastlaunch
#endif

typedef int (*launch_fn)(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                         unsigned bz, unsigned smem, void *stream, void **params, void **extra);

enum { P_TENSOR = 0, P_F32 = 1, P_I32 = 2 };
/* Grid programs are postfix: a constant or a dim pushes, an operator pops two. */
enum { G_CONST = 0, G_DIM = 1, G_NUM_SMS = 2, G_CDIV = 3, G_MUL = 4, G_ADD = 5, G_MIN = 6, G_MAX = 7,
       G_GT = 8 /* 1 where a > b, else 0 */, G_SUB = 9, G_FDIV = 10 /* launch checks' a - b, a // b */ };

typedef struct {
    int kind;
    PyObject *dtype;                 /* the torch.dtype a tensor must have (borrowed from spec) */
    int scalar_type;                 /* its at::ScalarType (TKJIT_TORCH_READER only) */
    int rank;
    long long dims[MAX_RANK];        /* >= 0: a constant; < 0: named dim -(d + 1) */
    int itemsize;                    /* bytes per element (a tensor) */
    int writes;                      /* the kernel stores into it: nothing may overlap it (overlap.py) */
    int views;                       /* a view may be launched as it is (its maps take its strides) */
    int mapped;                      /* a TMA map describes it: its strides must suit TMA */
} Param;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    launch_fn launch;
    void *function;
    unsigned block[3];
    unsigned smem;
    int any_device;                   /* the spec's device is None: any device >= 0 */
    long device;
    int nparams, ndims, nmaps;
    long long dim_multiple[MAX_DIMS]; /* a named dim must be a multiple of this (TMA-only rows), else refused */
    Param params[MAX_PARAMS];
    int map_param[MAX_MAPS];          /* which argument each tensor map describes */
    int map_fallback[MAX_MAPS];       /* the map's kernel copies rows TMA cannot address by pointer */
    int any_views;                    /* some parameter takes views */
    int grid_len[3 + MAX_CHECKS];
    long long grid_ops[3 + MAX_CHECKS][MAX_GRID_OPS]; /* the grid's 3 programs, then the checks' */
    int nchecks;
    long long num_sms;
    PyObject *spec;                   /* keeps the dtypes and callables alive */
    PyObject *tensor_type, *current_device, *current_stream, *stream_handle, *slow;
    PyObject *grid_out_of_range, *grid_exact, *launch_failed, *maps;
    PyObject *maps_strided;           /* each map's encoder.strided (for views), or NULL */
    PyObject *checks_exact;           /* (*dims) -> whether every check holds, in Python's arithmetic */
    /* torch.Tensor's own descriptors, read once: for an instance of exactly torch.Tensor (no
     * subclass can override them) they are called without the attribute lookup. */
    PyObject *d_dtype, *d_get_device, *d_is_contiguous, *d_shape, *d_data_ptr, *d_stride;
} Launch;

static PyObject *s_dtype, *s_get_device, *s_is_contiguous, *s_shape, *s_data_ptr, *s_stream, *s_checked, *s_stride;

/* ------------------------------------------------------------------ refusals */

static PyObject *refuse(Launch *self, PyObject *const *args, Py_ssize_t nargs, PyObject *stream,
                        PyObject *checked) {
    if (PyErr_Occurred())
        PyErr_Clear();  /* an attribute that could not be read: the checker says what is wrong */
    PyObject *tuple = PyTuple_New(nargs);
    if (!tuple)
        return NULL;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        Py_INCREF(args[i]);
        PyTuple_SET_ITEM(tuple, i, args[i]);
    }
    PyObject *out = PyObject_CallFunctionObjArgs(self->slow, tuple, stream, checked, NULL);
    Py_DECREF(tuple);
    return out;
}

static PyObject *refuse_named(Launch *self, PyObject *const *args, Py_ssize_t nargs, PyObject *stream,
                              PyObject *checked, PyObject *named) {
    PyObject *tuple = PyTuple_New(nargs);
    if (!tuple) {
        Py_DECREF(named);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        Py_INCREF(args[i]);
        PyTuple_SET_ITEM(tuple, i, args[i]);
    }
    PyObject *out = PyObject_CallFunctionObjArgs(self->slow, tuple, stream, checked, named, NULL);
    Py_DECREF(tuple);
    Py_DECREF(named);
    return out;
}

/* ------------------------------------------------------------------ reading a tensor */

static PyObject *call_method(PyObject *obj, PyObject *name, PyObject *descr, int exact) {
    if (exact && descr)
        return PyObject_Vectorcall(descr, &obj, 1, NULL);
    return PyObject_VectorcallMethod(name, &obj, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

static PyObject *get_attr(PyObject *obj, PyObject *name, PyObject *descr, int exact) {
    if (exact && descr)
        return Py_TYPE(descr)->tp_descr_get(descr, obj, (PyObject *)Py_TYPE(obj));
    return PyObject_GetAttr(obj, name);
}

/* The descriptor torch.Tensor has for `name` when it is of `kind` (a C method or a getset). */
static PyObject *own_descriptor(PyObject *tensor_type, PyObject *name, PyTypeObject *kind) {
    PyObject *d = PyObject_GetAttr(tensor_type, name);
    if (d && Py_TYPE(d) == kind)
        return d;
    PyErr_Clear();
    Py_XDECREF(d);
    return NULL;
}

/* A tuple of `rank` ints into out; 0 where it is not one. */
static int read_ints(PyObject *v, int rank, long long *out) {
    int ok = PyTuple_Check(v) && PyTuple_GET_SIZE(v) == rank;  /* a torch.Size is a tuple */
    for (int j = 0; ok && j < rank; j++) {
        out[j] = PyLong_AsLongLong(PyTuple_GET_ITEM(v, j));
        ok = !(out[j] == -1 && PyErr_Occurred());
    }
    return ok;
}

/* 1: accepted, contiguous (ptr and shape filled); 2: a view of a parameter that takes views
 * (strides filled too, as torch gives them); 0: refused; -1: an exception to propagate. */
static int read_tensor(Launch *self, const Param *p, PyObject *a, long dev, uint64_t *ptr,
                       long long *shape, long long *strides) {
#ifdef TKJIT_TORCH_READER
    int read = tkjit_torch_read_tensor(a, p->scalar_type, dev, p->rank, p->views, ptr, shape, strides);
    if (read != -2)
        return read;  /* an exact tensor, read in C++; anything else through its attributes */
#endif
    int exact = (PyObject *)Py_TYPE(a) == self->tensor_type;
    int ok = exact || PyObject_IsInstance(a, self->tensor_type);
    if (ok <= 0)
        return ok;
    PyObject *v = get_attr(a, s_dtype, self->d_dtype, exact);
    if (!v)
        return 0;
    ok = v == p->dtype;
    Py_DECREF(v);
    if (!ok)
        return 0;
    v = call_method(a, s_get_device, self->d_get_device, exact);
    if (!v)
        return 0;
    long d = PyLong_AsLong(v);
    Py_DECREF(v);
    if (d != dev || PyErr_Occurred())
        return 0;
    v = call_method(a, s_is_contiguous, self->d_is_contiguous, exact);
    if (!v)
        return 0;
    int contiguous = PyObject_IsTrue(v);
    Py_DECREF(v);
    if (contiguous < 0 || (!contiguous && !p->views))
        return 0;
    v = get_attr(a, s_shape, self->d_shape, exact);
    if (!v)
        return 0;
    ok = read_ints(v, p->rank, shape);
    Py_DECREF(v);
    if (!ok)
        return 0;
    if (!contiguous) {
        v = call_method(a, s_stride, self->d_stride, exact);
        if (!v)
            return 0;
        ok = read_ints(v, p->rank, strides);
        Py_DECREF(v);
        if (!ok)
            return 0;
    }
    v = call_method(a, s_data_ptr, self->d_data_ptr, exact);
    if (!v)
        return 0;
    *ptr = PyLong_AsUnsignedLongLong(v);
    Py_DECREF(v);
    return PyErr_Occurred() ? 0 : (contiguous ? 1 : 2);
}

/* A view as strides.acceptor judges it: 1 when the kernel takes it as it is, with `strides`
 * replaced by strides.effective's (a dimension of at most one element takes the row-major
 * stride); 0 when it does not (the Python path then says why, or copies it). */
static int judge_view(const Param *p, const long long *shape, long long *strides) {
    int rank = p->rank;
    if (rank && shape[rank - 1] > 1 && strides[rank - 1] != 1)
        return 0;  /* its rows are not contiguous: refused everywhere */
    long long want = 1;
    int empty = 0;
    for (int axis = rank - 1; axis >= 0; axis--) {
        if (shape[axis] <= 1)
            strides[axis] = want;
        if (strides[axis] < 0)
            return 0;
        empty |= shape[axis] == 0;
        if (__builtin_mul_overflow(want, shape[axis] > 1 ? shape[axis] : 1, &want))
            return 0;
    }
    if (p->writes && !empty) {  /* strides.overlaps_itself: by stride, each >= the span inside it */
        int order[MAX_RANK], n = 0;
        for (int axis = 0; axis < rank; axis++) {
            if (shape[axis] <= 1)
                continue;
            int k = n++;
            while (k > 0 && strides[order[k - 1]] > strides[axis]) {
                order[k] = order[k - 1];
                k--;
            }
            order[k] = axis;
        }
        long long span = 1;
        for (int k = 0; k < n; k++) {
            long long st = strides[order[k]], next;
            if (st < span)
                return 0;
            if (__builtin_mul_overflow(st, shape[order[k]] - 1, &next) || __builtin_add_overflow(next, span, &span))
                return 0;
        }
    }
    if (p->mapped) {  /* strides.tma_refusal: dims 0..n-2 in 16-byte units, below 2^40 bytes */
        for (int axis = 0; axis + 1 < rank; axis++) {
            long long bytes;
            if (__builtin_mul_overflow(strides[axis], (long long)p->itemsize, &bytes) || bytes % 16 ||
                bytes >= (1LL << 40))
                return 0;
        }
    }
    return 1;
}

/* 1 when a written tensor's bytes overlap another tensor's (overlap.py's rule and pairs). */
static int overlapping(const Launch *self, const uint64_t *ptrs, long long shapes[][MAX_RANK],
                       long long strides[][MAX_RANK], const unsigned char *is_view) {
    uint64_t ends[MAX_PARAMS];
    for (int i = 0; i < self->nparams; i++) {
        const Param *p = &self->params[i];
        if (p->kind != P_TENSOR)
            continue;
        uint64_t n = (uint64_t)p->itemsize;
        if (is_view[i]) {  /* strides.span_bytes: first element to the end of the last */
            uint64_t last = 0;
            int empty = 0;
            for (int j = 0; j < p->rank; j++) {
                empty |= shapes[i][j] == 0;
                if (shapes[i][j] > 0)
                    last += (uint64_t)(shapes[i][j] - 1) * (uint64_t)strides[i][j];
            }
            n = empty ? 0 : (last + 1) * n;
        } else {
            for (int j = 0; j < p->rank; j++)
                n *= (uint64_t)shapes[i][j];
        }
        ends[i] = ptrs[i] + n;
    }
    for (int o = 0; o < self->nparams; o++) {
        if (self->params[o].kind != P_TENSOR || !self->params[o].writes)
            continue;
        for (int t = 0; t < self->nparams; t++) {
            const Param *q = &self->params[t];
            if (t == o || q->kind != P_TENSOR || (q->writes && t < o))
                continue;
            if (ptrs[o] < ends[t] && ptrs[t] < ends[o])
                return 1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ the grid */

/* 1: evaluated; 0: overflow, a zero divisor or a negative value (the exact Python grid decides). */
static int eval_grid(const Launch *self, int axis, const long long *dims, long long *out) {
    long long stack[MAX_GRID_OPS];
    int top = 0;
    const long long *ops = self->grid_ops[axis];
    for (int i = 0; i < self->grid_len[axis]; i++) {
        long long op = ops[i], a, b, r;
        switch (op) {
        case G_CONST: stack[top++] = ops[++i]; continue;
        case G_DIM: stack[top++] = dims[ops[++i]]; continue;
        case G_NUM_SMS: stack[top++] = self->num_sms; continue;
        }
        b = stack[--top];
        a = stack[--top];
        if (a < 0 || b < 0)
            return 0;
        switch (op) {
        case G_CDIV:
            if (b == 0 || __builtin_add_overflow(a, b - 1, &r))
                return 0;
            r /= b;
            break;
        case G_MUL: if (__builtin_mul_overflow(a, b, &r)) return 0; break;
        case G_ADD: if (__builtin_add_overflow(a, b, &r)) return 0; break;
        case G_MIN: r = a < b ? a : b; break;
        case G_MAX: r = a > b ? a : b; break;
        case G_GT: r = a > b; break;
        case G_SUB: r = a - b; break;  /* both >= 0: no overflow; a negative result goes to Python */
        case G_FDIV: if (b == 0) return 0; r = a / b; break;
        default: return 0;
        }
        stack[top++] = r;
    }
    *out = stack[0];
    return 1;
}

static PyObject *dims_tuple(const Launch *self, const long long *dims) {
    PyObject *t = PyTuple_New(self->ndims);
    for (int k = 0; t && k < self->ndims; k++) {
        PyObject *v = PyLong_FromLongLong(dims[k]);
        if (!v) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, k, v);
    }
    return t;
}

/* 1: grid in range; 0: the call is over (empty grid or an exception set; *result says which). */
static int launch_grid(Launch *self, const long long *dims, long long grid[3], PyObject **result) {
    static const long long limits[3] = {2147483647LL, 65535, 65535};
    int exact = 1;
    for (int axis = 0; axis < 3; axis++)
        exact = exact && eval_grid(self, axis, dims, &grid[axis]);
    if (!exact) {  /* big numbers: Python's arithmetic, as the Python path does it */
        PyObject *t = dims_tuple(self, dims);
        PyObject *g = t ? PyObject_Call(self->grid_exact, t, NULL) : NULL;
        Py_XDECREF(t);
        if (!g || !PyTuple_Check(g) || PyTuple_GET_SIZE(g) != 3) {
            if (g)
                PyErr_SetString(PyExc_TypeError, "grid_exact must return a 3-tuple");
            Py_XDECREF(g);
            *result = NULL;
            return 0;
        }
        int overflow = 0;
        for (int axis = 0; axis < 3 && !overflow; axis++)
            grid[axis] = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(g, axis), &overflow);
        if (overflow || PyErr_Occurred()) {  /* far out of range: the Python values say so */
            *result = PyErr_Occurred() ? NULL : PyObject_Call(self->grid_out_of_range, g, NULL);
            Py_DECREF(g);
            return 0;
        }
        Py_DECREF(g);
    }
    for (int axis = 0; axis < 3; axis++) {
        if (grid[axis] <= 0 || grid[axis] > limits[axis]) {
            *result = PyObject_CallFunction(self->grid_out_of_range, "LLL", grid[0], grid[1], grid[2]);
            return 0;
        }
    }
    return 1;
}

/* ------------------------------------------------------------------ the call */

static PyObject *Launch_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                   PyObject *kwnames) {
    Launch *self = (Launch *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *stream = Py_None, *checked = Py_False, *named = NULL;
    if (kwnames) {
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(kwnames); k++) {
            PyObject *name = PyTuple_GET_ITEM(kwnames, k);
            if (PyUnicode_Compare(name, s_stream) == 0)
                stream = args[nargs + k];
            else if (PyUnicode_Compare(name, s_checked) == 0)
                checked = args[nargs + k];
            else if ((!named && !(named = PyDict_New())) || PyDict_SetItem(named, name, args[nargs + k]) < 0) {
                Py_XDECREF(named);
                return NULL;
            }
        }
    }
    if (named)  /* arguments by name: the slow path binds them to positions and calls again */
        return refuse_named(self, args, nargs, stream, checked, named);
    if (nargs != self->nparams)
        return refuse(self, args, nargs, stream, checked);

    PyObject *v = PyObject_CallNoArgs(self->current_device);
    if (!v)
        return NULL;
    long dev = PyLong_AsLong(v);
    Py_DECREF(v);
    if (dev == -1 && PyErr_Occurred())
        return NULL;
    if (self->any_device ? dev < 0 : dev != self->device)
        return refuse(self, args, nargs, stream, checked);

    uint64_t slots[MAX_PARAMS + MAX_DIMS];
    uint64_t ptrs[MAX_PARAMS];
    long long shapes[MAX_PARAMS][MAX_RANK];
    long long strides[MAX_PARAMS][MAX_RANK];  /* a view's effective strides (is_view) */
    unsigned char is_view[MAX_PARAMS] = {0};
    int views = 0;
    long long dims[MAX_DIMS];
    unsigned char bound[MAX_DIMS] = {0};
    uint64_t align = 0;
    for (int i = 0; i < self->nparams; i++) {
        const Param *p = &self->params[i];
        PyObject *a = args[i];
        slots[i] = 0;
        if (p->kind == P_F32) {
            if (!PyFloat_CheckExact(a))
                return refuse(self, args, nargs, stream, checked);
            double x = PyFloat_AS_DOUBLE(a);
            float f = (float)x;
            if (isinf(f) && !isinf(x))  /* as struct.pack("<f") refuses it */
                return refuse(self, args, nargs, stream, checked);
            memcpy(&slots[i], &f, sizeof f);
            continue;
        }
        if (p->kind == P_I32) {
            if (!PyLong_CheckExact(a))
                return refuse(self, args, nargs, stream, checked);
            long long x = PyLong_AsLongLong(a);
            if ((x == -1 && PyErr_Occurred()) || x < -I32_LIMIT || x >= I32_LIMIT)
                return refuse(self, args, nargs, stream, checked);
            int32_t y = (int32_t)x;
            memcpy(&slots[i], &y, sizeof y);
            continue;
        }
        int ok = read_tensor(self, p, a, dev, &ptrs[i], shapes[i], strides[i]);
        if (ok < 0)
            return NULL;
        if (!ok || (ok == 2 && !judge_view(p, shapes[i], strides[i])))
            return refuse(self, args, nargs, stream, checked);
        if (ok == 2) {
            is_view[i] = 1;
            views = 1;
        }
        for (int j = 0; j < p->rank; j++) {
            long long want = p->dims[j], size = shapes[i][j];
            if (want >= 0) {
                if (size != want)
                    return refuse(self, args, nargs, stream, checked);
                continue;
            }
            int d = (int)(-want - 1);
            if (!bound[d]) {
                if (size >= I32_LIMIT)
                    return refuse(self, args, nargs, stream, checked);
                bound[d] = 1;
                dims[d] = size;
            } else if (dims[d] != size) {
                return refuse(self, args, nargs, stream, checked);
            }
        }
        align |= ptrs[i];
        slots[i] = ptrs[i];
    }
    if (align & 15)
        return refuse(self, args, nargs, stream, checked);
    if (overlapping(self, ptrs, shapes, strides, is_view))
        return refuse(self, args, nargs, stream, checked);
    if (views) {  /* a fallback map's tensor with rows TMA cannot address: the kernel copies it
                   * row-major, so no view goes as it is (launcher._fallback_rows) */
        for (int j = 0; j < self->nmaps; j++) {
            const Param *q = &self->params[self->map_param[j]];
            if (self->map_fallback[j] && q->rank &&
                (shapes[self->map_param[j]][q->rank - 1] * q->itemsize) % 16)
                return refuse(self, args, nargs, stream, checked);
        }
    }
    for (int k = 0; k < self->ndims; k++)
        if (dims[k] % self->dim_multiple[k])
            return refuse(self, args, nargs, stream, checked);
    if (self->nchecks) {
        int exact = 1;
        for (int k = 0; k < self->nchecks && exact; k++) {
            long long value;
            exact = eval_grid(self, 3 + k, dims, &value);
            if (exact && value == 0)
                return refuse(self, args, nargs, stream, checked);
        }
        if (!exact) {  /* negative or big numbers: Python's arithmetic decides */
            PyObject *t = dims_tuple(self, dims);
            PyObject *ok = t ? PyObject_Call(self->checks_exact, t, NULL) : NULL;
            Py_XDECREF(t);
            int truth = ok ? PyObject_IsTrue(ok) : -1;
            Py_XDECREF(ok);
            if (truth < 0)
                return NULL;
            if (!truth)
                return refuse(self, args, nargs, stream, checked);
        }
    }

    long long grid[3];
    PyObject *result = NULL;
    if (!launch_grid(self, dims, grid, &result))
        return result;

    uint64_t stream_handle;
    if (stream == Py_None) {
        PyObject *d = PyLong_FromLong(dev);
        v = d ? PyObject_CallOneArg(self->current_stream, d) : NULL;
        Py_XDECREF(d);
    } else if (PyLong_CheckExact(stream) && PyLong_AsLongLong(stream) >= 0) {
        Py_INCREF(stream);
        v = stream;
    } else {
        PyErr_Clear();
        PyObject *d = PyLong_FromLong(dev);
        v = d ? PyObject_CallFunctionObjArgs(self->stream_handle, stream, d, NULL) : NULL;
        Py_XDECREF(d);
    }
    if (!v)
        return NULL;
    stream_handle = PyLong_AsUnsignedLongLong(v);
    Py_DECREF(v);
    if (PyErr_Occurred())
        return NULL;

    void *pointers[MAX_PARAMS + MAX_DIMS + MAX_MAPS];
    int n = self->nparams;
    for (int i = 0; i < n; i++)
        pointers[i] = &slots[i];
    for (int k = 0; k < self->ndims; k++) {
        int32_t y = (int32_t)dims[k];
        slots[n + k] = 0;
        memcpy(&slots[n + k], &y, sizeof y);
        pointers[n + k] = &slots[n + k];
    }
    for (int j = 0; j < self->nmaps; j++) {  /* encoder(ptr, *shape) -> the map's address */
        int i = self->map_param[j];
        const Param *p = &self->params[i];
        if (is_view[i]) {  /* encoder.strided(ptr, shape, strides): the view's own strides */
            PyObject *shape = PyTuple_New(p->rank), *st = PyTuple_New(p->rank);
            for (int r = 0; shape && st && r < p->rank; r++) {
                PyTuple_SET_ITEM(shape, r, PyLong_FromLongLong(shapes[i][r]));
                PyTuple_SET_ITEM(st, r, PyLong_FromLongLong(strides[i][r]));
            }
            PyObject *ptr = PyLong_FromUnsignedLongLong(ptrs[i]);
            v = ptr && shape && st ? PyObject_CallFunctionObjArgs(PyList_GET_ITEM(self->maps_strided, j), ptr,
                                                                 shape, st, NULL) : NULL;
            Py_XDECREF(ptr);
            Py_XDECREF(shape);
            Py_XDECREF(st);
            if (!v)
                return NULL;
            pointers[n + self->ndims + j] = PyLong_AsVoidPtr(v);
            Py_DECREF(v);
            if (PyErr_Occurred())
                return NULL;
            continue;
        }
        PyObject *call = PyTuple_New(1 + p->rank);
        if (!call)
            return NULL;
        PyTuple_SET_ITEM(call, 0, PyLong_FromUnsignedLongLong(ptrs[i]));
        for (int r = 0; r < p->rank; r++)
            PyTuple_SET_ITEM(call, 1 + r, PyLong_FromLongLong(shapes[i][r]));
        v = PyObject_Call(PyList_GET_ITEM(self->maps, j), call, NULL);
        Py_DECREF(call);
        if (!v)
            return NULL;
        pointers[n + self->ndims + j] = PyLong_AsVoidPtr(v);
        Py_DECREF(v);
        if (PyErr_Occurred())
            return NULL;
    }

    int err;
    Py_BEGIN_ALLOW_THREADS
    err = self->launch(self->function, (unsigned)grid[0], (unsigned)grid[1], (unsigned)grid[2],
                       self->block[0], self->block[1], self->block[2], self->smem,
                       (void *)(uintptr_t)stream_handle, pointers, NULL);
    Py_END_ALLOW_THREADS
    if (err) {  /* launch_failed(err, gx, gy, gz, stream, params) retries once or raises */
        result = PyObject_CallFunction(self->launch_failed, "iLLLKK", err, grid[0], grid[1], grid[2],
                                       (unsigned long long)stream_handle,
                                       (unsigned long long)(uintptr_t)pointers);
        if (!result)
            return NULL;
        Py_DECREF(result);
    }
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ construction */

static int get_int(PyObject *dict, const char *key, long long *out) {
    PyObject *v = PyDict_GetItemString(dict, key);
    if (!v) {
        PyErr_Format(PyExc_KeyError, "launch spec has no '%s'", key);
        return -1;
    }
    *out = PyLong_AsLongLong(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *get_obj(PyObject *dict, const char *key) {
    PyObject *v = PyDict_GetItemString(dict, key);
    if (!v)
        PyErr_Format(PyExc_KeyError, "launch spec has no '%s'", key);
    return v;
}

static int bad_spec(const char *what) {
    PyErr_Format(PyExc_ValueError, "bad launch spec: %s", what);
    return -1;
}

/* A grid program (or a check's: the same postfix code) into grid_ops[axis]. */
static int parse_program(Launch *self, PyObject *ops, int axis) {
    if (!PyTuple_Check(ops) || PyTuple_GET_SIZE(ops) > MAX_GRID_OPS || PyTuple_GET_SIZE(ops) == 0)
        return bad_spec("grid program");
    self->grid_len[axis] = (int)PyTuple_GET_SIZE(ops);
    int depth = 0;
    for (int i = 0; i < self->grid_len[axis]; i++) {
        long long op = PyLong_AsLongLong(PyTuple_GET_ITEM(ops, i));
        if (PyErr_Occurred()) return -1;
        self->grid_ops[axis][i] = op;
        if (op == G_CONST || op == G_DIM) {
            if (++i >= self->grid_len[axis]) return bad_spec("grid operand missing");
            long long arg = PyLong_AsLongLong(PyTuple_GET_ITEM(ops, i));
            if (PyErr_Occurred()) return -1;
            if (op == G_DIM && (arg < 0 || arg >= self->ndims)) return bad_spec("grid dim index");
            self->grid_ops[axis][i] = arg;
            depth++;
        } else if (op == G_NUM_SMS) {
            depth++;
        } else if (op >= G_CDIV && op <= G_FDIV) {
            if (depth < 2) return bad_spec("grid operator without operands");
            depth--;
        } else {
            return bad_spec("grid opcode");
        }
    }
    if (depth != 1) return bad_spec("grid program leaves more than one value");
    return 0;
}

/* Launch(spec): spec is the dict native.launch_spec() makes. */
static int Launch_init(Launch *self, PyObject *args, PyObject *kw) {
    PyObject *spec;
    if (!PyArg_ParseTuple(args, "O!:Launch", &PyDict_Type, &spec))
        return -1;
    long long x;
    if (get_int(spec, "launch", &x) < 0) return -1;
    self->launch = (launch_fn)(uintptr_t)x;
    if (get_int(spec, "function", &x) < 0) return -1;
    self->function = (void *)(uintptr_t)x;
    if (get_int(spec, "smem", &x) < 0) return -1;
    self->smem = (unsigned)x;
    PyObject *device = get_obj(spec, "device");
    if (!device) return -1;
    self->any_device = device == Py_None;
    self->device = self->any_device ? 0 : PyLong_AsLong(device);
    if (self->device == -1 && PyErr_Occurred()) return -1;
    if (get_int(spec, "num_sms", &x) < 0) return -1;
    self->num_sms = x;
    if (get_int(spec, "ndims", &x) < 0) return -1;
    if (x < 0 || x > MAX_DIMS) return bad_spec("too many named dims");
    self->ndims = (int)x;
    PyObject *block = get_obj(spec, "block");
    if (!block || !PyArg_ParseTuple(block, "III", &self->block[0], &self->block[1], &self->block[2]))
        return -1;
    PyObject *multiples = get_obj(spec, "dim_multiples");
    if (!multiples || !PyTuple_Check(multiples) || PyTuple_GET_SIZE(multiples) != self->ndims)
        return multiples ? bad_spec("dim_multiples") : -1;
    for (int k = 0; k < self->ndims; k++) {
        self->dim_multiple[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(multiples, k));
        if (PyErr_Occurred()) return -1;
        if (self->dim_multiple[k] < 1) return bad_spec("a dim multiple below 1");
    }

    PyObject *params = get_obj(spec, "params");
    if (!params || !PyList_Check(params)) return params ? bad_spec("params is not a list") : -1;
    if (PyList_GET_SIZE(params) > MAX_PARAMS) return bad_spec("too many parameters");
    self->nparams = (int)PyList_GET_SIZE(params);
    for (int i = 0; i < self->nparams; i++) {
        PyObject *entry = PyList_GET_ITEM(params, i), *dims = NULL;
        Param *p = &self->params[i];
        p->itemsize = 0;
        p->writes = 0;
        p->views = 0;
        p->mapped = 0;
        if (!PyArg_ParseTuple(entry, "iOO|iii", &p->kind, &p->dtype, &dims, &p->itemsize, &p->writes, &p->views))
            return -1;
        if (p->kind == P_TENSOR) {
#ifdef TKJIT_TORCH_READER
            p->scalar_type = tkjit_torch_scalar_type(p->dtype);
#endif
            if (!PyTuple_Check(dims) || PyTuple_GET_SIZE(dims) > MAX_RANK) return bad_spec("tensor dims");
            p->rank = (int)PyTuple_GET_SIZE(dims);
            for (int j = 0; j < p->rank; j++) {
                p->dims[j] = PyLong_AsLongLong(PyTuple_GET_ITEM(dims, j));
                if (PyErr_Occurred()) return -1;
                if (p->dims[j] < -self->ndims) return bad_spec("a dim index out of range");
            }
        } else if (p->kind != P_F32 && p->kind != P_I32) {
            return bad_spec("unknown parameter kind");
        }
    }
    PyObject *grid = get_obj(spec, "grid");
    if (!grid || !PyTuple_Check(grid) || PyTuple_GET_SIZE(grid) != 3) return grid ? bad_spec("grid") : -1;
    for (int axis = 0; axis < 3; axis++)
        if (parse_program(self, PyTuple_GET_ITEM(grid, axis), axis) < 0) return -1;
    PyObject *checks = PyDict_GetItemString(spec, "checks");  /* optional */
    self->nchecks = 0;
    if (checks) {
        if (!PyTuple_Check(checks) || PyTuple_GET_SIZE(checks) > MAX_CHECKS) return bad_spec("checks");
        self->nchecks = (int)PyTuple_GET_SIZE(checks);
        for (int k = 0; k < self->nchecks; k++)
            if (parse_program(self, PyTuple_GET_ITEM(checks, k), 3 + k) < 0) return -1;
        self->checks_exact = get_obj(spec, "checks_exact");  /* borrowed: the spec holds it */
        if (!self->checks_exact) return -1;
    }
    PyObject *maps = get_obj(spec, "maps");
    if (!maps || !PyList_Check(maps) || PyList_GET_SIZE(maps) > MAX_MAPS) return maps ? bad_spec("maps") : -1;
    PyObject *map_params = get_obj(spec, "map_params");
    if (!map_params || !PyTuple_Check(map_params) || PyTuple_GET_SIZE(map_params) != PyList_GET_SIZE(maps))
        return map_params ? bad_spec("map_params") : -1;
    self->nmaps = (int)PyList_GET_SIZE(maps);
    for (int j = 0; j < self->nmaps; j++) {
        long long i = PyLong_AsLongLong(PyTuple_GET_ITEM(map_params, j));
        if (PyErr_Occurred()) return -1;
        if (i < 0 || i >= self->nparams || self->params[i].kind != P_TENSOR) return bad_spec("map param");
        self->map_param[j] = (int)i;
        self->params[i].mapped = 1;
        self->map_fallback[j] = 0;
    }
    self->any_views = 0;
    for (int i = 0; i < self->nparams; i++)
        self->any_views |= self->params[i].kind == P_TENSOR && self->params[i].views;
    self->maps_strided = NULL;
    if (self->any_views) {  /* borrowed: the spec holds them */
        PyObject *strided = get_obj(spec, "maps_strided"), *fallback = get_obj(spec, "map_fallback");
        if (!strided || !fallback) return -1;
        if (!PyList_Check(strided) || PyList_GET_SIZE(strided) != self->nmaps) return bad_spec("maps_strided");
        if (!PyTuple_Check(fallback) || PyTuple_GET_SIZE(fallback) != self->nmaps) return bad_spec("map_fallback");
        for (int j = 0; j < self->nmaps; j++) {
            self->map_fallback[j] = PyObject_IsTrue(PyTuple_GET_ITEM(fallback, j));
            if (self->map_fallback[j] < 0) return -1;
        }
        self->maps_strided = strided;
    }
    struct { const char *key; PyObject **slot; } callables[] = {
        {"tensor_type", &self->tensor_type}, {"current_device", &self->current_device},
        {"current_stream", &self->current_stream}, {"stream_handle", &self->stream_handle},
        {"slow", &self->slow}, {"grid_out_of_range", &self->grid_out_of_range},
        {"grid_exact", &self->grid_exact}, {"launch_failed", &self->launch_failed},
    };
    for (size_t k = 0; k < sizeof callables / sizeof callables[0]; k++) {
        PyObject *v = get_obj(spec, callables[k].key);
        if (!v) return -1;
        *callables[k].slot = v;  /* borrowed: the spec below holds them */
    }
    self->maps = maps;
    Py_CLEAR(self->d_dtype);
    Py_CLEAR(self->d_get_device);
    Py_CLEAR(self->d_is_contiguous);
    Py_CLEAR(self->d_shape);
    Py_CLEAR(self->d_data_ptr);
    Py_CLEAR(self->d_stride);
    self->d_dtype = own_descriptor(self->tensor_type, s_dtype, &PyGetSetDescr_Type);
    self->d_shape = own_descriptor(self->tensor_type, s_shape, &PyGetSetDescr_Type);
    self->d_get_device = own_descriptor(self->tensor_type, s_get_device, &PyMethodDescr_Type);
    self->d_is_contiguous = own_descriptor(self->tensor_type, s_is_contiguous, &PyMethodDescr_Type);
    self->d_data_ptr = own_descriptor(self->tensor_type, s_data_ptr, &PyMethodDescr_Type);
    self->d_stride = own_descriptor(self->tensor_type, s_stride, &PyMethodDescr_Type);
    Py_INCREF(spec);
    Py_XSETREF(self->spec, spec);
    self->vectorcall = Launch_vectorcall;
    return 0;
}

static int Launch_traverse(Launch *self, visitproc visit, void *arg) {
    Py_VISIT(self->spec);
    return 0;
}

static int Launch_clear(Launch *self) {
    Py_CLEAR(self->spec);
    Py_CLEAR(self->d_dtype);
    Py_CLEAR(self->d_get_device);
    Py_CLEAR(self->d_is_contiguous);
    Py_CLEAR(self->d_shape);
    Py_CLEAR(self->d_data_ptr);
    Py_CLEAR(self->d_stride);
    return 0;
}

static void Launch_dealloc(Launch *self) {
    PyObject_GC_UnTrack(self);
    Launch_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Launch_call(PyObject *self, PyObject *args, PyObject *kw) {
    if (((Launch *)self)->spec == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Launch object was not initialized");
        return NULL;
    }
    return PyVectorcall_Call(self, args, kw);
}

static PyTypeObject LaunchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = MODULE_NAME ".Launch",
    .tp_basicsize = sizeof(Launch),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "One kernel's native launch path: launch(*args, stream=None, checked=False).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Launch_init,
    .tp_dealloc = (destructor)Launch_dealloc,
    .tp_traverse = (traverseproc)Launch_traverse,
    .tp_clear = (inquiry)Launch_clear,
    .tp_call = Launch_call,
    .tp_vectorcall_offset = offsetof(Launch, vectorcall),
};

/* ------------------------------------------------------------------ raw launches */

/* A prepared cuLaunchKernel: RawLaunch(launch, function, gx, gy, gz, bx, by, bz, smem, stream,
 * params)() does nothing but the call (the floor a Python caller can reach; the benchmark's raw
 * baseline). Returns the CUresult. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    launch_fn launch;
    void *function, *stream, *params;
    unsigned grid[3], block[3], smem;
} RawLaunch;

static PyObject *RawLaunch_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                      PyObject *kwnames) {
    RawLaunch *r = (RawLaunch *)callable;
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = r->launch(r->function, r->grid[0], r->grid[1], r->grid[2], r->block[0], r->block[1],
                    r->block[2], r->smem, r->stream, (void **)r->params, NULL);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(err);
}

static int RawLaunch_init(RawLaunch *r, PyObject *args, PyObject *kw) {
    unsigned long long launch, function, stream, params;
    if (!PyArg_ParseTuple(args, "KKIIIIIIIKK:RawLaunch", &launch, &function, &r->grid[0], &r->grid[1],
                          &r->grid[2], &r->block[0], &r->block[1], &r->block[2], &r->smem, &stream, &params))
        return -1;
    r->launch = (launch_fn)(uintptr_t)launch;
    r->function = (void *)(uintptr_t)function;
    r->stream = (void *)(uintptr_t)stream;
    r->params = (void *)(uintptr_t)params;
    r->vectorcall = RawLaunch_vectorcall;
    return 0;
}

static PyObject *RawLaunch_call(PyObject *self, PyObject *args, PyObject *kw) {
    if (((RawLaunch *)self)->launch == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "RawLaunch object was not initialized");
        return NULL;
    }
    return PyVectorcall_Call(self, args, kw);
}

static PyTypeObject RawLaunchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = MODULE_NAME ".RawLaunch",
    .tp_basicsize = sizeof(RawLaunch),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A prepared cuLaunchKernel call: raw() -> CUresult.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)RawLaunch_init,
    .tp_call = RawLaunch_call,
    .tp_vectorcall_offset = offsetof(RawLaunch, vectorcall),
};

/* launch(launch, function, gx, gy, gz, bx, by, bz, smem, stream, params) -> CUresult: one call
 * (the retry after a context was made current). */
static PyObject *raw_launch(PyObject *module, PyObject *args) {
    RawLaunch r;
    memset(&r, 0, sizeof r);
    if (RawLaunch_init(&r, args, NULL) < 0)
        return NULL;
    return RawLaunch_vectorcall((PyObject *)&r, NULL, 0, NULL);
}

/* A stand-in for cuLaunchKernel that does nothing (the host-only benchmark's launch). */
static int noop_launch(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                       unsigned bz, unsigned smem, void *stream, void **params, void **extra) {
    return 0;
}

static PyObject *noop_launch_address(PyObject *module, PyObject *unused) {
    return PyLong_FromVoidPtr((void *)noop_launch);
}

static PyMethodDef methods[] = {
    {"launch", raw_launch, METH_VARARGS, "launch(launch, function, gx, gy, gz, bx, by, bz, smem, stream, params) -> CUresult"},
    {"noop_launch_address", noop_launch_address, METH_NOARGS, "The address of a cuLaunchKernel stand-in that does nothing."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, MODULE_NAME, "tkjit's native launch path (see fastlaunch.c).", -1, methods,
};

PyMODINIT_FUNC MODULE_INIT(void) {
    if (PyType_Ready(&LaunchType) < 0 || PyType_Ready(&RawLaunchType) < 0)
        return NULL;
    struct { PyObject **slot; const char *text; } names[] = {
        {&s_dtype, "dtype"}, {&s_get_device, "get_device"}, {&s_is_contiguous, "is_contiguous"},
        {&s_shape, "shape"}, {&s_data_ptr, "data_ptr"}, {&s_stream, "stream"}, {&s_checked, "checked"},
        {&s_stride, "stride"},
    };
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (!(*names[k].slot = PyUnicode_InternFromString(names[k].text)))
            return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    Py_INCREF(&LaunchType);
    Py_INCREF(&RawLaunchType);
    if (PyModule_AddObject(m, "Launch", (PyObject *)&LaunchType) < 0 ||
        PyModule_AddObject(m, "RawLaunch", (PyObject *)&RawLaunchType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
