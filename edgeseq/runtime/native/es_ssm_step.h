/* es_ssm_step.h: the state-space step (edgeseq.models.ssm) for the host: SsmStep, built by

     ssm_step(B, F, D, N, C, selective, quant, x, logits, probs, mean, std, bank0, bank1, enc, layers, final, head)

   and run like Step: SsmStep.run() advances all B streams one reading with no allocation and
   returns -1 when every stream's logits are finite (the step is adopted), else the first
   stream whose logits are NaN or Inf, and then no state changed (the state is two banks of
   float32 [B, N] per layer, as the graph's state_in.{i}; the step writes the other bank and
   flips only on success). push/set_bounds/kernel/bank as Step's. Float32 and static int8
   alike: the kernels are es_ssm.h's; the layout comes from edgeseq/runtime/native/ssm.py.

   Included by _es_native.c (one translation unit: it shares bind_view, take_reading, the
   argument helpers, ES_CLONES, ES_F_CHUNK and ES_NOGIL_WORK). A step is not re-entrant: the
   caller serializes calls; a second call while one runs with the GIL released raises
   RuntimeError. */
#include "es_ssm.h"

#define ES_S_MAX_LAYERS 16
#define ES_S_PROJ_VIEWS 4          /* W, bias, m, post */
/* buffers, normalisation, bounds, final norm (11), input projection and head, and per layer five
   projections, two state banks and five vectors */
#define ES_S_MAX_VIEWS (11 + 2 * ES_S_PROJ_VIEWS + ES_S_MAX_LAYERS * (5 * ES_S_PROJ_VIEWS + 7))

typedef struct {
  es_s_proj_t x, g, d, r, o;        /* d: selective only */
  const float *ln_g, *ln_b, *decay, *nrate, *skip, *ob;
  float eps, thr;
} es_s_layer_t;

typedef struct {
  PyObject_HEAD
  int quant, sel, B, F, D, N, L, C, bank, busy;
  long work;
  Py_buffer views[ES_S_MAX_VIEWS];
  int nviews;
  float *x, *logits, *probs;
  const float *mean, *std;
  es_s_proj_t enc, head;
  es_s_layer_t layer[ES_S_MAX_LAYERS];
  const float *lnf_g, *lnf_b;
  float lnf_eps;
  float *s[2][ES_S_MAX_LAYERS];
  int ld, ldn, ldc, kmax;           /* row strides of the chunk's D-, N- and C-wide buffers; widest input */
  float *scratch;
  const float *hi, *lo;
} SsmObject;

static PyTypeObject SsmType;

static void *ssm_bind(SsmObject *s, PyObject *obj, Py_ssize_t count, int writable, const char *what) {
  return bind_view(s->views, &s->nviews, ES_S_MAX_VIEWS, obj, 4, count, writable, what);
}

static void *ssm_bind_item(SsmObject *s, PyObject *seq, Py_ssize_t i, Py_ssize_t count, int writable,
                           const char *what) {
  PyObject *o = PySequence_GetItem(seq, i);
  void *p;
  if (o == NULL) return NULL;
  p = o == Py_None ? NULL : ssm_bind(s, o, count, writable, what);
  if (o == Py_None) PyErr_Format(PyExc_ValueError, "%s: an array expected, got None", what);
  Py_DECREF(o);
  return p;
}

static int get_float(PyObject *seq, Py_ssize_t i, float *out, const char *what) {
  PyObject *o = PySequence_GetItem(seq, i);
  double v;
  if (o == NULL) return -1;
  v = PyFloat_AsDouble(o);
  Py_DECREF(o);
  if (v == -1.0 && PyErr_Occurred()) return -1;
  if (!isfinite(v)) {
    PyErr_Format(PyExc_ValueError, "%s: not a finite number", what);
    return -1;
  }
  *out = (float)v;
  return 0;
}

/* a projection: (W [K][np], bias [np], m [out] | None, post [out] | None, K, out, np,
   in_mode, in_s, in_z, out_q, out_d, out_z, out_s), np the chunk buffer's stride `ld` */
