/* StreamSession.push in one C call, for every native step (Step, SsmStep, AttnStep).

     lock() -> Lock: the session's lock (acquire/release, a context manager); a blocked
       acquire waits with the GIL released, as threading.Lock's does.
     pusher(step, lock, probs, count, slow, exact) -> Pusher: calling it with readings of type
       `exact` (numpy.ndarray itself: a subclass such as a masked array or a matrix takes the
       Python path, which knows what it means) takes `lock`,
       copies and checks the readings and steps (the step's push), and on success adds 1 to
       count (int64 [1]) and returns a copy of probs (float32 [B, C], ndarray.copy()). Any other
       answer (a reading out of range or of another type or shape, NaN/Inf logits, a full
       cache) releases the lock and returns slow(readings): the session's Python path, which
       converts, checks, raises or grows exactly as before; no stream has changed by then.
   A pusher with a decision layer bound (`pusher.decide(kind, arrays)`) runs es_decide
   (firmware_sim/kernels/es_decide.h) on the new probabilities in the same call, on arrays the
   Python Decider owns, and stores the number of events in its `fired` array; `decide(kind,
   arrays, probs)` runs the same kernel once, without a step (tests).
   Included by _es_native.c; every step's push is es_step_push (es_native.h). */

#include "es_decide.h"

#define ES_DECIDE_ARRAYS 17     /* alpha threshold min_duration refractory release smooth seen run_cls run_len
                                   active onset cool gone out fired windows ring */

/* Bind `arrays` (a tuple of ES_DECIDE_ARRAYS numpy arrays, in the order above) for `streams` x
   `classes` into `d`, holding a view of each in `views`; -1 with an exception set (views released). */
static int decision_bind(es_decision *d, int kind, PyObject *arrays, int64_t streams, int64_t classes,
                         Py_buffer *views, int64_t **fired) {
  static const char kinds[ES_DECIDE_ARRAYS] = {'f', 'f', 'i', 'i', 'i', 'f', 'i', 'i', 'i', 'i', 'i', 'i', 'i', 'i', 'i',
                                                'i', 'f'};
  int64_t sizes[ES_DECIDE_ARRAYS];
  void *ptr[ES_DECIDE_ARRAYS];
  int k, j;
  int64_t window = 0;
  if (kind != ES_DECIDE_EMA && kind != ES_DECIDE_MEAN && kind != ES_DECIDE_NONE) {
    PyErr_SetString(PyExc_ValueError, "decide: kind must be 0 (EMA), 1 (moving mean) or 2 (none)");
    return -1;
  }
  if (!PyTuple_Check(arrays) || PyTuple_GET_SIZE(arrays) != ES_DECIDE_ARRAYS || streams < 1 || classes < 1) {
    PyErr_SetString(PyExc_TypeError, "decide: arrays must be a tuple of 17 arrays");
    return -1;
  }
  {   /* the ring's rows per stream, from its length: streams x window x classes float32 */
    Py_buffer rv;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(arrays, 16), &rv, PyBUF_SIMPLE) < 0) return -1;
    window = (int64_t)rv.len / 4 / (streams * classes);
    PyBuffer_Release(&rv);
    if (kind == ES_DECIDE_MEAN && window < 1) {
      PyErr_SetString(PyExc_ValueError, "decide: a moving mean needs a ring of at least one row per stream");
      return -1;
    }
  }
  for (k = 0; k < ES_DECIDE_ARRAYS; k++) sizes[k] = streams;
  sizes[1] = sizes[2] = sizes[5] = streams * classes;
  sizes[13] = streams * 4;
  sizes[14] = 1;
  sizes[16] = streams * window * classes;
  for (k = 0; k < ES_DECIDE_ARRAYS; k++) {
    Py_buffer *v = &views[k];
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(arrays, k), v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
      for (j = 0; j < k; j++) PyBuffer_Release(&views[j]);
      return -1;
    }
    if (v->itemsize != (kinds[k] == 'f' ? 4 : 8) || v->len != sizes[k] * v->itemsize ||
        v->format == NULL || v->format[0] != (kinds[k] == 'f' ? 'f' : (sizeof(long) == 8 ? 'l' : 'q')) ||
        ((uintptr_t)v->buf) % (uintptr_t)v->itemsize) {
      if (!(kinds[k] == 'i' && v->format != NULL && (v->format[0] == 'l' || v->format[0] == 'q') && v->itemsize == 8 &&
            v->len == sizes[k] * 8 && ((uintptr_t)v->buf) % 8 == 0)) {
        for (j = 0; j <= k; j++) PyBuffer_Release(&views[j]);
        PyErr_Format(PyExc_ValueError, "decide: array %d must be an aligned C-contiguous %s with %lld values", k,
                     kinds[k] == 'f' ? "float32" : "int64", (long long)sizes[k]);
        return -1;
      }
    }
    ptr[k] = v->buf;
  }
  d->streams = streams, d->classes = classes, d->kind = kind;
  d->alpha = ptr[0], d->threshold = ptr[1], d->min_duration = ptr[2], d->refractory = ptr[3], d->release = ptr[4];
  d->smooth = ptr[5], d->seen = ptr[6], d->run_cls = ptr[7], d->run_len = ptr[8], d->active = ptr[9];
  d->onset = ptr[10], d->cool = ptr[11], d->gone = ptr[12], d->out = ptr[13];
  d->windows = ptr[15], d->ring = ptr[16], d->window = window;
  *fired = ptr[14];
  if (kind == ES_DECIDE_MEAN)          /* every window in 1..the ring's rows: the kernel indexes by them */
    for (k = 0; k < streams; k++)
      if (d->windows[k] < 1 || d->windows[k] > window) {
        for (j = 0; j < ES_DECIDE_ARRAYS; j++) PyBuffer_Release(&views[j]);
        PyErr_SetString(PyExc_ValueError, "decide: each stream's window must be 1 .. the ring's rows");
        return -1;
      }
  return 0;
}

