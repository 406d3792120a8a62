/* The Transformer step's Python type (AttnStep) for edgeseq.runtime.native._es_native.
   Included once, by es_attn_step.c; it shares _es_native.c's buffer and reading helpers
   (es_get_int, es_check_tuple and the steps' ES_STEP_HEAD: es_native.h); the arithmetic is
   es_attn.h's. Layouts are built by edgeseq/runtime/native/attn.py.

     attn_step(sizes, bufs, consts, embed, layers, head) -> AttnStep
       sizes  (B, F, D, heads, L, d_ff, C, R, max_history, full_error, growable)
       bufs   (x, logits, probs, position int64 [B], history int64 [1], ring float32 [L][2][B][D][R])
       consts (score_div, gelu_div, gelu_one, gelu_half, mean, std, freq | None, lnf_w, lnf_b, lnf_eps,
       slopes | None, asinh | None)   (asinh: the input transform's scale [F])
       layers [(ln1_w, ln1_b, ln1_eps, ln2_w, ln2_b, ln2_eps, qkv, proj, fc1, fc2)]
       a product: (w [K][np], b [np], np, quant, in_s, in_z, out_q, out_s, out_z, acc_bias | None,
                   mul | None, bias | None)   (see es_a_linear_t)

   AttnStep.run() / push(readings) / set_bounds(hi, lo) behave as Step's (push: -2, -3 as
   there), and run() returns es_attn_step's codes: -1 adopted, i >= 0 stream i non-finite
   (nothing adopted), -4 history full (on_full="error"), -5 the ring must grow first.
   set_ring(ring, R) binds a new ring of R rows (the caller grows and lays it out). */

#define ES_A_MAX_VIEWS (24 + 24 * ES_A_MAX_LAYERS)

typedef struct {
  ES_STEP_HEAD                      /* work: products, then the attention's rows for the ring's R */
  es_attn_t a;
  es_a_linear_t *lin[2 + 4 * ES_A_MAX_LAYERS];
  int32_t blk[2 + 4 * ES_A_MAX_LAYERS][4];
  int nlin, quant;
  long products;                    /* the products' multiply-adds a call */
  Py_buffer ring;
  int has_ring;
} AttnObject;

static void attn_dealloc(AttnObject *s) {
  if (s->has_ring) PyBuffer_Release(&s->ring);
  PyMem_Free(s->a.scratch);
  es_step_free((es_step_t *)s);
}

static void *attn_bind(AttnObject *s, PyObject *obj, Py_ssize_t itemsize, Py_ssize_t count, int writable,
                       const char *what) {
  return es_step_bind((es_step_t *)s, obj, itemsize, count, writable, what);
}

static void *attn_bind_item(AttnObject *s, PyObject *seq, Py_ssize_t i, Py_ssize_t count, int writable,
                            const char *what) {
  return es_step_bind_item((es_step_t *)s, seq, i, count, writable, what);
}

/* an optional float32 [count] array (None: NULL, no error) */
static int attn_bind_opt(AttnObject *s, PyObject *seq, Py_ssize_t i, Py_ssize_t count, const float **out,
                         const char *what) {
  PyObject *o = PySequence_GetItem(seq, i);
  if (o == NULL) return -1;
  *out = NULL;
  if (o != Py_None && !(*out = attn_bind(s, o, 4, count, 0, what))) {
    Py_DECREF(o);
    return -1;
  }
  Py_DECREF(o);
  return 0;
}

