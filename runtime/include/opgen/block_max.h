// A former home of block_max, kept as opgen/block_sum.h is (it says why).
#pragma once
#pragma message("opgen/block_max.h is now opgen/block_reduce.h (block_max<kThreads>(v, partial) as before): include that instead")
#include "opgen/block_reduce.h"
