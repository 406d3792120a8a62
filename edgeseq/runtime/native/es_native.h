/* es_native.h: what the translation units of edgeseq.runtime.native._es_native share.

   The extension is compiled from one translation unit per step family and, for the state-space
   step, per instruction set and part, so that setup.py compiles them in parallel and no compiler
   process holds every specialisation at once (as one unit it took 6 minutes and 1.2 GB):

     _es_native.c            the module: its functions, the buffer and reading helpers, what
                             every step does alike (ES_STEP_HEAD: run, push, set_bounds), Gate,
                             and Lock and Pusher (es_push.h)
     es_rnn_step.c           Step: the RNN, GRU and LSTM steps, float32 and int8 (es_float.h,
                             es_kernels.h)
     es_attn_step.c          AttnStep: the Transformer step (es_attn.h, es_attn_step.h)
     es_ssm_step.c           SsmStep: its type, its constructor and the kernels with a target of
                             their own (AVX-512 VNNI, AVX2, AVX-512: es_ssm_step.h, es_ssm_avx2.h)
     es_ssm_run_<isa>.c      SsmStep's step (es_ssm_run.h), its chunks of 16 and of 8 streams in
     es_ssm_lanes16_<isa>.c  units of their own; isa v4 and v3 (x86-64-v4 and -v3, gcc on Linux)
     es_ssm_lanes8_<isa>.c   and base (every host), a step picked at load as target_clones picks
                             (es_ssm_step.h)

   Each function keeps the target it had in one unit, and the flags that decide a float are the
   same in every unit (setup.py), so every step computes the floats it did. Functions one unit
   defines and another calls are named es_* and hidden: the extension exports PyInit__es_native
   alone. */
#ifndef ES_NATIVE_H
#define ES_NATIVE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "es_kernels.h"
#include "es_float.h"

#if defined(__GNUC__) || defined(__clang__)
#define ES_HIDDEN __attribute__((visibility("hidden")))
#else
#define ES_HIDDEN
#endif

#define ES_MAX_LAYERS 16
#define ES_MAX_VIEWS (16 + 12 * ES_MAX_LAYERS)
#define ES_F_CHUNK 24              /* streams per chunk: their gates and inputs stay in L1 */
#define ES_NOGIL_WORK 200000       /* release the GIL for calls with more multiply-adds than this */

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__) && !defined(ES_NO_CLONES)
/* AVX-512 and AVX2 + FMA builds of each step besides the baseline one, picked once at load (gcc
   function multiversioning): the extension itself stays portable to any x86-64. */
#define ES_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define ES_HAVE_CLONES 1
#else
#define ES_CLONES
#define ES_HAVE_CLONES 0
#endif

/* -- int8 products with AVX-512 VNNI (x86-64 with avx512_vnni, picked at run time) ---------- */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(ES_NO_VNNI)
#include <immintrin.h>
#define ES_HAVE_VNNI 1
#define ES_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#else
#define ES_HAVE_VNNI 0
#endif

/* int16 pair products with AVX2 (x86-64 with avx2, picked at run time): vpmaddwd adds two
   int16 x int16 products into each int32 lane, exactly (the state-space step's int8 products,
   es_ssm_step.h) */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(ES_NO_AVX2I)
#include <immintrin.h>
#define ES_HAVE_AVX2I 1
#define ES_AVX2 __attribute__((target("avx2")))
#else
#define ES_HAVE_AVX2I 0
#endif

/* ES_PUSH_ERROR: a Python exception is set (a call while another runs, push before set_bounds) */
#define ES_PUSH_ERROR (-100)

/* a type of this module: its name, object, destructor, flags and doc, then any other slots */
#define ES_TYPE(name, object, dealloc, flags, doc, ...)                                            \
  {PyVarObject_HEAD_INIT(NULL, 0) .tp_name = "edgeseq.runtime.native._es_native." name,           \
   .tp_basicsize = sizeof(object), .tp_dealloc = (destructor)(dealloc), .tp_flags = (flags),      \
   .tp_doc = (doc), __VA_ARGS__}

/* -- _es_native.c ---------------------------------------------------------------------------- */

/* A C-contiguous buffer of `count` items of `itemsize` bytes (count < 0: any), held in
   views[*nviews] (at most `max`) until its owner dies. Returns its data or NULL with a
   ValueError naming `what`. */
ES_HIDDEN void *es_bind_view(Py_buffer *views, int *nviews, int max, PyObject *obj, Py_ssize_t itemsize,
                             Py_ssize_t count, int writable, const char *what);
/* PyMem_Malloc(bytes), or NULL with a MemoryError */
ES_HIDDEN void *es_malloc(size_t bytes);
/* seq[i] as an int within lo..hi, else -1 with a ValueError naming `what` */
ES_HIDDEN int es_get_int(PyObject *seq, Py_ssize_t i, long lo, long hi, long *out, const char *what);
/* 0 where t is a tuple of n items, else -1 with a ValueError */
ES_HIDDEN int es_check_tuple(PyObject *t, Py_ssize_t n, const char *what);
/* seq[i] as a finite float, else -1 with a ValueError naming `what` */
ES_HIDDEN int es_get_float(PyObject *seq, Py_ssize_t i, float *out, const char *what);
/* the length of `layers`, a list of 1 to max layers, else -1 with a ValueError */
ES_HIDDEN Py_ssize_t es_layer_count(PyObject *layers, int max);
ES_HIDDEN int es_vnni_supported(void);
#if ES_HAVE_AVX2I
ES_HIDDEN int es_avx2_supported(void);
#endif

