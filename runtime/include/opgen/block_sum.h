// opgen/block_sum.h (and opgen/block_max.h) were folded into opgen/block_reduce.h, which has block_sum
// with the same signature (block_max and block_sums beside it):
// include that. This header keeps a body written against the old name
// compiling, and says so in the build's output.
#pragma once
#pragma message("opgen/block_sum.h is now opgen/block_reduce.h (block_sum<kThreads>(v, partial) as before): include that instead")
#include "opgen/block_reduce.h"