static int ssm_bind_proj(SsmObject *s, es_s_proj_t *p, PyObject *t, int K, int out, int ld, const char *what) {
  long k, o, np, in_mode, out_q;
  PyObject *m, *post;
  if (check_tuple(t, 14, what) < 0 || get_int(t, 4, K, K, &k, what) < 0 || get_int(t, 5, out, out, &o, what) < 0 ||
      get_int(t, 6, ld, ld, &np, what) < 0 || get_int(t, 7, 0, 2, &in_mode, what) < 0 ||
      get_int(t, 10, 0, 1, &out_q, what) < 0 || get_float(t, 8, &p->in_s, what) < 0 ||
      get_float(t, 9, &p->in_z, what) < 0 || get_float(t, 11, &p->out_d, what) < 0 ||
      get_float(t, 12, &p->out_z, what) < 0 || get_float(t, 13, &p->out_s, what) < 0)
    return -1;
  if ((in_mode && !(p->in_s > 0.0f)) || (out_q && !(p->out_d > 0.0f)) ||
      (in_mode && (p->in_z < -128.0f || p->in_z > 127.0f)) || (out_q && (p->out_z < -128.0f || p->out_z > 127.0f))) {
    PyErr_Format(PyExc_ValueError, "%s: a scale that is not positive or a zero point beyond int8", what);
    return -1;
  }
  p->K = K, p->out = out, p->in_mode = (int)in_mode, p->out_q = (int)out_q;
  if (!(p->f.w = ssm_bind_item(s, t, 0, (Py_ssize_t)K * np, 0, what)) ||
      !(p->f.b = ssm_bind_item(s, t, 1, np, 0, what)))
    return -1;
  m = PyTuple_GET_ITEM(t, 2), post = PyTuple_GET_ITEM(t, 3);
  p->m = m == Py_None ? NULL : ssm_bind(s, m, out, 0, what);
  p->post = post == Py_None ? NULL : ssm_bind(s, post, out, 0, what);
  if ((m != Py_None && !p->m) || (post != Py_None && !p->post)) return -1;
  p->blk[0] = 0, p->blk[1] = (int32_t)np, p->blk[2] = 0, p->blk[3] = K;
  p->f.blocks = p->blk;
  p->f.nblocks = 1;
  p->f.np = (int)np;
  p->f.n1 = K;
  s->work += (long)s->B * K * np;
  return 0;
}

/* -- the step ----------------------------------------------------------------------------- */

