// Stands in for the CUDA toolkit's cuda_bf16.h under clang-ptx.sh: see nvptx.h.
#include "nvptx.h"
