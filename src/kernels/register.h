// The explicit list of built-in kernels (no self-registering statics: linkers drop those).
#pragma once

namespace sf {

class KernelRegistry;
void register_builtin_kernels(KernelRegistry& registry);

// One function per kernel family; each lives beside its kernels.
void register_reference_kernels(KernelRegistry& registry);
void register_onednn_kernels(KernelRegistry& registry);
void register_fused_kernels(KernelRegistry& registry);
void register_sparse_kernels(KernelRegistry& registry);
void register_binary_kernels(KernelRegistry& registry);  // binarized models' conv and dense
void register_int8_kernels(KernelRegistry& registry);  // vectorized element-wise int8 ops
void register_slice_kernels(KernelRegistry& registry);  // StridedSlice by rows
// Pooling, its gradient and the element-wise float ops of training, AVX-512 or portable.
void register_float_loop_kernels(KernelRegistry& registry);
// AVX-512 NCHW -> NHWC of RGB images; x86-64 builds only.
void register_image_layout_kernels(KernelRegistry& registry);
// LayerNorm and Gelu in portable C++, and with AVX-512 (x86-64 builds only).
void register_transformer_kernels(KernelRegistry& registry);
void register_transformer_kernels_avx512(KernelRegistry& registry);
// bf16 Conv2DBackpropFilter, and MatMul with transpose_a (a dense layer's weight gradient), on
// AMX tiles (x86-64 builds only).
void register_amx_filter_grad_kernel(KernelRegistry& registry);
void register_amx_weight_grad_kernel(KernelRegistry& registry);

}  // namespace sf