static int attn_bind_linear(AttnObject *s, es_a_linear_t *p, PyObject *t, int K, int N, const char *what) {
  long np, quant, out_q;
  int32_t *blk;
  if (s->nlin >= 2 + 4 * ES_A_MAX_LAYERS) {
    PyErr_SetString(PyExc_ValueError, "too many products");
    return -1;
  }
  blk = s->blk[s->nlin];
  s->lin[s->nlin++] = p;
  if (es_check_tuple(t, 12, what) < 0 || es_get_int(t, 2, ES_F_NB, 1 << 20, &np, what) < 0 ||
      es_get_int(t, 3, 0, 1, &quant, what) < 0 || es_get_int(t, 6, 0, 1, &out_q, what) < 0)
    return -1;
  if (np % ES_F_NB || np < N) {
    PyErr_Format(PyExc_ValueError, "%s: %ld columns for %d outputs (a multiple of %d expected)", what, np, N, ES_F_NB);
    return -1;
  }
  p->K = K, p->N = N, p->quant = (int)quant, p->out_q = (int)out_q;
  p->d.np = (int)np, p->d.n1 = K, p->d.nblocks = 1;
  blk[0] = 0, blk[1] = (int32_t)np, blk[2] = 0, blk[3] = K;
  p->d.blocks = blk;
  if (!(p->d.w = attn_bind_item(s, t, 0, (Py_ssize_t)K * np, 0, what)) ||
      !(p->d.b = attn_bind_item(s, t, 1, np, 0, what)))
    return -1;
  if (es_get_float(t, 4, &p->in_s, what) < 0 || es_get_float(t, 5, &p->in_z, what) < 0 ||
      es_get_float(t, 7, &p->out_s, what) < 0 || es_get_float(t, 8, &p->out_z, what) < 0)
    return -1;
  if (attn_bind_opt(s, t, 9, N, &p->acc_bias, what) < 0 || attn_bind_opt(s, t, 10, N, &p->mul, what) < 0 ||
      attn_bind_opt(s, t, 11, N, &p->bias, what) < 0)
    return -1;
  if (p->quant && (p->mul == NULL || !(p->in_s > 0.0f) || (p->out_q && !(p->out_s > 0.0f)))) {
    PyErr_Format(PyExc_ValueError, "%s: an int8 product needs its scales", what);
    return -1;
  }
  if (K > s->a.k_max) s->a.k_max = K;
  if ((int)np > s->a.np_max) s->a.np_max = (int)np;
  s->products += (long)K * np;
  return 0;
}

