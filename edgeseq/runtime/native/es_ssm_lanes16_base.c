/* SsmStep's chunks of 16 streams, for every host, at the compiler's baseline target (x86-64:
   SSE2): es_ssm_run.h's part 16, one translation unit of edgeseq.runtime.native._es_native
   (es_native.h). */
#include "es_native.h"
#define ES_SSM_ISA base
#define ES_SSM_PART 16
#define ES_SSM_TARGET
#include "es_ssm_run.h"
