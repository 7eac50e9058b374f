// oneDNN Gru and Lstm (f32): one RNN primitive per direction runs the whole layer instead of a
// graph of per-step ops. ONNX's weights are rearranged into oneDNN's layout and gate order (GRU
// z, r, h = oneDNN u, r, o; LSTM i, o, f, c -> oneDNN i, f, c~, o), summing the two biases, then
// reordered into the primitive's layout; frozen weights only on the first run. Each direction
// writes its slice of ONNX's Y [T, D, N, H] in place (a strided destination).
//
// oneDNN's RNN forks and joins its threads at every step. When a step is small that costs more
// than it shares (the 32-unit bidirectional GRU of bench/sequence_models.py: 3x slower on two
// threads than on one at batch 8, 2x at batch 64), so small layers run each direction on one
// thread, the two directions side by side.
#include <omp.h>

#include <array>
#include <vector>

#include "kernels/onednn/onednn_common.h"
#include "ops/op_names.h"

namespace sf::onednn {

namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

// FLOPs of one step's recurrent product (per direction) below which a direction runs on one
// thread: about 20 us of work on one core.
constexpr int64_t kSmallStepFlops = int64_t{1} << 20;

class RecurrentKernel : public Kernel {
 public:
  RecurrentKernel(const KernelSpec& spec, bool lstm)
      : lstm_(lstm),
        linear_before_reset_(!lstm && spec.node.attrs.get_bool("linear_before_reset")),
        peepholes_(lstm && spec.node.attrs.get_bool("peepholes")) {
    const Shape& x = spec.inputs[0].shape;
    const Shape& w = spec.inputs[1].shape;
    steps_ = x[0];
    batch_ = x[1];
    in_ = x[2];
    dirs_ = w[0];
    gates_ = lstm ? 4 : 3;
    hidden_ = w[1] / gates_;
    bias_gates_ = linear_before_reset_ ? 4 : gates_;
    small_ = 2 * batch_ * gates_ * hidden_ * hidden_ < kSmallStepFlops;
    weight_inputs_ = lstm ? std::vector<int>{1, 2, 3, 6} : std::vector<int>{1, 2, 3};
    constant_weights_ = true;
    for (int i : weight_inputs_)
      constant_weights_ = constant_weights_ && spec.input_is_constant(static_cast<size_t>(i));
    layer_weights_.resize(static_cast<size_t>(dirs_ * in_ * gates_ * hidden_));
    iter_weights_.resize(static_cast<size_t>(dirs_ * hidden_ * gates_ * hidden_));
    bias_.resize(static_cast<size_t>(dirs_ * bias_gates_ * hidden_));
    peephole_.resize(static_cast<size_t>(dirs_ * 3 * hidden_));
    const std::string& direction = spec.node.attrs.get_string("direction");
    directions_.reserve(static_cast<size_t>(dirs_));  // they point into this kernel's buffers
    for (int64_t d = 0; d < dirs_; ++d)
      directions_.emplace_back(*this,
                               direction == "reverse" || d == 1
                                   ? dnnl::rnn_direction::unidirectional_right2left
                                   : dnnl::rnn_direction::unidirectional_left2right,
                               d);
  }

  void compute(KernelContext& ctx) override {
    std::vector<const void*> weights;
    for (int i : weight_inputs_) weights.push_back(ctx.inputs[static_cast<size_t>(i)].raw());
    const bool fresh = !constant_weights_ || weights != prepared_from_;
    if (fresh) {
      prepare_weights(ctx);
      prepared_from_ = std::move(weights);
    }
    for (Direction& d : directions_) d.bind(ctx, fresh);
    stream().wait();  // the weight reorders
    if (!small_) {
      for (Direction& d : directions_) d.run();
    } else if (dirs_ == 2 && omp_get_max_threads() >= 2) {
      // Inside the region oneDNN runs each primitive on its own thread.
#pragma omp parallel for num_threads(2)
      for (size_t d = 0; d < 2; ++d) directions_[d].run();
    } else {
      OneThread one;
      for (Direction& d : directions_) d.run();
    }
  }