static int attn_set_ring(AttnObject *s, PyObject *ring, int64_t R) {
  const es_attn_t *a = &s->a;
  Py_buffer v;
  float *scratch;
  size_t want;
  if (R < 1 || R > ((int64_t)1 << 40)) {
    PyErr_SetString(PyExc_ValueError, "ring rows out of range");
    return -1;
  }
  if (PyObject_GetBuffer(ring, &v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
    PyErr_SetString(PyExc_ValueError, "ring: not a C-contiguous writable buffer");
    return -1;
  }
  want = (size_t)2 * a->L * a->B * (size_t)R * a->D;
  if (v.itemsize != 4 || (size_t)v.len != want * 4 || ((uintptr_t)v.buf) % 4) {
    PyBuffer_Release(&v);
    PyErr_Format(PyExc_ValueError, "ring: %zd bytes, expected float32 [%d][2][%d][%d][%lld]", v.len, a->L, a->B,
                 a->D, (long long)R);
    return -1;
  }
  {
    es_attn_t sized = s->a;                      /* the scratch for R rows; nothing changes on failure */
    sized.R = R;
    scratch = PyMem_Realloc(s->a.scratch, sizeof(float) * es_attn_scratch(&sized));
  }
  if (scratch == NULL) {
    PyBuffer_Release(&v);
    PyErr_NoMemory();
    return -1;
  }
  s->a.scratch = scratch;
  s->a.R = R;
  if (s->has_ring) PyBuffer_Release(&s->ring);
  s->ring = v;
  s->has_ring = 1;
  s->a.ring = (float *)v.buf;
  s->work = s->products + (long)a->B * a->L * 2 * a->D * (long)(R < (1L << 20) ? R : (1L << 20));
  return 0;
}

#if defined(__x86_64__) || (defined(__i386__) && defined(__SSE__))
#include <xmmintrin.h>
#endif

/* The step with subnormal floats flushed to zero (x86: MXCSR's FTZ and DAZ for the call, then
   restored). Over a long history the softmax weights of old rows fall below FLT_MIN (ALiBi's
   slopes take thousands off their scores), and on x86 every product with, or result that is, a
   subnormal float costs a microcode assist of ~100 cycles: at 1,024 cached readings the weighted
   sum of the values took 10x the time of the scores over the same keys. A weight or partial sum
   below 1.2e-38 (next to weights that sum to 1) becomes 0. */
ES_CLONES static int attn_run(es_attn_t *a) {
#if defined(__x86_64__) || (defined(__i386__) && defined(__SSE__))
  const unsigned int csr = _mm_getcsr();
  int rc;
  _mm_setcsr(csr | 0x8040u);        /* FTZ (bit 15), DAZ (bit 6) */
  rc = es_attn_step(a);
  _mm_setcsr(csr);
  return rc;
#else
  return es_attn_step(a);
#endif
}

/* the step (es_step_t.run) */
static int attn_step_run(es_step_t *s) { return attn_run(&((AttnObject *)s)->a); }

PyObject *es_attn_step_new(PyObject *mod, PyObject *args) {
  PyObject *sizes, *bufs, *consts, *embed, *layers, *head;
  long v[11];
  AttnObject *s;
  es_attn_t *a;
  int i, l;
  (void)mod;
  if (!PyArg_ParseTuple(args, "OOOOOO", &sizes, &bufs, &consts, &embed, &layers, &head)) return NULL;
  if (es_check_tuple(sizes, 11, "sizes") < 0 || es_check_tuple(bufs, 6, "bufs") < 0 ||
      es_check_tuple(consts, 12, "consts") < 0)
    return NULL;
  {
    static const long lo[11] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0};
    static const long hi[11] = {1L << 20, 1L << 16, 1L << 16, 1L << 16, ES_A_MAX_LAYERS, 1L << 16, 1L << 16,
                                1L << 30, 1L << 30, 1, 1};
    for (i = 0; i < 11; i++)
      if (es_get_int(sizes, i, lo[i], hi[i], &v[i], "sizes") < 0) return NULL;
  }
  if (v[2] % v[3]) {
    PyErr_SetString(PyExc_ValueError, "d_model is not a multiple of heads");
    return NULL;
  }
  if (!PyList_Check(layers) || PyList_GET_SIZE(layers) != v[4]) {
    PyErr_SetString(PyExc_ValueError, "layers: a list of one tuple per layer expected");
    return NULL;
  }
  if (!(s = es_step_alloc(&es_attn_type, ES_A_MAX_VIEWS, attn_step_run))) return NULL;
  a = &s->a;
  a->B = (int)v[0], a->F = (int)v[1], a->D = (int)v[2], a->NH = (int)v[3], a->L = (int)v[4], a->FF = (int)v[5];
  a->C = (int)v[6], a->HD = a->D / a->NH;
  a->max_history = v[8], a->full_error = (int)v[9], a->growable = (int)v[10];
  s->B = a->B, s->F = a->F;
  if (!(a->x = attn_bind_item(s, bufs, 0, (Py_ssize_t)a->B * a->F, 0, "x")) ||
      !(a->logits = attn_bind_item(s, bufs, 1, (Py_ssize_t)a->B * a->C, 1, "logits")) ||
      !(a->probs = attn_bind_item(s, bufs, 2, (Py_ssize_t)a->B * a->C, 1, "probs")))
    goto fail;
  s->x = (float *)a->x;
  {
    PyObject *o = PySequence_GetItem(bufs, 3);
    if (o == NULL) goto fail;
    a->pos = attn_bind(s, o, 8, a->B, 1, "position");
    Py_DECREF(o);
    if (a->pos == NULL) goto fail;
    o = PySequence_GetItem(bufs, 4);
    if (o == NULL) goto fail;
    a->hist = attn_bind(s, o, 8, 1, 1, "history");
    Py_DECREF(o);
    if (a->hist == NULL) goto fail;
  }
  if (es_get_float(consts, 0, &a->score_div, "score_div") < 0 || es_get_float(consts, 1, &a->gelu_div, "gelu") < 0 ||
      es_get_float(consts, 2, &a->gelu_one, "gelu") < 0 || es_get_float(consts, 3, &a->gelu_half, "gelu") < 0 ||
      es_get_float(consts, 9, &a->lnf_eps, "lnf_eps") < 0)
    goto fail;
  if (!(a->mean = attn_bind_item(s, consts, 4, a->F, 0, "mean")) ||
      !(a->std = attn_bind_item(s, consts, 5, a->F, 0, "std")) ||
      attn_bind_opt(s, consts, 6, a->D / 2, &a->freq, "freq") < 0 ||
      attn_bind_opt(s, consts, 10, a->NH, &a->slopes, "slopes") < 0 ||
      attn_bind_opt(s, consts, 11, a->F, &a->asinh, "asinh") < 0 ||
      !(a->lnf_w = attn_bind_item(s, consts, 7, a->D, 0, "lnf_w")) ||
      !(a->lnf_b = attn_bind_item(s, consts, 8, a->D, 0, "lnf_b")))
    goto fail;
  if (attn_bind_linear(s, &a->embed, embed, a->F, a->D, "embed") < 0) goto fail;
  for (l = 0; l < a->L; l++) {
    PyObject *t = PyList_GET_ITEM(layers, l);
    es_a_layer_t *ly = &a->layer[l];
    if (es_check_tuple(t, 10, "layer") < 0) goto fail;
    if (!(ly->ln1_w = attn_bind_item(s, t, 0, a->D, 0, "ln1")) || !(ly->ln1_b = attn_bind_item(s, t, 1, a->D, 0, "ln1")) ||
        es_get_float(t, 2, &ly->ln1_eps, "ln1 eps") < 0 ||
        !(ly->ln2_w = attn_bind_item(s, t, 3, a->D, 0, "ln2")) || !(ly->ln2_b = attn_bind_item(s, t, 4, a->D, 0, "ln2")) ||
        es_get_float(t, 5, &ly->ln2_eps, "ln2 eps") < 0 ||
        attn_bind_linear(s, &ly->qkv, PyTuple_GET_ITEM(t, 6), a->D, 3 * a->D, "qkv") < 0 ||
        attn_bind_linear(s, &ly->proj, PyTuple_GET_ITEM(t, 7), a->D, a->D, "proj") < 0 ||
        attn_bind_linear(s, &ly->fc1, PyTuple_GET_ITEM(t, 8), a->D, a->FF, "fc1") < 0 ||
        attn_bind_linear(s, &ly->fc2, PyTuple_GET_ITEM(t, 9), a->FF, a->D, "fc2") < 0)
      goto fail;
  }
  if (attn_bind_linear(s, &a->head, head, a->D, a->C, "head") < 0) goto fail;
  for (i = 0; i < s->nlin; i++) s->quant |= s->lin[i]->quant;
  s->products *= a->B;              /* the attention's rows are added for each ring (attn_set_ring) */
  {
    PyObject *o = PySequence_GetItem(bufs, 5);
    int rc;
    if (o == NULL) goto fail;
    rc = attn_set_ring(s, o, (int64_t)v[7]);
    Py_DECREF(o);
    if (rc < 0) goto fail;
  }
  return (PyObject *)s;
fail:
  Py_DECREF(s);
  return NULL;
}