/* -- the steps (Step, SsmStep, AttnStep): what they share ------------------------------------ */

typedef struct es_step es_step_t;

/* The fields every step object starts with, as every object starts with PyObject_HEAD: what
   run(), push(), set_bounds() and a Pusher do the same for every step (es_step_*, _es_native.c).
   A step is not re-entrant: the caller serializes calls; a second call while one runs with the
   GIL released raises RuntimeError. */
#define ES_STEP_HEAD                                                                                \
  PyObject_HEAD                                                                                     \
  int (*run)(es_step_t *);          /* the step itself: -1 adopted, else the type's code */        \
  long work;                        /* multiply-adds a call: above ES_NOGIL_WORK without the GIL */ \
  int B, F, busy;                   /* streams, features; busy: a call runs */                     \
  float *x;                         /* [B][F] readings, which push copies in */                    \
  const float *hi, *lo;             /* [F] the bounds push checks (set_bounds; lo NULL: |v| <= hi) */ \
  Py_buffer *views;                 /* the buffers bound, held until the step dies */              \
  int nviews, max_views;

struct es_step {
  ES_STEP_HEAD
};

/* A new step of `type` (tp_basicsize bytes, all but the object header zero) that runs `run` and
   binds up to max_views buffers; NULL with an exception */
ES_HIDDEN void *es_step_alloc(PyTypeObject *type, int max_views, int (*run)(es_step_t *));
/* the end of a step's tp_dealloc: its buffers released, the object freed */
ES_HIDDEN void es_step_free(es_step_t *s);
/* es_bind_view into the step's views */
ES_HIDDEN void *es_step_bind(es_step_t *s, PyObject *obj, Py_ssize_t itemsize, Py_ssize_t count, int writable,
                             const char *what);
/* seq[i], float32 [count], into the step's views; NULL with a ValueError (None too) */
ES_HIDDEN void *es_step_bind_item(es_step_t *s, PyObject *seq, Py_ssize_t i, Py_ssize_t count, int writable,
                                  const char *what);
/* x float32 [B, F], logits and probs float32 [B, C] (writable): 0, else -1 with a ValueError */
ES_HIDDEN int es_step_bind_io(es_step_t *s, PyObject *x, PyObject *logits, PyObject *probs, int C,
                              float **logits_out, float **probs_out);
/* a Pusher's push (es_push.h): push()'s checks and copy, then the step; run()'s code, or
   take_reading's (-2, -3), or ES_PUSH_ERROR (raised) */
ES_HIDDEN int es_step_push(PyObject *step, PyObject *readings);
/* run(), push(readings) and set_bounds(hi, lo), the methods of every step */
ES_HIDDEN PyObject *es_step_run_m(PyObject *s, PyObject *const *args, Py_ssize_t nargs);
ES_HIDDEN PyObject *es_step_push_m(PyObject *s, PyObject *const *args, Py_ssize_t nargs);
ES_HIDDEN PyObject *es_step_set_bounds_m(PyObject *s, PyObject *const *args, Py_ssize_t nargs);
/* their PyMethodDef entries, with the docs of the type's run() and push() */
#define ES_STEP_METHODS(run_doc, push_doc)                                                          \
  {"run", (PyCFunction)(void (*)(void))es_step_run_m, METH_FASTCALL, run_doc},                      \
  {"set_bounds", (PyCFunction)(void (*)(void))es_step_set_bounds_m, METH_FASTCALL,                  \
   "set_bounds(hi, lo): float32 [F] each (lo None: |reading| <= hi), the range push() takes; set once"}, \
  {"push", (PyCFunction)(void (*)(void))es_step_push_m, METH_FASTCALL, push_doc}
/* a step's type `type` whose methods are these three (type##_methods) and attributes getset's */
#define ES_STEP_TYPE(type, name, object, dealloc, doc, getset, run_doc, push_doc)                   \
  static PyMethodDef type##_methods[] = {ES_STEP_METHODS(run_doc, push_doc), {NULL, NULL, 0, NULL}}; \
  PyTypeObject type = ES_TYPE(name, object, dealloc, Py_TPFLAGS_DEFAULT, doc, .tp_methods = type##_methods, \
                              .tp_getset = getset)
/* run()'s doc where a stream's NaN/Inf is its only other answer (Step, SsmStep), and push()'s
   answers where run()'s are those */
#define ES_STEP_RUN_DOC                                                                             \
  "run() -> int: advance every stream one reading; -1 when adopted, else the first stream with NaN/Inf logits " \
  "(no state changed)"
#define ES_STEP_PUSH_CODES                                                                          \
  "-1 adopted, i >= 0 stream i gave NaN/Inf (no state changed), -2 a reading out of range (not run), -3 not a " \
  "C-contiguous float32 [B, F] buffer (nothing done)"

/* -- the steps: their types and constructors ------------------------------------------------ */

ES_HIDDEN extern PyTypeObject es_step_type, es_attn_type, es_ssm_type;
ES_HIDDEN PyObject *es_float_step(PyObject *mod, PyObject *args);           /* es_rnn_step.c */
ES_HIDDEN PyObject *es_int8_step(PyObject *mod, PyObject *args);
ES_HIDDEN PyObject *es_attn_step_new(PyObject *mod, PyObject *args);        /* es_attn_step.c */
ES_HIDDEN PyObject *es_ssm_step_new(PyObject *mod, PyObject *args);         /* es_ssm_step.c */
ES_HIDDEN PyObject *es_ssm_quantize(PyObject *mod, PyObject *args);

#endif /* ES_NATIVE_H */
