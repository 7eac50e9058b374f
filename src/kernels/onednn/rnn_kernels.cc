// oneDNN Gru and Lstm (f32): one RNN primitive runs the whole layer, both directions at once,
// instead of a graph of per-step ops. ONNX's weights are rearranged into oneDNN's layout and
// gate order (GRU z, r, h = oneDNN u, r, o; LSTM i, o, f, c -> oneDNN i, f, c~, o), summing
// the two biases, then reordered into the primitive's packed layout; frozen weights only on the
// first run. oneDNN writes both directions side by side ([T, N, 2H]); one reorder moves them to
// ONNX's [T, 2, N, H].
#include <array>
#include <vector>

#include "kernels/onednn/onednn_common.h"
#include "ops/op_names.h"

namespace sf::onednn {

namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

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
    weight_inputs_ = lstm ? std::vector<int>{1, 2, 3, 6} : std::vector<int>{1, 2, 3};
    constant_weights_ = true;
    for (int i : weight_inputs_)
      constant_weights_ = constant_weights_ && spec.input_is_constant(static_cast<size_t>(i));

    const std::string& direction = spec.node.attrs.get_string("direction");
    const auto dnnl_direction = direction == "bidirectional"
                                    ? dnnl::rnn_direction::bidirectional_concat
                                : direction == "reverse" ? dnnl::rnn_direction::unidirectional_right2left
                                                         : dnnl::rnn_direction::unidirectional_left2right;
    const auto desc = [](dims d, tag t) { return dnnl::memory::desc(d, dt::f32, t); };
    const dnnl::memory::desc src_layer = desc({steps_, batch_, in_}, tag::tnc);
    const dnnl::memory::desc state = desc({1, dirs_, batch_, hidden_}, tag::ldnc);
    const dnnl::memory::desc dst_layer = desc({steps_, batch_, dirs_ * hidden_}, tag::tnc);
    const dnnl::memory::desc layer_weights = desc({1, dirs_, in_, gates_, hidden_}, tag::ldigo);
    const dnnl::memory::desc iter_weights = desc({1, dirs_, hidden_, gates_, hidden_}, tag::ldigo);
    const dnnl::memory::desc bias = desc({1, dirs_, bias_gates_, hidden_}, tag::ldgo);
    const dnnl::memory::desc peephole = desc({1, dirs_, 3, hidden_}, tag::ldgo);
    const auto any = [](const dnnl::memory::desc& d) {
      return dnnl::memory::desc(d.dims(), dt::f32, tag::any);
    };
    const dnnl::primitive_attr attr = user_scratchpad_attr();
    const auto inference = dnnl::prop_kind::forward_inference;
    dnnl::memory::desc want_layer_weights, want_iter_weights;
    if (lstm) {
      const dnnl::lstm_forward::desc d =
          peepholes_ ? dnnl::lstm_forward::desc(inference, dnnl_direction, src_layer, state, state,
                                                any(layer_weights), any(iter_weights), peephole,
                                                bias, dst_layer, state, state)
                     : dnnl::lstm_forward::desc(inference, dnnl_direction, src_layer, state, state,
                                                any(layer_weights), any(iter_weights), bias,
                                                dst_layer, state, state);
      const dnnl::lstm_forward::primitive_desc pd(d, attr, engine());
      runner_.init<dnnl::lstm_forward::primitive_desc, dnnl::lstm_forward>(pd);
      want_layer_weights = pd.weights_layer_desc();
      want_iter_weights = pd.weights_iter_desc();
    } else if (linear_before_reset_) {
      const dnnl::lbr_gru_forward::desc d(inference, dnnl_direction, src_layer, state,
                                          any(layer_weights), any(iter_weights), bias, dst_layer,
                                          state);
      const dnnl::lbr_gru_forward::primitive_desc pd(d, attr, engine());
      runner_.init<dnnl::lbr_gru_forward::primitive_desc, dnnl::lbr_gru_forward>(pd);
      want_layer_weights = pd.weights_layer_desc();
      want_iter_weights = pd.weights_iter_desc();
    } else {
      const dnnl::gru_forward::desc d(inference, dnnl_direction, src_layer, state,
                                      any(layer_weights), any(iter_weights), bias, dst_layer,
                                      state);
      const dnnl::gru_forward::primitive_desc pd(d, attr, engine());
      runner_.init<dnnl::gru_forward::primitive_desc, dnnl::gru_forward>(pd);
      want_layer_weights = pd.weights_layer_desc();
      want_iter_weights = pd.weights_iter_desc();
    }
    layer_weights_.resize(static_cast<size_t>(dirs_ * in_ * gates_ * hidden_));
    iter_weights_.resize(static_cast<size_t>(dirs_ * hidden_ * gates_ * hidden_));
    bias_.resize(static_cast<size_t>(dirs_ * bias_gates_ * hidden_));
    peephole_.resize(static_cast<size_t>(dirs_ * 3 * hidden_));
    staged_layer_weights_.emplace(layer_weights, want_layer_weights, StagedArg::Direction::In);
    staged_iter_weights_.emplace(iter_weights, want_iter_weights, StagedArg::Direction::In);
    bias_memory_ = dnnl::memory(bias, engine(), bias_.data());
    peephole_memory_ = dnnl::memory(peephole, engine(), peephole_.data());
    src_layer_ = dnnl::memory(src_layer, engine(), DNNL_MEMORY_NONE);
    for (auto& m : states_) m = dnnl::memory(state, engine(), DNNL_MEMORY_NONE);
    if (dirs_ == 2) {
      // [T, N, D, H] as oneDNN writes it, and the same dims over ONNX's [T, D, N, H].
      const dims both{steps_, batch_, dirs_, hidden_};
      concatenated_.resize(static_cast<size_t>(steps_ * batch_ * dirs_ * hidden_));
      dst_layer_ = dnnl::memory(dst_layer, engine(), concatenated_.data());
      const dnnl::memory from(dnnl::memory::desc(both, dt::f32, tag::abcd), engine(),
                              concatenated_.data());
      y_ = dnnl::memory(dnnl::memory::desc(both, dt::f32,
                                           dims{dirs_ * batch_ * hidden_, hidden_,
                                                batch_ * hidden_, 1}),
                        engine(), DNNL_MEMORY_NONE);
      concatenated_view_ = from;
      to_onnx_layout_ = dnnl::reorder(from, y_);
    } else {
      dst_layer_ = dnnl::memory(dst_layer, engine(), DNNL_MEMORY_NONE);
    }
  }

  void compute(KernelContext& ctx) override {
    std::vector<const void*> weights;
    for (int i : weight_inputs_) weights.push_back(ctx.inputs[static_cast<size_t>(i)].raw());
    if (!constant_weights_ || weights != prepared_from_) {
      prepare_weights(ctx);
      staged_layer_weights_->forget_constant();
      staged_iter_weights_->forget_constant();
      prepared_from_ = std::move(weights);
    }
    src_layer_.set_data_handle(ctx.inputs[0].raw());
    // The states: h0 (and c0) in, Y_h (and Y_c) out.
    states_[0].set_data_handle(ctx.inputs[4].raw());
    states_[1].set_data_handle(ctx.outputs[1].raw());
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC_LAYER, src_layer_},
        {DNNL_ARG_SRC_ITER, states_[0]},
        {DNNL_ARG_WEIGHTS_LAYER, staged_layer_weights_->bind_constant(layer_weights_.data())},
        {DNNL_ARG_WEIGHTS_ITER, staged_iter_weights_->bind_constant(iter_weights_.data())},
        {DNNL_ARG_BIAS, bias_memory_},
        {DNNL_ARG_DST_ITER, states_[1]}};
    if (lstm_) {
      states_[2].set_data_handle(ctx.inputs[5].raw());
      states_[3].set_data_handle(ctx.outputs[2].raw());
      args.emplace(DNNL_ARG_SRC_ITER_C, states_[2]);
      args.emplace(DNNL_ARG_DST_ITER_C, states_[3]);
      if (peepholes_) args.emplace(DNNL_ARG_WEIGHTS_PEEPHOLE, peephole_memory_);
    }
    if (dirs_ == 1) dst_layer_.set_data_handle(ctx.outputs[0].raw());
    args.emplace(DNNL_ARG_DST_LAYER, dst_layer_);
    runner_.run(std::move(args));
    if (dirs_ == 2) {
      y_.set_data_handle(ctx.outputs[0].raw());
      to_onnx_layout_.execute(stream(), {{DNNL_ARG_FROM, concatenated_view_}, {DNNL_ARG_TO, y_}});
    }
    stream().wait();
  }

 private:
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
            layer_weights_[static_cast<size_t>(((d * in_ + i) * G + to) * H + o)] = w[row * in_ + i];
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
  std::vector<int> weight_inputs_;
  bool constant_weights_ = false;
  // The weight buffers the rearranged weights came from (frozen weights: rearranged once).
  std::vector<const void*> prepared_from_;
  Runner runner_;
  std::vector<float> layer_weights_, iter_weights_, bias_, peephole_, concatenated_;
  std::optional<StagedArg> staged_layer_weights_, staged_iter_weights_;
  dnnl::memory bias_memory_, peephole_memory_, src_layer_, dst_layer_, concatenated_view_, y_;
  std::array<dnnl::memory, 4> states_;  // h0, Y_h, c0, Y_c
  dnnl::reorder to_onnx_layout_;
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
