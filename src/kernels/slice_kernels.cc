// StridedSlice (ONNX Slice) whose last axis is taken with step 1 (impl "rows"): one memcpy per
// row of the output instead of an index computation per element. An exported attention block
// slices its fused q/k/v projection [128,1,768] into three [128,1,256] parts; the reference
// kernel took 70 us for each, a row copy a few.
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/kernel.h"
#include "kernels/register.h"
#include "ops/layout_geometry.h"
#include "ops/op_names.h"

namespace sf {

namespace {

constexpr int kPriority = 5;

std::vector<SliceAxis> ranges_of(const Node& node, const Shape& x) {
  const Attrs& a = node.attrs;
  std::vector<SliceAxis> ranges;
  const std::string err = slice_ranges(x, a.get_ints("starts"), a.get_ints("ends"),
                                       a.get_ints("axes"), a.get_ints("steps"), &ranges);
  SF_CHECK(err.empty(), "node '{}': {}", node.name, err);
  return ranges;
}

void slice_rows(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const std::vector<SliceAxis> ranges = ranges_of(ctx.node, x.shape());
  const Shape& out = ctx.outputs[0].shape();
  const int64_t row = out.back();
  if (row == 0 || ctx.outputs[0].numel() == 0) return;
  const int64_t rows = ctx.outputs[0].numel() / row;
  std::vector<int64_t> xs(out.size(), 1);  // x's row-major strides
  for (size_t d = out.size() - 1; d > 0; --d) xs[d - 1] = xs[d] * x.dim(static_cast<int>(d));
  const size_t element = dtype_size(x.dtype());
  const auto* in = static_cast<const unsigned char*>(x.raw());
  auto* dst = static_cast<unsigned char*>(ctx.outputs[0].raw());
  const int last = static_cast<int>(out.size()) - 1;
  for (int64_t k = 0; k < rows; ++k) {
    int64_t offset = ranges[static_cast<size_t>(last)].start;
    int64_t rest = k;
    for (int d = last - 1; d >= 0; --d) {
      const size_t a = static_cast<size_t>(d);
      offset += (ranges[a].start + rest % out[a] * ranges[a].step) * xs[a];
      rest /= out[a];
    }
    std::memcpy(dst + static_cast<size_t>(k * row) * element,
                in + static_cast<size_t>(offset) * element, static_cast<size_t>(row) * element);
  }
}

bool last_axis_contiguous(const KernelSpec& spec) {
  const Shape& x = spec.inputs[0].shape;
  if (x.empty()) return false;
  try {
    return ranges_of(spec.node, x).back().step == 1;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

void register_slice_kernels(KernelRegistry& r) {
  KernelDef def = simple_kernel(op_names::kStridedSlice, DType::f32, "rows", slice_rows, kPriority);
  def.accepts = last_axis_contiguous;
  r.add(std::move(def));
}

}  // namespace sf