/* decide(kind, arrays, probs): es_decide once on float32 [streams, classes] probabilities; the
   number of events (tests: the kernel against the Python Decider, without a step). */
static PyObject *decide_once(PyObject *mod, PyObject *args) {
  int kind;
  PyObject *arrays, *probs;
  Py_buffer views[ES_DECIDE_ARRAYS], pv;
  es_decision d;
  int64_t *fired, n, streams, classes;
  int k;
  (void)mod;
  if (!PyArg_ParseTuple(args, "iOO", &kind, &arrays, &probs)) return NULL;
  if (PyObject_GetBuffer(probs, &pv, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_ND) < 0) return NULL;
  if (pv.ndim != 2 || pv.itemsize != 4 || pv.format == NULL || pv.format[0] != 'f') {
    PyBuffer_Release(&pv);
    PyErr_SetString(PyExc_ValueError, "decide: probs must be a C-contiguous float32 [streams, classes] array");
    return NULL;
  }
  streams = pv.shape[0], classes = pv.shape[1];
  if (decision_bind(&d, kind, arrays, streams, classes, views, &fired) < 0) {
    PyBuffer_Release(&pv);
    return NULL;
  }
  n = es_decide(&d, (const float *)pv.buf);
  *fired = n;
  for (k = 0; k < ES_DECIDE_ARRAYS; k++) PyBuffer_Release(&views[k]);
  PyBuffer_Release(&pv);
  return PyLong_FromLongLong((long long)n);
}

typedef struct {
  PyObject_HEAD
  PyThread_type_lock lock;
  int held;
} LockObject;

static PyTypeObject LockType;

static void lock_take(LockObject *l) {
  if (!PyThread_acquire_lock(l->lock, NOWAIT_LOCK)) {
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(l->lock, WAIT_LOCK);
    Py_END_ALLOW_THREADS
  }
  l->held = 1;
}

static void lock_give(LockObject *l) {
  l->held = 0;
  PyThread_release_lock(l->lock);
}

static PyObject *lock_new(PyObject *mod, PyObject *noargs) {
  LockObject *l;
  (void)mod, (void)noargs;
  l = PyObject_New(LockObject, &LockType);
  if (l == NULL) return NULL;
  l->held = 0;
  l->lock = PyThread_allocate_lock();
  if (l->lock == NULL) {
    Py_DECREF(l);
    return PyErr_NoMemory();
  }
  return (PyObject *)l;
}

static void lock_dealloc(LockObject *l) {
  if (l->lock != NULL) {
    if (l->held) PyThread_release_lock(l->lock);
    PyThread_free_lock(l->lock);
  }
  Py_TYPE(l)->tp_free((PyObject *)l);
}

static PyObject *lock_acquire(LockObject *l, PyObject *const *args, Py_ssize_t nargs) {
  (void)args, (void)nargs;
  lock_take(l);
  Py_RETURN_TRUE;
}

static PyObject *lock_release(LockObject *l, PyObject *const *args, Py_ssize_t nargs) {
  (void)args, (void)nargs;
  if (!l->held) {
    PyErr_SetString(PyExc_RuntimeError, "release unlocked lock");
    return NULL;
  }
  lock_give(l);
  Py_RETURN_NONE;
}

static PyObject *lock_locked(LockObject *l, PyObject *noargs) {
  (void)noargs;
  return PyBool_FromLong(l->held);
}

