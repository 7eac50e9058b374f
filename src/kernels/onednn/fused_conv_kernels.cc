// oneDNN FusedConv2D for inference: bias and activation run inside the primitive (bias argument
// and an eltwise post-op), so the output is written once.
//
// Two layouts are possible and neither always wins: plain NHWC needs no reorders (best for
// small, depthwise and 1x1 layers at batch 1), oneDNN's blocked layouts run faster jit kernels
// but cost a reorder of the input and output on every call. Impl "onednn" builds both and, when
// oneDNN really picked a blocked layout for the second, keeps the one that measures faster on
// the node's own shapes at plan time (once per distinct problem, see choose_index); each also
// made for one thread, which small layers at batch 1 run faster on. "onednn_nhwc",
// "onednn_blocked" and "onednn_winograd" force a layout and "onednn_1thread" one thread, so
// tests can check each against the reference.
// FusedConv2DAdd adds its addend as a binary post-op before the activation, read in plain NHWC
// whatever the destination's layout (Winograd has no binary post-ops).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <string_view>
#include <utility>
#include <vector>

#include "cpu/cache_flush.h"
#include "graph/op_registry.h"
#include "kernels/onednn/onednn_common.h"
#include "ops/conv_geometry.h"
#include "ops/op_names.h"

namespace sf::onednn {

namespace {

// Winograd (F(4x4, 3x3), blocked layouts) does 3x3 stride-1 layers in fewer multiplications.
enum class Layout { Nhwc, Blocked, Winograd };

// One way to run the node: the primitive and the staging of its arguments.
class Candidate {
 public:
  // Under spec.bf16, a bf16 product (input and weights rounded to bf16, output fp32) where
  // oneDNN has one for the layout and it pays; fp32 otherwise. A depthwise conv does one
  // multiply-add per value it loads, so bf16 products save it nothing and rounding its input
  // costs: mobilenet_v2 in bf16 on AMX (1 thread) ran in 4.3-7.5 ms with bf16 depthwise convs,
  // 3.4-3.8 ms with them in fp32, and 4.5-4.9 ms all in fp32.
  // With `one_thread`, the primitive and its reorders are made for, and run on, one thread.
  static std::optional<Candidate> make(const KernelSpec& spec, Layout layout,
                                       bool one_thread = false) {
    std::optional<OneThread> one;
    if (one_thread) one.emplace();
    std::optional<Candidate> c;
    if (spec.bf16 && layout != Layout::Winograd && !depthwise(spec))
      c = make_typed(spec, layout, dnnl::memory::data_type::bf16);
    if (!c) c = make_typed(spec, layout, dnnl::memory::data_type::f32);
    if (c) c->one_thread_ = one_thread;
    return c;
  }

  static bool depthwise(const KernelSpec& spec) {
    return spec.node.attrs.get_int("groups") > 1 && spec.inputs[1].shape[2] == 1;
  }

  static std::optional<Candidate> make_typed(const KernelSpec& spec, Layout layout,
                                             dnnl::memory::data_type product) {
    const Shape& xs = spec.inputs[0].shape;
    const Shape& ws = spec.inputs[1].shape;
    const Shape& ys = spec.node.outputs[0].shape;
    for (const Shape* s : {&xs, &ws, &ys})
      if (num_elements(*s) == 0) return std::nullopt;
    const int64_t groups = spec.node.attrs.get_int("groups");
    const Window2D g = conv_window(spec.node.attrs, xs, ws);
    const auto f32 = dnnl::memory::data_type::f32;
    auto act = [&](const Shape& nhwc, dnnl::memory::data_type type) {
      return layout == Layout::Nhwc
                 ? with_data_type(nhwc_desc(nhwc), type)
                 : dnnl::memory::desc({nhwc[0], nhwc[3], nhwc[1], nhwc[2]}, type, tag::any);
    };
    const dnnl::memory::desc w_any(hwio_desc(ws, groups).dims(), product, tag::any);
    const dnnl::memory::desc bias({ys[3]}, f32, tag::a);
    dnnl::primitive_attr attr = user_scratchpad_attr();
    const bool has_addend = spec.inputs.size() == 4;
    dnnl::post_ops post_ops;
    if (has_addend) post_ops.append_binary(dnnl::algorithm::binary_add, nhwc_desc(ys));
    append_activation(post_ops, activation_of(spec.node));
    attr.set_post_ops(post_ops);
    try {
      dnnl::convolution_forward::primitive_desc pd(
          dnnl::convolution_forward::desc(
              dnnl::prop_kind::forward_inference,
              layout == Layout::Winograd ? dnnl::algorithm::convolution_winograd
                                         : dnnl::algorithm::convolution_direct,
              act(xs, product), w_any, bias, act(ys, f32), {g.h.stride, g.w.stride},
              {g.h.dilation - 1, g.w.dilation - 1}, {g.h.pad_before, g.w.pad_before},
              {g.h.pad_after, g.w.pad_after}),
          attr, engine());
      if (is_reference_impl(pd.impl_info_str())) return std::nullopt;
      // oneDNN 2.6's gemm-based convolution adds a binary post-op's tensor at wrong offsets
      // for some padded shapes (tests: explicit_uneven); the composed kernel is exact there.
      if (has_addend && std::string_view(pd.impl_info_str()).find("gemm") != std::string_view::npos)
        return std::nullopt;
      return Candidate(pd, nhwc_desc(xs), hwio_desc(ws, groups), nhwc_desc(ys),
                       spec.input_is_constant(1), has_addend);
    } catch (const dnnl::error&) {
      return std::nullopt;  // no implementation for this layout and shape
    }
  }

