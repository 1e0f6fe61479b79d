// opgen/block_max.h was folded into opgen/block_reduce.h, which has block_max
// with the same signature (and block_sum, block_max, block_sums beside it):
// include that. This header keeps a body written against the old name
// compiling, and says so in the build's output.
#pragma once
#pragma message("opgen/block_max.h is now opgen/block_reduce.h (block_max<kThreads>(v, partial) as before): include that instead")
#include "opgen/block_reduce.h"
