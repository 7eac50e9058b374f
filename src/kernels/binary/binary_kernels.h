// Kernels for the conv and dense layers of binarized models (`train --binarize`): Conv2D,
// FusedConv2D, MatMul and FusedMatMul whose frozen weights hold, per output channel, only
// -scale and +scale (binary) or also 0 (ternary), as `freeze` stores them.
//
// A KernelSpec says only that the weights are constant, so the choice is made at run time, as
// the sparse kernels do: the first compute() (and any that sees another weight buffer) reads
// the weights; binary or ternary ones are packed into bit-planes (bit_gemm.h), others go to the
// kernel the registry ranks next. Each call then looks at its inputs: when every value is -1 or
// +1 (an XNOR layer, fed by BinarizeActivation) the product is XNOR + popcount on packed bits;
// otherwise float inputs are summed by sign without multiplies (BinaryConnect) in the reference
// kernel, while the automatic one hands them to oneDNN's fp32 product, measured far faster.
// One scale per output channel, the bias and the activation follow.
//
// Impl "binary" runs this way, ranked between oneDNN (10) and the sparse kernels (20): a sparse
// kernel that finds the weights dense hands them here, and this kernel hands non-binary weights
// on to oneDNN's, so that a profile reads "sparse:dense:xnor_avx512" for a binary layer and
// exactly as before for the others; "binary_reference" (asked for by name
// only) does the same with the bit-by-bit reference product: the oracle of the packed paths
// (other weights run on the reference kernel).
#pragma once

#include "kernels/kernel.h"

namespace sf {

namespace binary {
inline constexpr int kPriority = 15;
inline constexpr int kOnlyWhenAskedPriority = -1;
}  // namespace binary

}  // namespace sf