 private:
  // One direction's primitive, its scratchpad and stream, and its arguments.
  class Direction {
   public:
    Direction(RecurrentKernel& k, dnnl::rnn_direction direction, int64_t d)
        : k_(k), d_(d), stream_(engine()) {
      // Small layers run on one thread: create them under the same setting.
      std::optional<OneThread> one;
      if (k.small_) one.emplace();
      const int64_t N = k.batch_, H = k.hidden_, G = k.gates_;
      const auto desc = [](dims sizes, tag t) { return dnnl::memory::desc(sizes, dt::f32, t); };
      const dnnl::memory::desc src_layer = desc({k.steps_, N, k.in_}, tag::tnc);
      const dnnl::memory::desc state = desc({1, 1, N, H}, tag::ldnc);
      // Step t of this direction in Y [T, D, N, H].
      const dnnl::memory::desc dst_layer({k.steps_, N, H}, dt::f32, dims{k.dirs_ * N * H, H, 1});
      const dnnl::memory::desc layer_weights = desc({1, 1, k.in_, G, H}, tag::ldigo);
      const dnnl::memory::desc iter_weights = desc({1, 1, H, G, H}, tag::ldigo);
      const dnnl::memory::desc bias = desc({1, 1, k.bias_gates_, H}, tag::ldgo);
      const dnnl::memory::desc peephole = desc({1, 1, 3, H}, tag::ldgo);
      const auto any = [](const dnnl::memory::desc& m) {
        return dnnl::memory::desc(m.dims(), dt::f32, tag::any);
      };
      const dnnl::primitive_attr attr = user_scratchpad_attr();
      const auto inference = dnnl::prop_kind::forward_inference;
      dnnl::memory::desc want_layer_weights, want_iter_weights, scratchpad;
      const auto keep = [&](const auto& pd) {
        want_layer_weights = pd.weights_layer_desc();
        want_iter_weights = pd.weights_iter_desc();
        scratchpad = pd.scratchpad_desc();
      };
      if (k.lstm_) {
        const dnnl::lstm_forward::desc rnn =
            k.peepholes_ ? dnnl::lstm_forward::desc(inference, direction, src_layer, state, state,
                                                    any(layer_weights), any(iter_weights), peephole,
                                                    bias, dst_layer, state, state)
                         : dnnl::lstm_forward::desc(inference, direction, src_layer, state, state,
                                                    any(layer_weights), any(iter_weights), bias,
                                                    dst_layer, state, state);
        const dnnl::lstm_forward::primitive_desc pd(rnn, attr, engine());
        keep(pd);
        primitive_ = dnnl::lstm_forward(pd);
      } else if (k.linear_before_reset_) {
        const dnnl::lbr_gru_forward::desc rnn(inference, direction, src_layer, state,
                                              any(layer_weights), any(iter_weights), bias,
                                              dst_layer, state);
        const dnnl::lbr_gru_forward::primitive_desc pd(rnn, attr, engine());
        keep(pd);
        primitive_ = dnnl::lbr_gru_forward(pd);
      } else {
        const dnnl::gru_forward::desc rnn(inference, direction, src_layer, state,
                                          any(layer_weights), any(iter_weights), bias, dst_layer,
                                          state);
        const dnnl::gru_forward::primitive_desc pd(rnn, attr, engine());
        keep(pd);
        primitive_ = dnnl::gru_forward(pd);
      }
      scratchpad_ = dnnl::memory(scratchpad, engine());
      layer_weights_.emplace(layer_weights, want_layer_weights, StagedArg::Direction::In);
      iter_weights_.emplace(iter_weights, want_iter_weights, StagedArg::Direction::In);
      args_[DNNL_ARG_BIAS] = dnnl::memory(bias, engine(), k.bias_.data() + d * k.bias_gates_ * H);
      if (k.peepholes_)
        args_[DNNL_ARG_WEIGHTS_PEEPHOLE] =
            dnnl::memory(peephole, engine(), k.peephole_.data() + d * 3 * H);
      args_[DNNL_ARG_SRC_LAYER] = dnnl::memory(src_layer, engine(), DNNL_MEMORY_NONE);
      args_[DNNL_ARG_DST_LAYER] = dnnl::memory(dst_layer, engine(), DNNL_MEMORY_NONE);
      for (int arg : state_args()) args_[arg] = dnnl::memory(state, engine(), DNNL_MEMORY_NONE);
      args_[DNNL_ARG_SCRATCHPAD] = scratchpad_;
    }

    // Points the arguments at this run's buffers; `fresh`: the rearranged weights changed.
    void bind(KernelContext& ctx, bool fresh) {
      const int64_t G = k_.gates_, H = k_.hidden_, state = d_ * k_.batch_ * H;
      if (fresh) {
        layer_weights_->forget_constant();
        iter_weights_->forget_constant();
      }
      args_[DNNL_ARG_WEIGHTS_LAYER] =
          layer_weights_->bind_constant(k_.layer_weights_.data() + d_ * k_.in_ * G * H);
      args_[DNNL_ARG_WEIGHTS_ITER] =
          iter_weights_->bind_constant(k_.iter_weights_.data() + d_ * H * G * H);
      args_[DNNL_ARG_SRC_LAYER].set_data_handle(ctx.inputs[0].raw());
      args_[DNNL_ARG_DST_LAYER].set_data_handle(ctx.outputs[0].data<float>() + state);
      args_[DNNL_ARG_SRC_ITER].set_data_handle(ctx.inputs[4].data<float>() + state);
      args_[DNNL_ARG_DST_ITER].set_data_handle(ctx.outputs[1].data<float>() + state);
      if (k_.lstm_) {
        args_[DNNL_ARG_SRC_ITER_C].set_data_handle(ctx.inputs[5].data<float>() + state);
        args_[DNNL_ARG_DST_ITER_C].set_data_handle(ctx.outputs[2].data<float>() + state);
      }
    }