  void run(void* x, void* w, void* bias, void* addend, void* y) {
    std::optional<OneThread> one;
    if (one_thread_) one.emplace();
    const dnnl::memory& src = x_.bind(x);
    const dnnl::memory& weights = constant_w_ ? w_.bind_constant(w) : w_.bind(w);
    bias_.set_data_handle(bias);
    const dnnl::memory& dst = y_.bind(y);
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, src},
                                                  {DNNL_ARG_WEIGHTS, weights},
                                                  {DNNL_ARG_BIAS, bias_},
                                                  {DNNL_ARG_DST, dst}};
    if (addend_) {
      addend_->set_data_handle(addend);
      args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, *addend_);
    }
    runner_.run(std::move(args));
    y_.finish();
    stream().wait();
  }

  // Scratch buffers of the node's shapes for plan-time measurement.
  struct Scratch {
    explicit Scratch(const KernelSpec& spec)
        : x(static_cast<size_t>(num_elements(spec.inputs[0].shape)), 0.5f),
          w(static_cast<size_t>(num_elements(spec.inputs[1].shape)), 0.01f),
          b(static_cast<size_t>(num_elements(spec.inputs[2].shape)), 0.0f),
          y(static_cast<size_t>(num_elements(spec.node.outputs[0].shape))),
          addend(spec.inputs.size() == 4 ? y.size() : 0, 0.0f) {}
    std::vector<float> x, w, b, y, addend;
  };

  // Leaves the caches as a model leaves them for this node: the weights, the scratchpad and the
  // staging buffers pushed out by the other nodes since it last ran, and its input just written
  // by the node before, on every thread. Measured with a cold input, the plain conv lost to
  // Winograd on squeezenet1_1's 55x55 expand convs, which then ran 45% slower in the model
  // (0.25 ms against 0.17), where the plain conv reads its input from cache.
  void evict(Scratch& scratch) const {
    for (const std::vector<float>* v : {&scratch.x, &scratch.w, &scratch.b, &scratch.y,
                                        &scratch.addend})
      flush_cache_lines(v->data(), v->size() * sizeof(float));
    for (const StagedArg* arg : {&x_, &w_, &y_}) arg->flush_staging();
    runner_.flush_scratchpad();
    write_as_producer(scratch.x);
  }

  static void write_as_producer(std::vector<float>& x) {
    float* data = x.data();
    const auto n = static_cast<int64_t>(x.size());
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) data[i] = 0.5f;
  }

  // Seconds one run takes on `scratch`.
  double time_run(Scratch& scratch) {
    const auto start = std::chrono::steady_clock::now();
    run(scratch.x.data(), scratch.w.data(), scratch.b.data(), scratch.addend.data(),
        scratch.y.data());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  // Makes the next real call reorder the real weights (after runs on scratch weights).
  void forget_scratch() { w_.forget_constant(); }

  const std::string& impl() const { return runner_.impl(); }
  bool bf16() const { return bf16_; }
  bool one_thread() const { return one_thread_; }
  bool activations_staged() const { return x_.staged() || y_.staged(); }

 private:
  Candidate(const dnnl::convolution_forward::primitive_desc& pd, const dnnl::memory::desc& x,
            const dnnl::memory::desc& w, const dnnl::memory::desc& y, bool constant_w,
            bool has_addend)
      : constant_w_(constant_w),
        x_(x, pd.src_desc(), StagedArg::Direction::In),
        w_(w, pd.weights_desc(), StagedArg::Direction::In),
        y_(y, pd.dst_desc(), StagedArg::Direction::Out),
        bias_(pd.bias_desc(), engine(), DNNL_MEMORY_NONE),
        bf16_(pd.src_desc().data_type() == dnnl::memory::data_type::bf16) {
    if (has_addend) addend_ = dnnl::memory(y, engine(), DNNL_MEMORY_NONE);
    runner_.init<dnnl::convolution_forward::primitive_desc, dnnl::convolution_forward>(pd);
  }

  bool constant_w_;  // frozen weights: reordered once
  StagedArg x_, w_, y_;
  dnnl::memory bias_;
  std::optional<dnnl::memory> addend_;
  bool bf16_;
  bool one_thread_ = false;  // made under OneThread: runs under it too
  Runner runner_;
};

