/* es_native.h: what the translation units of edgeseq.runtime.native._es_native share.

   The extension is compiled from one translation unit per step family and, for the state-space
   step, per instruction set and part, so that setup.py compiles them in parallel and no compiler
   process holds every specialisation at once (as one unit it took 6 minutes and 1.2 GB):

     _es_native.c            the module: its functions, the buffer and reading helpers, Gate,
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

/* -- _es_native.c ---------------------------------------------------------------------------- */

/* A C-contiguous buffer of `count` items of `itemsize` bytes (count < 0: any), held in
   views[*nviews] (at most `max`) until its owner dies. Returns its data or NULL with a
   ValueError naming `what`. */
ES_HIDDEN void *es_bind_view(Py_buffer *views, int *nviews, int max, PyObject *obj, Py_ssize_t itemsize,
                             Py_ssize_t count, int writable, const char *what);
/* seq[i] as an int within lo..hi, else -1 with a ValueError naming `what` */
ES_HIDDEN int es_get_int(PyObject *seq, Py_ssize_t i, long lo, long hi, long *out, const char *what);
/* 0 where t is a tuple of n items, else -1 with a ValueError */
ES_HIDDEN int es_check_tuple(PyObject *t, Py_ssize_t n, const char *what);
/* push's checks and its copy of the readings into x: 0 to step, else take_reading's code, or
   ES_PUSH_ERROR (raised) */
ES_HIDDEN int es_push_rc(int *busy, const float *hi, const char *what, PyObject *readings, int B, int F, float *x,
                         const float *lo);
/* run()'s and push()'s answer as a Python int (NULL for ES_PUSH_ERROR) */
ES_HIDDEN PyObject *es_rc_object(int rc);
ES_HIDDEN int es_vnni_supported(void);
#if ES_HAVE_AVX2I
ES_HIDDEN int es_avx2_supported(void);
#endif

/* -- the steps: their types, constructors and pushes (a Pusher's callback) ----------------- */

ES_HIDDEN extern PyTypeObject es_step_type, es_attn_type, es_ssm_type;
ES_HIDDEN PyObject *es_float_step(PyObject *mod, PyObject *args);           /* es_rnn_step.c */
ES_HIDDEN PyObject *es_int8_step(PyObject *mod, PyObject *args);
ES_HIDDEN int es_step_push(PyObject *step, PyObject *readings);
ES_HIDDEN PyObject *es_attn_step_new(PyObject *mod, PyObject *args);        /* es_attn_step.c */
ES_HIDDEN int es_attn_push(PyObject *step, PyObject *readings);
ES_HIDDEN PyObject *es_ssm_step_new(PyObject *mod, PyObject *args);         /* es_ssm_step.c */
ES_HIDDEN PyObject *es_ssm_quantize(PyObject *mod, PyObject *args);
ES_HIDDEN int es_ssm_push(PyObject *step, PyObject *readings);

#endif /* ES_NATIVE_H */
