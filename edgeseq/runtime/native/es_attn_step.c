/* AttnStep, the Transformer step with its KV cache ring: one translation unit of
   edgeseq.runtime.native._es_native (es_native.h). The arithmetic is es_attn.h's; the Python
   type es_attn_step.h's. */
#include "es_native.h"
#include "es_attn.h"
#include "es_attn_step.h"