static PyMethodDef lock_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))lock_acquire, METH_FASTCALL, "acquire() -> True: wait for the lock"},
    {"release", (PyCFunction)(void (*)(void))lock_release, METH_FASTCALL, "release(): RuntimeError when not held"},
    {"__enter__", (PyCFunction)(void (*)(void))lock_acquire, METH_FASTCALL, "acquire()"},
    {"__exit__", (PyCFunction)(void (*)(void))lock_release, METH_FASTCALL, "release()"},
    {"locked", (PyCFunction)lock_locked, METH_NOARGS, "locked() -> bool"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject LockType = ES_TYPE("Lock", LockObject, lock_dealloc, Py_TPFLAGS_DEFAULT,
                                       "A native session's lock; build it with lock().", .tp_methods = lock_methods);

/* -- Pusher -------------------------------------------------------------------------------- */

typedef struct {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject *step, *lock, *probs, *count_obj, *slow, *copy_name, *exact;
  Py_buffer count_view;
  int64_t *count;
  PyObject *dec_arrays;                   /* the bound decision arrays (a tuple), or NULL */
  Py_buffer dec_views[ES_DECIDE_ARRAYS];
  es_decision dec;
  int64_t *dec_fired;
  Py_buffer probs_view;                   /* the probabilities es_decide reads, while bound */
} PusherObject;

static PyTypeObject PusherType;

static PyObject *pusher_call(PusherObject *p, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  LockObject *l = (LockObject *)p->lock;
  int rc;
  if (p->step == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "pusher cleared");
    return NULL;
  }
  if (nargs == 1 && kwnames == NULL && (PyObject *)Py_TYPE(args[0]) == p->exact) {
    lock_take(l);
    rc = es_step_push(p->step, args[0]);
    if (rc == -1) {
      PyObject *out;
      (*p->count)++;
      if (p->dec_arrays != NULL) *p->dec_fired = es_decide(&p->dec, (const float *)p->probs_view.buf);
#ifdef ES_NUMPY
      if (PyArray_CheckExact(p->probs) && PyArray_IS_C_CONTIGUOUS((PyArrayObject *)p->probs)) {
        PyArrayObject *a = (PyArrayObject *)p->probs;
        out = PyArray_SimpleNew(PyArray_NDIM(a), PyArray_DIMS(a), PyArray_TYPE(a));
        if (out != NULL) memcpy(PyArray_DATA((PyArrayObject *)out), PyArray_DATA(a), (size_t)PyArray_NBYTES(a));
      } else {
        out = PyObject_CallMethodNoArgs(p->probs, p->copy_name);
      }
#else
      out = PyObject_CallMethodNoArgs(p->probs, p->copy_name);
#endif
      lock_give(l);
      return out;
    }
    lock_give(l);
    if (rc == ES_PUSH_ERROR) return NULL;
  }
  return PyObject_Vectorcall(p->slow, args, nargsf, kwnames);
}

