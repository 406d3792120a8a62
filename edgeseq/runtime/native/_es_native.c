/* edgeseq.runtime.native._es_native: the recurrent (Step, es_rnn_step.c), Transformer (AttnStep,
   es_attn_step.c) and state-space (SsmStep, es_ssm_step.c) steps in C for the host.

   This unit is the module: its functions, the helpers the steps share (buffers, readings, the
   CPU's features, and every step's run, push and set_bounds: ES_STEP_HEAD), Gate (the reading
   and logits checks of a step run by onnxruntime), and Lock and Pusher (es_push.h). es_native.h
   lists the units and what they share; setup.py compiles them in parallel. */
#include "es_native.h"

#ifdef ES_NUMPY       /* numpy's C API where setup.py found numpy: readings and copies without the buffer protocol */
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#endif

/* -- buffers ---------------------------------------------------------------------------- */

/* A C-contiguous buffer of `count` items of `itemsize` bytes (count < 0: any), held in
   views[*nviews] (at most `max`) until its owner dies. Returns its data or NULL with a
   ValueError naming `what`. */
void *es_bind_view(Py_buffer *views, int *nviews, int max, PyObject *obj, Py_ssize_t itemsize, Py_ssize_t count,
                   int writable, const char *what) {
  Py_buffer *v;
  if (*nviews >= max) {
    PyErr_SetString(PyExc_ValueError, "too many buffers");
    return NULL;
  }
  v = &views[*nviews];
  if (PyObject_GetBuffer(obj, v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0) {
    PyErr_Format(PyExc_ValueError, "%s: not a C-contiguous%s buffer", what, writable ? " writable" : "");
    return NULL;
  }
  (*nviews)++;
  if (v->itemsize != itemsize || (count >= 0 && v->len != count * itemsize)) {
    PyErr_Format(PyExc_ValueError, "%s: %zd bytes of %zd-byte items, expected %zd items of %zd bytes", what,
                 v->len, v->itemsize, count, itemsize);
    return NULL;
  }
  if (((uintptr_t)v->buf) % (uintptr_t)itemsize) {
    PyErr_Format(PyExc_ValueError, "%s: not aligned to its items", what);
    return NULL;
  }
  return v->buf;
}

void *es_malloc(size_t bytes) {
  void *p = PyMem_Malloc(bytes);
  return p != NULL ? p : PyErr_NoMemory();
}

/* seq[i] as a long (into l), or where l is NULL as a double (into d): 0, else -1 with an exception */
static int get_number(PyObject *seq, Py_ssize_t i, long *l, double *d) {
  PyObject *o = PySequence_GetItem(seq, i);
  if (o == NULL) return -1;
  if (l != NULL)
    *l = PyLong_AsLong(o);
  else
    *d = PyFloat_AsDouble(o);
  Py_DECREF(o);
  return ((l != NULL ? *l == -1 : *d == -1.0) && PyErr_Occurred()) ? -1 : 0;
}

int es_get_int(PyObject *seq, Py_ssize_t i, long lo, long hi, long *out, const char *what) {
  long v;
  if (get_number(seq, i, &v, NULL) < 0) return -1;
  if (v < lo || v > hi) {
    PyErr_Format(PyExc_ValueError, "%s: %ld outside %ld..%ld", what, v, lo, hi);
    return -1;
  }
  *out = v;
  return 0;
}

int es_check_tuple(PyObject *t, Py_ssize_t n, const char *what) {
  if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != n) {
    PyErr_Format(PyExc_ValueError, "%s: a tuple of %zd items expected", what, n);
    return -1;
  }
  return 0;
}

int es_get_float(PyObject *seq, Py_ssize_t i, float *out, const char *what) {
  double v;
  if (get_number(seq, i, NULL, &v) < 0) return -1;
  if (!isfinite(v)) {
    PyErr_Format(PyExc_ValueError, "%s: not a finite number", what);
    return -1;
  }
  *out = (float)v;
  return 0;
}

Py_ssize_t es_layer_count(PyObject *layers, int max) {
  Py_ssize_t L;
  if (!PyList_Check(layers) || (L = PyList_GET_SIZE(layers)) < 1 || L > max) {
    PyErr_Format(PyExc_ValueError, "layers: a list of 1 to %d layers expected", max);
    return -1;
  }
  return L;
}

