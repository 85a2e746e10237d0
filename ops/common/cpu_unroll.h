#pragma once

// The loops over a kernel block's rows, channels and vectors, unrolled whole, so that its
// accumulator arrays are registers: GCC 12 keeps an array indexed in a loop it has not unrolled
// in memory (a store per FMA in the AVX2 blocks; half the speed of the AVX-512 tile blocks).
#define MY_OPS_UNROLL _Pragma("GCC unroll 32")
