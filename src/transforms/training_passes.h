// Graph rewrites of a training graph (forward pass and its gradients), applied before a training
// session plans it. Results stay those of the unrewritten graph exactly. Every node is kept
// (variables nobody reads this step included), `outputs` are mapped into the new graph, and
// placement requests and colocations go along (placement has not run yet); a folded node's
// output is never among the outputs (a BatchNorm's statistics, which the fused node also
// writes, may be).
//
//   fold_relu_grad_into_max_pool_grad  ReluGrad(MaxPoolGrad(Relu(a), y, dy), a) becomes one
//                      MaxPoolGrad with relu set: the ReluGrad's pass over the whole
//                      pre-pooling activation (the largest tensor of a CNN's step) disappears
//   route_max_pool_grads_by_window_argmax  a MaxPool whose windows tile its input and the
//                      MaxPoolGrad of its output become MaxPoolWindowArgmax, which also writes
//                      where each window's first maximum is (a byte per output), and
//                      MaxPoolGradWindowArgmax, which routes dy by that alone: the gradient no
//                      longer reads the pooled activation again (four times the size of dy)
//   fold_relu_into_bias_add  Relu(BiasAdd(x, b)) becomes BiasAddRelu(x, b), named as the
//                      BiasAdd, when only the Relu and ReluGrads (as their x) read the BiasAdd;
//                      those ReluGrads read the BiasAddRelu instead (positive exactly where the
//                      BiasAdd was)
//   fold_activation_into_batch_norm  Relu or Relu6(BatchNorm(x, ...)) becomes one FusedBatchNorm,
//                      named as the BatchNorm, when only the activation and its gradients (as
//                      their x) read the normalized output, and both are asked to run in the same
//                      place: the activation applies in the normalizing pass instead of a pass of
//                      its own; those gradients read the fused output (inside (0, 6), or
//                      positive, exactly where the BatchNorm's was), and the batch statistics'
//                      readers read the fused node's
//   fold_activation_grad_into_batch_norm_grad  BatchNormGrad(ReluGrad or Relu6Grad(dz, a), x,
//                      ...), where nothing else reads the activation's gradient and both are
//                      asked to run in the same place, becomes one FusedBatchNormGrad(dz, x, ...,
//                      a), named as the activation's gradient: the kernel gates dz by a as it
//                      reads it, instead of a pass that writes the gated gradient out and two
//                      that read it back
//   fold_bias_into_conv  BiasAdd(Conv2D(x, w), b) and BiasAddRelu(Conv2D(x, w), b) become one
//                      FusedConv2D(x, w, b), named as the conv, when only the bias node reads the
//                      conv and both are asked to run in the same place: the kernel adds the
//                      bias and applies the ReLU while the output is in registers, instead of a
//                      pass over the conv's output
//   fuse_single_channel_conv_into_max_pool  a FusedConv2D of a single-channel image (a CNN's
//                      first conv) read only by a MaxPoolWindowArgmax becomes one
//                      FusedConv2DMaxPool, named as the conv, when both are asked to run in the
//                      same place: pooled image by image while the conv's output is in the
//                      cache, that output (the step's largest activation, which the gradients
//                      no longer read) is never written to memory
//   fuse_single_channel_conv_grads_into_pool_grad  the MaxPoolGradWindowArgmax of a
//                      FusedConv2DMaxPool's argmaxes, read only by the conv's filter gradient
//                      and its bias gradient, becomes with them one FusedConv2DMaxPoolGrad
//                      (outputs: the filter's and the bias's gradients), named as the filter
//                      gradient, when all three are asked to run in the same place: the conv
//                      output's gradient is routed image by image into the cache, where both
//                      sums read it, instead of through memory
#pragma once

#include <vector>

#include "graph/graph.h"

namespace sf {

Graph fold_relu_grad_into_max_pool_grad(const Graph& graph, std::vector<Output>& outputs);
Graph route_max_pool_grads_by_window_argmax(const Graph& graph, std::vector<Output>& outputs);
Graph fold_relu_into_bias_add(const Graph& graph, std::vector<Output>& outputs);
Graph fold_activation_into_batch_norm(const Graph& graph, std::vector<Output>& outputs);
Graph fold_activation_grad_into_batch_norm_grad(const Graph& graph, std::vector<Output>& outputs);
Graph fold_bias_into_conv(const Graph& graph, std::vector<Output>& outputs);
Graph fuse_single_channel_conv_into_max_pool(const Graph& graph, std::vector<Output>& outputs);
Graph fuse_single_channel_conv_grads_into_pool_grad(const Graph& graph,
                                                    std::vector<Output>& outputs);

// All of the above, in order.
Graph rewrite_training_graph(const Graph& graph, std::vector<Output>& outputs);

}  // namespace sf