/* -- the CPU's features, for the steps' kernels picked at run time --------------------------- */

int es_vnni_supported(void) {
#if ES_HAVE_VNNI
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#else
  return 0;
#endif
}

#if ES_HAVE_AVX2I
int es_avx2_supported(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
}
#endif

/* -- readings ------------------------------------------------------------------------------ */

/* copy [B, F] readings from src into x, checking each: 0 all in range, -2 some value not. Rows
   in blocks of 16 as one run of 16 F values against the bounds repeated 16 times (a loop the
   compiler vectorizes), where F is at most 64; the rest row by row. */
#define ES_CHECK_ROWS 16
ES_CLONES static int check_reading(const float *src, int B, int F, float *x, const float *hi, const float *lo) {
  int r = 0, f, bad = 0;
  if (F <= 64 && B >= ES_CHECK_ROWS) {
    float th[ES_CHECK_ROWS * 64], tl[ES_CHECK_ROWS * 64];
    const int n = ES_CHECK_ROWS * F;
    int i;
    for (i = 0; i < n; i++) th[i] = hi[i % F];
    if (lo != NULL)
      for (i = 0; i < n; i++) tl[i] = lo[i % F];
    for (; r + ES_CHECK_ROWS <= B; r += ES_CHECK_ROWS, src += n, x += n) {
      if (lo == NULL)
        for (i = 0; i < n; i++) {
          const float a = src[i];
          x[i] = a;
          bad |= !(fabsf(a) <= th[i]);
        }
      else
        for (i = 0; i < n; i++) {
          const float a = src[i];
          x[i] = a;
          bad |= !(a >= tl[i] && a <= th[i]);
        }
    }
  }
  for (; r < B; r++, src += F, x += F) {
    if (lo == NULL)
      for (f = 0; f < F; f++) {
        float a = src[f];
        x[f] = a;
        bad |= !(fabsf(a) <= hi[f]);
      }
    else
      for (f = 0; f < F; f++) {
        float a = src[f];
        x[f] = a;
        bad |= !(a >= lo[f] && a <= hi[f]);
      }
  }
  return bad ? -2 : 0;
}
#undef ES_CHECK_ROWS

/* Copy readings, a C-contiguous float32 buffer [B, F] (or [F] when B = 1), into x, checking
   every value: lo <= v <= hi, or |v| <= hi where lo is NULL (NaN and Inf fail both).
   0: copied, all in range; -2: copied, some value out of range (x is no state: nothing is
   lost); -3: not such a buffer, nothing copied (the caller converts it and checks it itself). */