class FusedConvKernel : public Kernel {
 public:
  explicit FusedConvKernel(Candidate candidate) : candidate_(std::move(candidate)) {}

  void compute(KernelContext& ctx) override {
    void* addend = ctx.inputs.size() == 4 ? ctx.inputs[3].raw() : nullptr;
    candidate_.run(ctx.inputs[0].raw(), ctx.inputs[1].raw(), ctx.inputs[2].raw(), addend,
                   ctx.outputs[0].raw());
  }
  std::string running_impl() const override {
    return candidate_.impl() + (candidate_.bf16() ? ":bf16" : "") +
           (candidate_.one_thread() ? ":1thread" : "");
  }

 private:
  Candidate candidate_;
};

// Plan-time measurement runs each candidate with its data flushed from the caches, as it finds
// them in a model, where the other nodes have run since. Measured hot, Winograd won by 10-20% on
// squeezenet1_1's 55x55 and 27x27 expand convs, whose transform buffers then stayed in cache,
// and ran up to 50% slower than the plain conv in the model; flushed, it wins by under 7% there
// and by 13-35% on ResNet-18's convs, where it also wins in the model. The input is then
// written again, as the node before leaves it (see evict), and Winograd loses on all of
// squeezenet1_1's expand convs, by 5% or more. A staged candidate must win by this fraction, over
// the run-to-run noise: at 10% and five rounds, ResNet-18's 3x3 convs, which measure 7-20%
// faster in Winograd, went one way or the other from one start to the next (9 to 11 of 13 in
// Winograd over three starts, 6 to 12 with fifteen rounds; each wrong pick costs ~0.1 ms); at 4%
// and fifteen rounds all 13 did in every start, and ResNet-18's plan takes ~0.1 s longer.
constexpr double kStagedMargin = 0.04;
constexpr int kMeasureRounds = 15;

// The thread counts a kernel may run on: the session's, and one thread, measured against each
// other; or one thread only (impl "onednn_1thread", so tests can check those primitives).
enum class Threads { Measured, One };

// What makes two nodes the same problem for choose().
std::string problem_key(const KernelSpec& spec, const std::vector<Layout>& layouts,
                        Threads threads) {
  std::string key = spec.node.op + "/" + std::to_string(layouts.size()) + "/" +
                    std::to_string(omp_get_max_threads()) + (spec.bf16 ? "/bf16" : "") +
                    (threads == Threads::One ? "/1thread" : "");
  for (const TensorType& t : spec.inputs) key += shape_str(t.shape);
  key += shape_str(spec.node.outputs[0].shape);
  for (const char* attr : {"strides", "dilations", "pads"})
    if (spec.node.attrs.has(attr))
      for (int64_t v : spec.node.attrs.get_ints(attr)) key += "," + std::to_string(v);
  for (const char* attr : {"padding", "activation"})
    if (spec.node.attrs.has(attr)) key += "/" + spec.node.attrs.get_string(attr);
  key += "/" + std::to_string(spec.node.attrs.get_int("groups"));
  return key;
}

