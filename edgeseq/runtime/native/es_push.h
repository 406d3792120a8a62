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
   Included by _es_native.c; every step's push is es_step_push (es_native.h). */

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

static void pusher_dealloc(PusherObject *p) {
  PyObject_GC_UnTrack(p);
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
    .tp_traverse = (traverseproc)pusher_traverse, .tp_clear = (inquiry)pusher_clear);