static int take_reading(PyObject *obj, int B, int F, float *x, const float *hi, const float *lo) {
  Py_buffer v;
  int ok, rc;
#ifdef ES_NUMPY
  if (PyArray_CheckExact(obj)) {
    PyArrayObject *a = (PyArrayObject *)obj;
    int nd = PyArray_NDIM(a);
    npy_intp *dims = PyArray_DIMS(a);
    if (PyArray_TYPE(a) != NPY_FLOAT32 || !PyArray_IS_C_CONTIGUOUS(a) || !PyArray_ISALIGNED(a) ||
        !PyArray_ISNOTSWAPPED(a) ||
        !((nd == 2 && dims[0] == B && dims[1] == F) || (nd == 1 && B == 1 && dims[0] == F)))
      return -3;
    return check_reading((const float *)PyArray_DATA(a), B, F, x, hi, lo);
  }
#endif
  if (PyObject_GetBuffer(obj, &v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
    PyErr_Clear();
    return -3;
  }
  ok = v.itemsize == 4 && v.format != NULL && (!strcmp(v.format, "f") || !strcmp(v.format, "=f")) &&
       ((v.ndim == 2 && v.shape[0] == B && v.shape[1] == F) || (v.ndim == 1 && B == 1 && v.shape[0] == F));
  if (!ok) {
    PyBuffer_Release(&v);
    return -3;
  }
  rc = check_reading((const float *)v.buf, B, F, x, hi, lo);
  PyBuffer_Release(&v);
  return rc;
}

/* -- the steps' run(), push() and set_bounds() (es_native.h: ES_STEP_HEAD) ------------------ */

void *es_step_alloc(PyTypeObject *type, int max_views, int (*run)(es_step_t *)) {
  es_step_t *s = PyObject_New(es_step_t, type);
  if (s == NULL) return NULL;
  memset((char *)s + sizeof(PyObject), 0, (size_t)type->tp_basicsize - sizeof(PyObject));
  s->run = run;
  s->max_views = max_views;
  if (!(s->views = PyMem_Calloc((size_t)max_views, sizeof(Py_buffer)))) {
    Py_DECREF(s);
    return PyErr_NoMemory();
  }
  return s;
}

void es_step_free(es_step_t *s) {
  int i;
  for (i = 0; i < s->nviews; i++) PyBuffer_Release(&s->views[i]);
  PyMem_Free(s->views);
  Py_TYPE(s)->tp_free((PyObject *)s);
}

void *es_step_bind(es_step_t *s, PyObject *obj, Py_ssize_t itemsize, Py_ssize_t count, int writable,
                   const char *what) {
  return es_bind_view(s->views, &s->nviews, s->max_views, obj, itemsize, count, writable, what);
}

void *es_step_bind_item(es_step_t *s, PyObject *seq, Py_ssize_t i, Py_ssize_t count, int writable, const char *what) {
  PyObject *o = PySequence_GetItem(seq, i);
  void *p;
  if (o == NULL) return NULL;
  p = o == Py_None ? NULL : es_step_bind(s, o, 4, count, writable, what);
  if (o == Py_None) PyErr_Format(PyExc_ValueError, "%s: an array expected, got None", what);
  Py_DECREF(o);
  return p;
}

int es_step_bind_io(es_step_t *s, PyObject *x, PyObject *logits, PyObject *probs, int C, float **logits_out,
                    float **probs_out) {
  if (!(s->x = es_step_bind(s, x, 4, (Py_ssize_t)s->B * s->F, 0, "x")) ||
      !(*logits_out = es_step_bind(s, logits, 4, (Py_ssize_t)s->B * C, 1, "logits")) ||
      !(*probs_out = es_step_bind(s, probs, 4, (Py_ssize_t)s->B * C, 1, "probs")))
    return -1;
  return 0;
}

/* the type's name: "Step", "SsmStep", "AttnStep" */
static const char *step_name(es_step_t *s) { return strrchr(Py_TYPE(s)->tp_name, '.') + 1; }

/* one call of the step, with the GIL released where it does enough work */
static int step_go(es_step_t *s) {
  int rc;
  if (s->busy) {
    PyErr_Format(PyExc_RuntimeError, "%s.run() called while another call runs; serialize calls", step_name(s));
    return ES_PUSH_ERROR;
  }
  s->busy = 1;
  if (s->work > ES_NOGIL_WORK) {
    Py_BEGIN_ALLOW_THREADS
    rc = s->run(s);
    Py_END_ALLOW_THREADS
  } else {
    rc = s->run(s);
  }
  s->busy = 0;
  return rc;
}

int es_step_push(PyObject *step, PyObject *readings) {
  es_step_t *s = (es_step_t *)step;
  int rc;
  if (s->hi == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "push() before set_bounds()");
    return ES_PUSH_ERROR;
  }
  if (s->busy) {
    PyErr_Format(PyExc_RuntimeError, "%s.push() called while another call runs; serialize calls", step_name(s));
    return ES_PUSH_ERROR;
  }
  rc = take_reading(readings, s->B, s->F, s->x, s->hi, s->lo);
  return rc < 0 ? rc : step_go(s);
}

/* run()'s and push()'s answer as a Python int (NULL for ES_PUSH_ERROR) */
static PyObject *rc_object(int rc) { return rc == ES_PUSH_ERROR ? NULL : PyLong_FromLong(rc); }

PyObject *es_step_run_m(PyObject *s, PyObject *const *args, Py_ssize_t nargs) {
  (void)args;
  if (nargs != 0) {
    PyErr_SetString(PyExc_TypeError, "run() takes no arguments");
    return NULL;
  }
  return rc_object(step_go((es_step_t *)s));
}

PyObject *es_step_push_m(PyObject *s, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 1) {
    PyErr_SetString(PyExc_TypeError, "push(readings) takes one argument");
    return NULL;
  }
  return rc_object(es_step_push(s, args[0]));
}