// Index into the made candidates of the one to run, measured once per problem.
size_t choose_index(const KernelSpec& spec, const std::string& key,
                    std::vector<Candidate>& candidates) {
  const std::optional<size_t> pick = measured_choice(key, [&]() -> std::optional<size_t> {
    Candidate::Scratch scratch(spec);
    std::vector<double> best(candidates.size(), 1e30);
    for (Candidate& c : candidates) c.time_run(scratch);  // warm-up
    for (int round = 0; round < kMeasureRounds; ++round)
      for (size_t i = 0; i < candidates.size(); ++i) {
        candidates[i].evict(scratch);
        best[i] = std::min(best[i], candidates[i].time_run(scratch));
      }
    for (Candidate& c : candidates) c.forget_scratch();
    size_t fastest = 0;
    for (size_t i = 1; i < candidates.size(); ++i)
      if (best[i] < best[fastest] && (candidates[fastest].activations_staged() ||
                                      best[i] < (1.0 - kStagedMargin) * best[fastest]))
        fastest = i;
    return fastest;
  });
  // The same key makes the same candidates.
  return pick && *pick < candidates.size() ? *pick : 0;
}

// The FLOPs of one run of the node, as its op counts them.
double spec_flops(const KernelSpec& spec) {
  std::vector<Shape> shapes;
  for (const TensorType& t : spec.inputs) shapes.push_back(t.shape);
  return node_flops(spec.node, shapes);
}

// Above this, one thread is not measured: at ~100 GFLOP/s it would take 40 us where a second
// thread costs a few. Below, at batch 1, waking the other threads and waiting for them can cost
// more than the work (squeezenet-mnist's 0.1-0.2 MFLOP 1x1 convs: 13-17 us on two threads, 2.5-5
// us on one).
constexpr double kOneThreadMaxFlops = 4e6;

std::optional<Candidate> choose(const KernelSpec& spec, const std::vector<Layout>& layouts,
                                Threads threads) {
  std::vector<Candidate> candidates;
  const bool measure_one_thread =
      omp_get_max_threads() > 1 && spec_flops(spec) <= kOneThreadMaxFlops;
  // Each layout on every thread, then on one.
  for (bool one_thread : {false, true}) {
    if (one_thread ? threads == Threads::Measured && !measure_one_thread
                   : threads == Threads::One)
      continue;
    bool have_plain = false;
    for (Layout layout : layouts)
      if (std::optional<Candidate> c = Candidate::make(spec, layout, one_thread)) {
        // "Any" often resolves to plain NHWC (the brgconv kernels): then it is the same kernel
        // and there is nothing to measure.
        if (!c->activations_staged() && std::exchange(have_plain, true)) continue;
        candidates.push_back(std::move(*c));
      }
  }
  if (candidates.size() <= 1)
    return candidates.empty() ? std::nullopt : std::optional<Candidate>(std::move(candidates[0]));
  return std::move(
      candidates[choose_index(spec, problem_key(spec, layouts, threads), candidates)]);
}

KernelDef fused_conv_kernel(const char* op, const char* impl, std::vector<Layout> layouts,
                            int priority, Threads threads = Threads::Measured) {
  KernelDef def;
  def.op = op;
  def.impl = impl;
  def.priority = priority;
  def.accepts = [layouts](const KernelSpec& spec) {
    for (Layout layout : layouts)
      if (Candidate::make(spec, layout)) return true;
    return false;
  };
  def.create = [layouts, threads](const KernelSpec& spec) -> std::unique_ptr<Kernel> {
    std::optional<Candidate> c = choose(spec, layouts, threads);
    SF_CHECK(c.has_value(), "node '{}': no oneDNN convolution", spec.node.name);
    return std::make_unique<FusedConvKernel>(std::move(*c));
  };
  return def;
}

}  // namespace

void register_fused_conv_kernels(KernelRegistry& r) {
  for (const char* op : {op_names::kFusedConv2D, op_names::kFusedConv2DAdd}) {
    r.add(fused_conv_kernel(op, "onednn", {Layout::Nhwc, Layout::Blocked, Layout::Winograd},
                            kPriority));
    r.add(fused_conv_kernel(op, "onednn_nhwc", {Layout::Nhwc}, 1));
    r.add(fused_conv_kernel(op, "onednn_blocked", {Layout::Blocked}, 1));
    r.add(fused_conv_kernel(op, "onednn_1thread",
                            {Layout::Nhwc, Layout::Blocked, Layout::Winograd}, 1, Threads::One));
    // Winograd has no binary post-ops, so FusedConv2DAdd could never run it.
    if (std::string_view(op) == op_names::kFusedConv2D)
      r.add(fused_conv_kernel(op, "onednn_winograd", {Layout::Winograd}, 1));
  }
}

}  // namespace sf::onednn