/* pusher(step, lock, probs, count, slow, exact) */
static PyObject *pusher_new(PyObject *mod, PyObject *args) {
  PyObject *step, *lock, *probs, *count, *slow, *exact;
  PusherObject *p;
  (void)mod;
  if (!PyArg_ParseTuple(args, "OO!OOOO!", &step, &LockType, &lock, &probs, &count, &slow, &PyType_Type, &exact))
    return NULL;
  if (!PyCallable_Check(slow)) {
    PyErr_SetString(PyExc_TypeError, "pusher: slow must be callable");
    return NULL;
  }
  p = PyObject_GC_New(PusherObject, &PusherType);
  if (p == NULL) return NULL;
  p->vectorcall = (vectorcallfunc)pusher_call;
  p->step = p->lock = p->probs = p->count_obj = p->slow = p->copy_name = p->exact = NULL;
  p->count = NULL;
  p->dec_arrays = NULL;
  p->dec_fired = NULL;
  if (!Py_IS_TYPE(step, &es_step_type) && !Py_IS_TYPE(step, &es_ssm_type) && !Py_IS_TYPE(step, &es_attn_type)) {
    PyErr_SetString(PyExc_TypeError, "pusher: step must be a Step, SsmStep or AttnStep");
    Py_DECREF(p);
    return NULL;
  }
  if (PyObject_GetBuffer(count, &p->count_view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
    Py_DECREF(p);
    return NULL;
  }
  p->count_obj = count;
  Py_INCREF(count);
  if (p->count_view.itemsize != 8 || p->count_view.len != 8 || ((uintptr_t)p->count_view.buf) % 8) {
    PyErr_SetString(PyExc_ValueError, "pusher: count must be an aligned int64 [1]");
    Py_DECREF(p);
    return NULL;
  }
  p->count = (int64_t *)p->count_view.buf;
  p->copy_name = PyUnicode_InternFromString("copy");
  if (p->copy_name == NULL) {
    Py_DECREF(p);
    return NULL;
  }
  Py_INCREF(step), Py_INCREF(lock), Py_INCREF(probs), Py_INCREF(slow), Py_INCREF(exact);
  p->step = step, p->lock = lock, p->probs = probs, p->slow = slow, p->exact = exact;
  PyObject_GC_Track(p);
  return (PyObject *)p;
}

/* the i-th reference the collector may clear, or NULL past the last (count_obj is dropped by
   dealloc alone: count_view points into it) */
static PyObject **pusher_ref(PusherObject *p, int i) {
  PyObject **refs[] = {&p->step, &p->lock, &p->probs, &p->slow, &p->exact};
  return i < (int)(sizeof refs / sizeof refs[0]) ? refs[i] : NULL;
}

static int pusher_traverse(PusherObject *p, visitproc visit, void *arg) {
  PyObject **r;
  int i;
  for (i = 0; (r = pusher_ref(p, i)) != NULL; i++) Py_VISIT(*r);
  Py_VISIT(p->count_obj);
  return 0;
}

static int pusher_clear(PusherObject *p) {
  PyObject **r;
  int i;
  for (i = 0; (r = pusher_ref(p, i)) != NULL; i++) Py_CLEAR(*r);
  return 0;
}

static void pusher_unbind(PusherObject *p) {
  int k;
  if (p->dec_arrays == NULL) return;
  for (k = 0; k < ES_DECIDE_ARRAYS; k++) PyBuffer_Release(&p->dec_views[k]);
  PyBuffer_Release(&p->probs_view);
  Py_CLEAR(p->dec_arrays);
  p->dec_fired = NULL;
}

/* pusher.decide(kind, arrays): run the decision layer on these arrays after every adopted step;
   pusher.decide(None) unbinds it. The probabilities must be the step's float32 [B, C] buffer. */
static PyObject *pusher_decide(PusherObject *p, PyObject *args) {
  int kind;
  PyObject *arrays, *first = PyTuple_GET_SIZE(args) ? PyTuple_GET_ITEM(args, 0) : NULL;
  Py_buffer pv;
  if (first == Py_None) {
    pusher_unbind(p);
    Py_RETURN_NONE;
  }
  if (!PyArg_ParseTuple(args, "iO!", &kind, &PyTuple_Type, &arrays)) return NULL;
  if (p->probs == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "pusher cleared");
    return NULL;
  }
  if (PyObject_GetBuffer(p->probs, &pv, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_ND) < 0) return NULL;
  if (pv.ndim != 2 || pv.itemsize != 4 || pv.format == NULL || pv.format[0] != 'f') {
    PyBuffer_Release(&pv);
    PyErr_SetString(PyExc_ValueError, "decide: the pusher's probs must be a C-contiguous float32 [B, C] array");
    return NULL;
  }
  pusher_unbind(p);
  if (decision_bind(&p->dec, kind, arrays, pv.shape[0], pv.shape[1], p->dec_views, &p->dec_fired) < 0) {
    PyBuffer_Release(&pv);
    return NULL;
  }
  p->probs_view = pv;
  Py_INCREF(arrays);
  p->dec_arrays = arrays;
  Py_RETURN_NONE;
}

static PyMethodDef pusher_methods[] = {
    {"decide", (PyCFunction)pusher_decide, METH_VARARGS,
     "decide(kind, arrays) / decide(None): bind the decision layer's arrays (es_decide.h), or unbind them"},
    {NULL, NULL, 0, NULL}};

static void pusher_dealloc(PusherObject *p) {
  PyObject_GC_UnTrack(p);
  pusher_unbind(p);
  pusher_clear(p);
  if (p->count != NULL) PyBuffer_Release(&p->count_view);
  Py_CLEAR(p->count_obj);
  Py_CLEAR(p->copy_name);
  PyObject_GC_Del(p);
}

static PyObject *pusher_tp_call(PyObject *self, PyObject *args, PyObject *kwargs) {
  return PyVectorcall_Call(self, args, kwargs);
}

static PyTypeObject PusherType = ES_TYPE(
    "Pusher", PusherObject, pusher_dealloc, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    "push(readings) -> probabilities: a native session's push in one call; build it with pusher().",
    .tp_vectorcall_offset = offsetof(PusherObject, vectorcall), .tp_call = pusher_tp_call,
    .tp_traverse = (traverseproc)pusher_traverse, .tp_clear = (inquiry)pusher_clear, .tp_methods = pusher_methods);