/* set_bounds(hi, lo): float32 [F] each, lo None for |v| <= hi */
PyObject *es_step_set_bounds_m(PyObject *step, PyObject *const *args, Py_ssize_t nargs) {
  es_step_t *s = (es_step_t *)step;
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "set_bounds(hi, lo) takes two arguments");
    return NULL;
  }
  if (s->hi != NULL) {
    PyErr_SetString(PyExc_RuntimeError, "bounds are set once");
    return NULL;
  }
  if (!(s->hi = es_step_bind(s, args[0], 4, s->F, 0, "hi"))) return NULL;
  if (args[1] != Py_None && !(s->lo = es_step_bind(s, args[1], 4, s->F, 0, "lo"))) return NULL;
  Py_RETURN_NONE;
}

/* -- Gate: the reading and logits checks of a step run elsewhere (onnxruntime) ----------------- */

typedef struct {
  PyObject_HEAD
  int B, F, C, nviews;
  float *x, *logits;
  const float *hi, *lo;
  Py_buffer views[4];
} GateObject;

static void gate_dealloc(GateObject *g) {
  int i;
  for (i = 0; i < g->nviews; i++) PyBuffer_Release(&g->views[i]);
  Py_TYPE(g)->tp_free((PyObject *)g);
}

static void *gate_bind(GateObject *g, PyObject *obj, Py_ssize_t count, int writable, const char *what) {
  return es_bind_view(g->views, &g->nviews, 4, obj, 4, count, writable, what);
}

static PyTypeObject GateType;

/* gate(x, hi, lo, logits): x float32 [B, F] (writable), hi/lo float32 [F] (lo None: |v| <= hi),
   logits float32 [B, C] */
static PyObject *gate_new(PyObject *mod, PyObject *args) {
  PyObject *x, *hi, *lo, *logits;
  GateObject *g;
  int B, F, C;
  (void)mod;
  if (!PyArg_ParseTuple(args, "iiiOOOO", &B, &F, &C, &x, &hi, &lo, &logits)) return NULL;
  if (B < 1 || F < 1 || C < 1) {
    PyErr_SetString(PyExc_ValueError, "sizes out of range");
    return NULL;
  }
  if (!(g = PyObject_New(GateObject, &GateType))) return NULL;
  g->nviews = 0, g->lo = NULL, g->B = B, g->F = F, g->C = C;
  if (!(g->x = gate_bind(g, x, (Py_ssize_t)B * F, 1, "x")) || !(g->hi = gate_bind(g, hi, F, 0, "hi")) ||
      (lo != Py_None && !(g->lo = gate_bind(g, lo, F, 0, "lo"))) ||
      !(g->logits = gate_bind(g, logits, (Py_ssize_t)B * C, 0, "logits"))) {
    Py_DECREF(g);
    return NULL;
  }
  return (PyObject *)g;
}

static PyObject *gate_take(GateObject *g, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 1) {
    PyErr_SetString(PyExc_TypeError, "take(readings) takes one argument");
    return NULL;
  }
  return PyLong_FromLong(take_reading(args[0], g->B, g->F, g->x, g->hi, g->lo));
}

static PyObject *gate_finite(GateObject *g, PyObject *noargs) {
  Py_ssize_t i, n = (Py_ssize_t)g->B * g->C;
  int bad = 0;
  (void)noargs;
  for (i = 0; i < n; i++) bad |= !(g->logits[i] - g->logits[i] == 0.0f);
  return PyBool_FromLong(!bad);
}