static PyObject *attn_set_ring_m(AttnObject *s, PyObject *const *args, Py_ssize_t nargs) {
  long long R;
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "set_ring(ring, R) takes two arguments");
    return NULL;
  }
  if (s->busy) {
    PyErr_SetString(PyExc_RuntimeError, "set_ring() while a call runs; serialize calls");
    return NULL;
  }
  R = PyLong_AsLongLong(args[1]);
  if (R == -1 && PyErr_Occurred()) return NULL;
  if (attn_set_ring(s, args[0], (int64_t)R) < 0) return NULL;
  Py_RETURN_NONE;
}

static PyObject *attn_get_kernel(AttnObject *s, void *closure) {
  (void)closure;
  return PyUnicode_FromString(s->quant ? "int8 QDQ (int8 sums as exact float32 products)" : "float32");
}

static PyObject *attn_get_rows(AttnObject *s, void *closure) {
  (void)closure;
  return PyLong_FromLongLong((long long)s->a.R);
}

static PyMethodDef attn_methods[] = {
    ES_STEP_METHODS("run() -> int: advance every stream one reading; -1 adopted, i >= 0 stream i gave NaN/Inf "
                    "(nothing adopted), -4 history full (on_full error), -5 the ring must grow first",
                    "push(readings) -> int: copy, check (-2 out of range, -3 not a float32 [B, F] buffer) and run()"),
    {"set_ring", (PyCFunction)(void (*)(void))attn_set_ring_m, METH_FASTCALL,
     "set_ring(ring, R): bind float32 [L][2][B][D][R] as the cache (laid out by the caller)"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef attn_getset[] = {
    {"kernel", (getter)attn_get_kernel, NULL, "the products' kernel this step runs", NULL},
    {"rows", (getter)attn_get_rows, NULL, "ring rows per stream and layer", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject es_attn_type = ES_TYPE("AttnStep", AttnObject, attn_dealloc, Py_TPFLAGS_DEFAULT,
                                    "A bound Transformer step with its KV cache ring; build it with attn_step().",
                                    .tp_methods = attn_methods, .tp_getset = attn_getset);