ES_CLONES static int ssm_run(SsmObject *s) {
  const int B = s->B, F = s->F, D = s->D, N = s->N, L = s->L, C = s->C, ld = s->ld, ldn = s->ldn;
  const int cur = s->bank, nxt = cur ^ 1;
  const size_t R = ES_F_CHUNK;
  float *xn = s->scratch, *u = xn + R * F, *v = u + R * ld, *go = v + R * ld, *ro = go + R * ld, *mm = ro + R * ld;
  float *oo = mm + R * ld, *xo = oo + R * ld, *dl = xo + R * ldn, *ho = dl + R * ldn, *qa = ho + R * s->ldc;
  float *ap = qa + R * s->kmax;
  int r0, l, bad = -1;
  for (r0 = 0; r0 < B; r0 += ES_F_CHUNK) {
    int rows = B - r0 < ES_F_CHUNK ? B - r0 : ES_F_CHUNK, r;
    es_f_normalize(s->x + (size_t)r0 * F, rows, F, s->mean, s->std, xn);
    es_s_proj(&s->enc, xn, F, rows, qa, ap, u, ld);
    for (l = 0; l < L; l++) {
      const es_s_layer_t *y = &s->layer[l];
      const float *sold = s->s[cur][l] + (size_t)r0 * N;
      float *snew = s->s[nxt][l] + (size_t)r0 * N;
      for (r = 0; r < rows; r++) es_s_layernorm(u + (size_t)r * ld, D, y->ln_g, y->ln_b, y->eps, v + (size_t)r * ld);
      es_s_proj(&y->x, v, ld, rows, qa, ap, xo, ldn);
      es_s_proj(&y->g, v, ld, rows, qa, ap, go, ld);
      if (s->sel) {
        es_s_proj(&y->d, v, ld, rows, qa, ap, dl, ldn);
        for (r = 0; r < rows; r++)
          es_s_selective(y->nrate, y->thr, dl + (size_t)r * ldn, sold + (size_t)r * N, xo + (size_t)r * ldn, N,
                         snew + (size_t)r * N);
      } else {
        for (r = 0; r < rows; r++)
          es_s_fixed(y->decay, sold + (size_t)r * N, xo + (size_t)r * ldn, N, snew + (size_t)r * N);
      }
      es_s_proj(&y->r, snew, N, rows, qa, ap, ro, ld);
      for (r = 0; r < rows; r++)
        es_s_gate(ro + (size_t)r * ld, y->skip, v + (size_t)r * ld, go + (size_t)r * ld, D, mm + (size_t)r * ld);
      es_s_proj(&y->o, mm, ld, rows, qa, ap, oo, ld);
      for (r = 0; r < rows; r++) es_s_residual(u + (size_t)r * ld, oo + (size_t)r * ld, y->ob, D);
    }
    for (r = 0; r < rows; r++)
      es_s_layernorm(u + (size_t)r * ld, D, s->lnf_g, s->lnf_b, s->lnf_eps, v + (size_t)r * ld);
    es_s_proj(&s->head, v, ld, rows, qa, ap, ho, s->ldc);
    for (r = 0; r < rows; r++) {
      float *lo = s->logits + (size_t)(r0 + r) * C;
      memcpy(lo, ho + (size_t)r * s->ldc, sizeof(float) * C);
      if (!es_f_softmax(lo, C, s->probs + (size_t)(r0 + r) * C) && bad < 0) bad = r0 + r;
    }
  }
  if (bad < 0) s->bank = nxt;
  return bad;
}

static int ssm_go_rc(SsmObject *s) {
  int rc;
  if (s->busy) {
    PyErr_SetString(PyExc_RuntimeError, "SsmStep.run() called while another call runs; serialize calls");
    return ES_PUSH_ERROR;
  }
  s->busy = 1;
  if (s->work > ES_NOGIL_WORK) {
    Py_BEGIN_ALLOW_THREADS
    rc = ssm_run(s);
    Py_END_ALLOW_THREADS
  } else {
    rc = ssm_run(s);
  }
  s->busy = 0;
  return rc;
}

static PyObject *ssm_go(SsmObject *s) { return rc_object(ssm_go_rc(s)); }

static PyObject *ssm_run_method(SsmObject *s, PyObject *const *args, Py_ssize_t nargs) {
  (void)args;
  if (nargs != 0) {
    PyErr_SetString(PyExc_TypeError, "run() takes no arguments");
    return NULL;
  }
  return ssm_go(s);
}

static PyObject *ssm_set_bounds(SsmObject *s, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "set_bounds(hi, lo) takes two arguments");
    return NULL;
  }
  if (s->hi != NULL) {
    PyErr_SetString(PyExc_RuntimeError, "bounds are set once");
    return NULL;
  }
  if (!(s->hi = ssm_bind(s, args[0], s->F, 0, "hi"))) return NULL;
  if (args[1] != Py_None && !(s->lo = ssm_bind(s, args[1], s->F, 0, "lo"))) return NULL;
  Py_RETURN_NONE;
}

static int ssm_push_rc(SsmObject *s, PyObject *readings) {
  int rc = push_rc(&s->busy, s->hi, "SsmStep", readings, s->B, s->F, s->x, s->lo);
  return rc < 0 ? rc : ssm_go_rc(s);
}

static PyObject *ssm_push(SsmObject *s, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 1) {
    PyErr_SetString(PyExc_TypeError, "push(readings) takes one argument");
    return NULL;
  }
  return rc_object(ssm_push_rc(s, args[0]));
}

static PyObject *ssm_get_bank(SsmObject *s, void *closure) {
  (void)closure;
  return PyLong_FromLong(s->bank);
}

