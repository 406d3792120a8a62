/* SsmStep, the state-space step: one translation unit of edgeseq.runtime.native._es_native
   (es_native.h). Its type, its constructor and the kernels with a target of their own (AVX-512
   VNNI, AVX2, AVX-512: es_ssm_step.h, es_ssm_avx2.h); the step itself is es_ssm_run.h's, in the
   units es_ssm_{run,lanes16,lanes8}_{v4,v3,base}.c. */
#include "es_native.h"
#include "es_ssm_step.h"
