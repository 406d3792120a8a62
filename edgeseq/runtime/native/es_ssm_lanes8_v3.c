/* SsmStep's chunks of 8 streams, for x86-64-v3 hosts (AVX2 and FMA): es_ssm_run.h's part 8, one
   translation unit of edgeseq.runtime.native._es_native (es_native.h). */
#include "es_native.h"
#if ES_HAVE_CLONES
#define ES_SSM_ISA v3
#define ES_SSM_PART 8
#define ES_SSM_TARGET __attribute__((target("arch=x86-64-v3")))
#include "es_ssm_run.h"
#else
typedef int es_ssm_v3_8_none;   /* no clones for this compiler or host */
#endif
