// Builders for the integer ops of quantized inference (declared in ops/quantized_ops.cc).
// An activation travels as u8 data plus params f32[2] = [scale, zero_point]; weights are
// symmetric i8 with scales f32[1] or f32[C] (per output channel).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "ops/ops.h"

namespace sf::ops {

// [scale, zero_point] covering min(x, 0)..max(x, 0) of a float tensor at run time.
Output choose_qparams(Graph& g, Output x, const std::string& name = "");
Output quantize(Graph& g, Output x, Output params, const std::string& name = "");
Output dequantize(Graph& g, Output q, Output params, const std::string& name = "");

// The five inputs shared by the quantized conv and matmul ops (for matmul: x = a, w = b).
struct QuantizedConvInputs {
  Output x, x_params, w, w_scales, bias;
};
// i32 accumulators.
Output quantized_conv2d(Graph& g, const QuantizedConvInputs& in, const Conv2DOptions& options = {},
                        const std::string& name = "");
Output quantized_matmul(Graph& g, const QuantizedConvInputs& in, const std::string& name = "");
// u8 outputs in out_params.
Output quantized_conv2d_requantized(Graph& g, const QuantizedConvInputs& in, Output out_params,
                                    const Conv2DOptions& options = {},
                                    Activation activation = Activation::None,
                                    const std::string& name = "");
Output quantized_matmul_requantized(Graph& g, const QuantizedConvInputs& in, Output out_params,
                                    Activation activation = Activation::None,
                                    const std::string& name = "");

Output requantization_range(Graph& g, Output acc, Output x_params, Output w_scales,
                            Activation activation = Activation::None, const std::string& name = "");
Output requantize(Graph& g, Output acc, Output x_params, Output w_scales, Output out_params,
                  Activation activation = Activation::None, const std::string& name = "");

// The output keeps the input's params.
Output quantized_max_pool(Graph& g, Output x, const PoolOptions& options = {},
                          const std::string& name = "");
Output quantized_avg_pool(Graph& g, Output x, const PoolOptions& options = {},
                          const std::string& name = "");

Output quantized_add(Graph& g, Output a, Output a_params, Output b, Output b_params,
                     Output out_params, Activation activation = Activation::None,
                     const std::string& name = "");
// inputs: (data, params) pairs.
Output quantized_concat(Graph& g, const std::vector<std::pair<Output, Output>>& inputs,
                        Output out_params, int64_t axis, const std::string& name = "");

}  // namespace sf::ops
