// <immintrin.h> for the kernels' AVX2 and AVX-512 sources. GCC 12's AVX-512 headers pass an
// undefined source to the masked builtins of plain intrinsics (max, reduce, convert) and then warn
// that it is used uninitialized: a known false positive, silenced here for the rest of the
// including file. Private to kernels.
#pragma once

#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