static PyMethodDef gate_methods[] = {
    {"take", (PyCFunction)(void (*)(void))gate_take, METH_FASTCALL,
     "take(readings) -> int: 0 copied and in range, -2 copied with a value out of range, -3 not a C-contiguous "
     "float32 [B, F] buffer (nothing copied)"},
    {"finite", (PyCFunction)gate_finite, METH_NOARGS, "finite() -> bool: every logit is finite"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject GateType = ES_TYPE(
    "Gate", GateObject, gate_dealloc, Py_TPFLAGS_DEFAULT,
    "The reading and logits checks of a step graph run by onnxruntime; build it with gate().",
    .tp_methods = gate_methods);

/* -- Lock and Pusher: a native session's lock and push, for every step -------------------- */

#include "es_push.h"

/* -- the module ------------------------------------------------------------------------------ */

static PyObject *simd(PyObject *mod, PyObject *noargs) {
  (void)mod, (void)noargs;
#if ES_HAVE_CLONES
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
    return PyUnicode_FromString("x86-64-v4 (AVX-512)");
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return PyUnicode_FromString("x86-64-v3 (AVX2, FMA)");
  return PyUnicode_FromString("x86-64 (SSE2)");
#elif defined(__aarch64__)
  return PyUnicode_FromString("aarch64 (NEON)");
#else
  return PyUnicode_FromString("portable");
#endif
}

static PyObject *vnni_available(PyObject *mod, PyObject *noargs) {
  (void)mod, (void)noargs;
  return PyBool_FromLong(es_vnni_supported());
}

static PyMethodDef module_methods[] = {
    {"float_step", es_float_step, METH_VARARGS, "float_step(kind, B, F, H, C, x, logits, probs, mean, std, bank0, "
                                                "bank1, layers, head[, asinh]) -> Step; asinh: the input "
                                                "transform's scale [F] or None"},
    {"int8_step", es_int8_step, METH_VARARGS, "int8_step(kind, B, F, H, C, x, logits, logits_q12, probs, state, feat, "
                                              "layers, head, sigmoid, tanh[, reference]) -> Step; feat: (2^in_frac, "
                                              "mean_fx, feat_m, feat_s, zp0, thresholds [F][255] int32 | None); "
                                              "reference: the firmware's es_k_matvec, stream by stream, instead of "
                                              "exact float products"},
    {"simd", simd, METH_NOARGS, "the instruction set the float step runs with on this machine"},
    {"gate", gate_new, METH_VARARGS, "gate(B, F, C, x, hi, lo, logits) -> Gate: the reading and logits checks"},
    {"vnni", (PyCFunction)(void (*)(void))vnni_available, METH_NOARGS, "True when int8 products run with AVX-512 VNNI here"},
    {"attn_step", es_attn_step_new, METH_VARARGS, "attn_step(sizes, bufs, consts, embed, layers, head) -> AttnStep: "
                                                  "the Transformer step with its KV cache ring (es_attn_step.h)"},
    {"ssm_step", es_ssm_step_new, METH_VARARGS, "ssm_step(B, F, D, N, C, selective, quant, x, logits, probs, mean, std, "
                                                "bank0, bank1, enc, layers, final, head[, packed, asinh]) -> SsmStep: "
                                                "the state-space step (es_ssm_step.h); packed=False: int8 products "
                                                "as float32 sums; asinh: the input transform's scale [F] or None"},
    {"ssm_quantize", es_ssm_quantize, METH_VARARGS, "ssm_quantize(x, scale, zero_point) -> bool: the 16-stream lanes' "
                                                    "division-free int8 quantization of x in place, where it runs "
                                                    "(tests)"},
    {"lock", lock_new, METH_NOARGS, "lock() -> Lock: a native session's lock (es_push.h)"},
    {"decide", decide_once, METH_VARARGS, "decide(kind, arrays, probs) -> events: the decision layer's C step once "
                                          "(es_decide.h; tests)"},
    {"pusher", pusher_new, METH_VARARGS, "pusher(step, lock, probs, count, slow, exact) -> Pusher: the session's push in one "
                                         "C call (es_push.h)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_es_native",
                                    "edgeseq's native recurrent step (see edgeseq.runtime.native)", -1, module_methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__es_native(void) {
  PyObject *m;
  if (PyType_Ready(&es_step_type) < 0 || PyType_Ready(&GateType) < 0 || PyType_Ready(&es_attn_type) < 0 ||
      PyType_Ready(&es_ssm_type) < 0 || PyType_Ready(&LockType) < 0 || PyType_Ready(&PusherType) < 0)
    return NULL;
#ifdef ES_NUMPY
  import_array();
#endif
  m = PyModule_Create(&module);
  if (m == NULL) return NULL;
  Py_INCREF(&es_step_type);
  if (PyModule_AddObject(m, "Step", (PyObject *)&es_step_type) < 0) {
    Py_DECREF(&es_step_type);
    Py_DECREF(m);
    return NULL;
  }
  return m;
}