    void run() {
      primitive_.execute(stream_, args_);
      stream_.wait();
    }

   private:
    std::vector<int> state_args() const {
      if (k_.lstm_)
        return {DNNL_ARG_SRC_ITER, DNNL_ARG_DST_ITER, DNNL_ARG_SRC_ITER_C, DNNL_ARG_DST_ITER_C};
      return {DNNL_ARG_SRC_ITER, DNNL_ARG_DST_ITER};
    }

    RecurrentKernel& k_;
    int64_t d_;
    dnnl::stream stream_;
    dnnl::primitive primitive_;
    dnnl::memory scratchpad_;
    std::optional<StagedArg> layer_weights_, iter_weights_;
    std::unordered_map<int, dnnl::memory> args_;
  };

  // The oneDNN gate of ONNX gate g.
  int64_t gate_of(int64_t g) const {
    static constexpr std::array<int64_t, 4> kLstm{0, 3, 1, 2};  // i, o, f, c -> i, f, c~, o
    return lstm_ ? kLstm[static_cast<size_t>(g)] : g;
  }

  // ONNX's w [D, G*H, I], r [D, G*H, H], b [D, 2*G*H] (and p [D, 3*H]) into ldigo / ldgo with
  // oneDNN's gate order.
  void prepare_weights(const KernelContext& ctx) {
    const float* w = ctx.inputs[1].data<float>();
    const float* r = ctx.inputs[2].data<float>();
    const float* b = ctx.inputs[3].data<float>();
    const int64_t G = gates_, H = hidden_;
    for (int64_t d = 0; d < dirs_; ++d)
      for (int64_t g = 0; g < G; ++g) {
        const int64_t to = gate_of(g);
        for (int64_t o = 0; o < H; ++o) {
          const int64_t row = (d * G + g) * H + o;
          for (int64_t i = 0; i < in_; ++i)
            layer_weights_[static_cast<size_t>(((d * in_ + i) * G + to) * H + o)] =
                w[row * in_ + i];
          for (int64_t i = 0; i < H; ++i)
            iter_weights_[static_cast<size_t>(((d * H + i) * G + to) * H + o)] = r[row * H + i];
          const float wb = b[(d * 2 * G + g) * H + o], rb = b[(d * 2 * G + G + g) * H + o];
          float* bias = bias_.data() + d * bias_gates_ * H;
          if (linear_before_reset_ && g == 2) {
            // oneDNN's fourth gate: the recurrent bias that the reset gate scales.
            bias[2 * H + o] = wb;
            bias[3 * H + o] = rb;
          } else {
            bias[to * H + o] = wb + rb;
          }
        }
      }
    if (peepholes_) {
      // ONNX's i, o, f -> oneDNN's i, f, o.
      static constexpr std::array<int64_t, 3> kPeephole{0, 2, 1};
      const float* p = ctx.inputs[6].data<float>();
      for (int64_t d = 0; d < dirs_; ++d)
        for (int64_t k = 0; k < 3; ++k)
          for (int64_t o = 0; o < H; ++o)
            peephole_[static_cast<size_t>((d * 3 + kPeephole[static_cast<size_t>(k)]) * H + o)] =
                p[(d * 3 + k) * H + o];
    }
  }

  bool lstm_, linear_before_reset_, peepholes_;
  int64_t steps_ = 0, batch_ = 0, in_ = 0, dirs_ = 0, gates_ = 0, hidden_ = 0, bias_gates_ = 0;
  bool small_ = false;
  std::vector<int> weight_inputs_;
  bool constant_weights_ = false;
  // The weight buffers the rearranged weights came from (frozen weights: rearranged once).
  std::vector<const void*> prepared_from_;
  // ONNX's weights in oneDNN's ldigo / ldgo layouts and gate order, all directions.
  std::vector<float> layer_weights_, iter_weights_, bias_, peephole_;
  std::vector<Direction> directions_;
};

KernelDef recurrent_kernel(const char* op, bool lstm) {
  KernelDef def;
  def.op = op;
  def.dtype = DType::f32;
  def.impl = "onednn";
  def.priority = kPriority;
  def.accepts = [](const KernelSpec& spec) {
    return num_elements(spec.inputs[0].shape) > 0 && num_elements(spec.inputs[1].shape) > 0;
  };
  def.create = [lstm](const KernelSpec& spec) -> std::unique_ptr<Kernel> {
    return std::make_unique<RecurrentKernel>(spec, lstm);
  };
  return def;
}

}  // namespace

void register_rnn_kernels(KernelRegistry& r) {
  r.add(recurrent_kernel(op_names::kGru, false));
  r.add(recurrent_kernel(op_names::kLstm, true));
}

}  // namespace sf::onednn
