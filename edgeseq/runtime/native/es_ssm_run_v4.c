/* SsmStep's step (its chunks through the two units of lanes, then the rows left over), for
   x86-64-v4 hosts (AVX-512): es_ssm_run.h's part 0, one translation unit of
   edgeseq.runtime.native._es_native (es_native.h). */
#include "es_native.h"
#if ES_HAVE_CLONES
#define ES_SSM_ISA v4
#define ES_SSM_PART 0
#define ES_SSM_TARGET __attribute__((target("arch=x86-64-v4")))
#include "es_ssm_run.h"
#else
typedef int es_ssm_v4_0_none;   /* no clones for this compiler or host */
#endif