static PyObject *ssm_get_kernel(SsmObject *s, void *closure) {
  (void)closure;
  return PyUnicode_FromString(s->quant ? "ssm int8 QDQ (exact integer products)" : "ssm float32");
}

static void ssm_dealloc(SsmObject *s) {
  int i;
  for (i = 0; i < s->nviews; i++) PyBuffer_Release(&s->views[i]);
  PyMem_Free(s->scratch);
  Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyMethodDef ssm_methods[] = {
    {"run", (PyCFunction)(void (*)(void))ssm_run_method, METH_FASTCALL,
     "run() -> int: advance every stream one reading; -1 when adopted, else the first stream with NaN/Inf logits "
     "(no state changed)"},
    {"set_bounds", (PyCFunction)(void (*)(void))ssm_set_bounds, METH_FASTCALL,
     "set_bounds(hi, lo): float32 [F] each (lo None: |reading| <= hi), the range push() takes; set once"},
    {"push", (PyCFunction)(void (*)(void))ssm_push, METH_FASTCALL,
     "push(readings) -> int: as Step.push: -1 adopted, i >= 0 stream i gave NaN/Inf (no state changed), -2 a "
     "reading out of range (not run), -3 not a C-contiguous float32 [B, F] buffer (nothing done)"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef ssm_getset[] = {
    {"bank", (getter)ssm_get_bank, NULL, "the state bank (0 or 1) that holds the current state", NULL},
    {"kernel", (getter)ssm_get_kernel, NULL, "the arithmetic this step runs", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject SsmType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "edgeseq.runtime.native._es_native.SsmStep",
    .tp_basicsize = sizeof(SsmObject),
    .tp_dealloc = (destructor)ssm_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A bound state-space step; build it with ssm_step().",
    .tp_methods = ssm_methods,
    .tp_getset = ssm_getset,
};

/* -- constructor --------------------------------------------------------------------------- */

static int ssm_bind_layer(SsmObject *s, es_s_layer_t *y, PyObject *t) {
  const int D = s->D, N = s->N;
  if (check_tuple(t, 13, "ssm layer") < 0 ||
      ssm_bind_proj(s, &y->x, PyTuple_GET_ITEM(t, 0), D, N, s->ldn, "ssm x") < 0 ||
      ssm_bind_proj(s, &y->g, PyTuple_GET_ITEM(t, 1), D, D, s->ld, "ssm gate") < 0 ||
      (s->sel && ssm_bind_proj(s, &y->d, PyTuple_GET_ITEM(t, 2), D, N, s->ldn, "ssm delta") < 0) ||
      ssm_bind_proj(s, &y->r, PyTuple_GET_ITEM(t, 3), N, D, s->ld, "ssm readout") < 0 ||
      ssm_bind_proj(s, &y->o, PyTuple_GET_ITEM(t, 4), D, D, s->ld, "ssm out") < 0 ||
      !(y->ln_g = ssm_bind_item(s, t, 5, D, 0, "ssm ln weight")) ||
      !(y->ln_b = ssm_bind_item(s, t, 6, D, 0, "ssm ln bias")) || get_float(t, 7, &y->eps, "ssm ln epsilon") < 0 ||
      (s->sel ? !(y->nrate = ssm_bind_item(s, t, 9, N, 0, "ssm rate")) || get_float(t, 10, &y->thr, "ssm threshold") < 0
              : !(y->decay = ssm_bind_item(s, t, 8, N, 0, "ssm decay"))) ||
      !(y->skip = ssm_bind_item(s, t, 11, D, 0, "ssm skip")) ||
      !(y->ob = ssm_bind_item(s, t, 12, D, 0, "ssm out bias")))
    return -1;
  if (!(y->eps >= 0.0f)) {
    PyErr_SetString(PyExc_ValueError, "ssm ln epsilon: negative");
    return -1;
  }
  return 0;
}

static PyObject *ssm_step(PyObject *mod, PyObject *args) {
  int B, F, D, N, C, sel, quant, l;
  PyObject *x, *logits, *probs, *mean, *std, *bank0, *bank1, *enc, *layers, *final, *head;
  SsmObject *s;
  Py_ssize_t L;
  (void)mod;
  if (!PyArg_ParseTuple(args, "iiiiippOOOOOOOOOOO", &B, &F, &D, &N, &C, &sel, &quant, &x, &logits, &probs, &mean,
                        &std, &bank0, &bank1, &enc, &layers, &final, &head))
    return NULL;
  if (B < 1 || F < 1 || D < 1 || N < 1 || C < 1 || F > (1 << 16) || D > (1 << 16) || N > (1 << 16) || C > (1 << 16)) {
    PyErr_SetString(PyExc_ValueError, "sizes out of range");
    return NULL;
  }
  if (!PyList_Check(layers) || (L = PyList_GET_SIZE(layers)) < 1 || L > ES_S_MAX_LAYERS) {
    PyErr_SetString(PyExc_ValueError, "layers: a list of 1 to 16 layers expected");
    return NULL;
  }
  if (!PyList_Check(bank0) || !PyList_Check(bank1) || PyList_GET_SIZE(bank0) != L || PyList_GET_SIZE(bank1) != L) {
    PyErr_SetString(PyExc_ValueError, "bank0, bank1: lists of one array per layer expected");
    return NULL;
  }
  if (check_tuple(final, 3, "final norm") < 0) return NULL;
  if (!(s = PyObject_New(SsmObject, &SsmType))) return NULL;
  memset((char *)s + sizeof(PyObject), 0, sizeof(SsmObject) - sizeof(PyObject));
  s->B = B, s->F = F, s->D = D, s->N = N, s->C = C, s->L = (int)L, s->sel = sel, s->quant = quant;
  s->ld = (D + ES_F_NB - 1) / ES_F_NB * ES_F_NB;
  s->ldn = (N + ES_F_NB - 1) / ES_F_NB * ES_F_NB;
  s->ldc = (C + ES_F_NB - 1) / ES_F_NB * ES_F_NB;
  s->kmax = F > D ? F : D;
  s->kmax = s->kmax > N ? s->kmax : N;
  if (!(s->x = ssm_bind(s, x, (Py_ssize_t)B * F, 0, "x")) ||
      !(s->logits = ssm_bind(s, logits, (Py_ssize_t)B * C, 1, "logits")) ||
      !(s->probs = ssm_bind(s, probs, (Py_ssize_t)B * C, 1, "probs")) || !(s->mean = ssm_bind(s, mean, F, 0, "mean")) ||
      !(s->std = ssm_bind(s, std, F, 0, "std")))
    goto fail;
  for (l = 0; l < L; l++)
    if (!(s->s[0][l] = ssm_bind_item(s, bank0, l, (Py_ssize_t)B * N, 1, "state")) ||
        !(s->s[1][l] = ssm_bind_item(s, bank1, l, (Py_ssize_t)B * N, 1, "state")))
      goto fail;
  if (ssm_bind_proj(s, &s->enc, enc, F, D, s->ld, "ssm encoder") < 0) goto fail;
  for (l = 0; l < L; l++)
    if (ssm_bind_layer(s, &s->layer[l], PyList_GET_ITEM(layers, l)) < 0) goto fail;
  if (!(s->lnf_g = ssm_bind_item(s, final, 0, D, 0, "final norm weight")) ||
      !(s->lnf_b = ssm_bind_item(s, final, 1, D, 0, "final norm bias")) ||
      get_float(final, 2, &s->lnf_eps, "final norm epsilon") < 0 ||
      ssm_bind_proj(s, &s->head, head, D, C, s->ldc, "ssm head") < 0)
    goto fail;
  s->scratch = PyMem_Malloc(sizeof(float) * ES_F_CHUNK *
                            ((size_t)F + (size_t)6 * s->ld + (size_t)2 * s->ldn + s->ldc + (size_t)2 * s->kmax));
  if (!s->scratch) {
    PyErr_NoMemory();
    goto fail;
  }
  return (PyObject *)s;
fail:
  Py_DECREF(s);
  return NULL;
}
