// Reference kernels: plain, obviously correct loops that accumulate in a wider type. They are
// the oracle every optimized kernel is tested against, and the fallback when no optimized
// kernel accepts a node.
#pragma once

namespace sf {

class KernelRegistry;
// One function per op family, each defined beside its kernels.
void register_reference_array_kernels(KernelRegistry& registry);
void register_reference_math_kernels(KernelRegistry& registry);
void register_reference_activation_kernels(KernelRegistry& registry);
void register_reference_loss_kernels(KernelRegistry& registry);
void register_reference_norm_kernels(KernelRegistry& registry);
void register_reference_nn_kernels(KernelRegistry& registry);
void register_reference_layout_kernels(KernelRegistry& registry);
void register_reference_pointwise_kernels(KernelRegistry& registry);
void register_reference_logic_kernels(KernelRegistry& registry);
void register_reference_resize_kernels(KernelRegistry& registry);
void register_reference_conv_transpose_kernels(KernelRegistry& registry);
void register_reference_quantized_kernels(KernelRegistry& registry);
void register_reference_onnx_quant_kernels(KernelRegistry& registry);
void register_reference_fake_quant_kernels(KernelRegistry& registry);
void register_reference_binary_kernels(KernelRegistry& registry);
void register_reference_rnn_kernels(KernelRegistry& registry);

}  // namespace sf
