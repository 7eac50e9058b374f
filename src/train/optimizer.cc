#include "train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "codec/weight_codec.h"
#include "core/error.h"
#include "cpu/cpu_features.h"
#include "cpu/parallel_for.h"
#include "train/optimizer_avx512.h"

namespace sf {

void check_optimizer_kind(const std::string& kind) {
  if (kind != "sgd" && kind != "momentum" && kind != "adam")
    fail("unknown optimizer '{}' (expected sgd, momentum or adam)", kind);
}

void check_lr_schedule(const std::string& kind) {
  if (kind != "constant" && kind != "step" && kind != "cosine")
    fail("unknown learning-rate schedule '{}' (expected constant, step or cosine)", kind);
}

Optimizer::Optimizer(OptimizerConfig config) : config_(std::move(config)) {
  check_optimizer_kind(config_.kind);
}

std::string Optimizer::slot_key(const std::string& slot_name, const std::string& variable) const {
  return config_.kind + "/" + slot_name + "/" + variable;
}

Tensor Optimizer::slot_value(const std::string& slot_name, const std::string& variable) const {
  const auto it = slots_.find(slot_key(slot_name, variable));
  SF_CHECK(it != slots_.end(), "the optimizer has no slot '{}' for '{}'", slot_name, variable);
  return it->second;
}

Tensor& Optimizer::slot(const std::string& slot_name, const std::string& variable,
                        const Tensor& like) {
  const std::string key = slot_key(slot_name, variable);
  auto it = slots_.find(key);
  if (it == slots_.end()) it = slots_.emplace(key, Tensor(DType::f32, like.shape())).first;
  return it->second;
}

namespace {

// w[begin, end) rounded to bf16 into `rounded` (if set), while the share is still in cache.
void round_share(const float* w, int64_t begin, int64_t end, uint16_t* rounded, bool vector) {
  if (rounded == nullptr) return;
#if defined(__x86_64__)
  if (vector) return round_to_bf16_avx512(w, begin, end, rounded);
#endif
  (void)vector;
  for (int64_t i = begin; i < end; ++i) rounded[i] = quant::float_to_bf16(w[i]);
}

}  // namespace

void Optimizer::apply(const std::string& name, Tensor& param, const Tensor& grad, double lr,
                      bool decay, uint16_t* rounded, ElementRange part) {
  SF_CHECK(param.shape() == grad.shape(), "gradient {} for variable '{}' {}",
           shape_str(grad.shape()), name, shape_str(param.shape()));
  float* w = param.data<float>();
  const float* g = grad.data<float>();
  const int64_t begin = part.begin, end = part.end < 0 ? param.numel() : part.end;
  SF_CHECK(0 <= begin && begin <= end && end <= param.numel(),
           "update of elements [{}, {}) of variable '{}' of {}", begin, end, name, param.numel());
  const float wd = decay ? static_cast<float>(config_.weight_decay) : 0.0f;
  const float rate = static_cast<float>(lr);
  const bool vector = cpu_features().avx512f;
  if (config_.kind == "sgd") {
    parallel_for(begin, end, end - begin > 65536, [&](int64_t share_begin, int64_t share_end) {
      for (int64_t i = share_begin; i < share_end; ++i) w[i] -= rate * (g[i] + wd * w[i]);
      round_share(w, share_begin, share_end, rounded, vector);
    });
  } else if (config_.kind == "momentum") {
    float* v = slot("velocity", name, param).data<float>();
    const float mu = static_cast<float>(config_.momentum);
    parallel_for(begin, end, end - begin > 65536, [&](int64_t share_begin, int64_t share_end) {
      for (int64_t i = share_begin; i < share_end; ++i) {
        v[i] = mu * v[i] + g[i] + wd * w[i];
        w[i] -= rate * v[i];
      }
      round_share(w, share_begin, share_end, rounded, vector);
    });
  } else if (config_.second_moment_from_outside) {
    SF_CHECK(second_moment_steps_ > 0, "Adam's second moment of '{}' was never set", name);
    float* m = slot("m", name, param).data<float>();
    const float* v = slot("v", name, param).data<float>();
    const double t = static_cast<double>(std::max<int64_t>(steps_, 1));
    const double s = static_cast<double>(second_moment_steps_);
    // Bias-corrected moments as in the Adam paper; the larger of sqrt(v) and |m| in the
    // denominator bounds a step by the learning rate where the decoded gradients (m) and the
    // ranks' own ones (v) disagree.
    const float b1 = static_cast<float>(config_.beta1);
    const AdamOutsideStep adam{
        .beta1 = b1,
        .m_scale = static_cast<float>(1.0 / (1.0 - std::pow(config_.beta1, t))),
        .v_scale = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(config_.beta2, s))),
        .rate = rate,
        .epsilon = static_cast<float>(config_.epsilon),
        .decay_step = rate * wd};
    parallel_for(begin, end, end - begin > 65536, [&](int64_t share_begin, int64_t share_end) {
#if defined(__x86_64__)
      if (vector) {
        adam_outside_update_avx512(w, g, m, v, share_begin, share_end, adam);
        return round_share(w, share_begin, share_end, rounded, vector);
      }
#endif
      for (int64_t i = share_begin; i < share_end; ++i) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        const float a = adam.m_scale * m[i];
        const float d = std::max(adam.v_scale * std::sqrt(v[i]), std::fabs(a)) + adam.epsilon;
        w[i] -= adam.rate * a / d + adam.decay_step * w[i];
      }
      round_share(w, share_begin, share_end, rounded, vector);
    });
  } else {
    float* m = slot("m", name, param).data<float>();
    float* v = slot("v", name, param).data<float>();
    const double t = static_cast<double>(std::max<int64_t>(steps_, 1));
    const float b1 = static_cast<float>(config_.beta1);
    const float b2 = static_cast<float>(config_.beta2);
    // Bias correction folded into the step size, as in the Adam paper's efficient form.
    const float step = static_cast<float>(lr * std::sqrt(1.0 - std::pow(config_.beta2, t)) /
                                          (1.0 - std::pow(config_.beta1, t)));
    const float eps = static_cast<float>(config_.epsilon);
    const float decay_step = rate * wd;
    [[maybe_unused]] const AdamStep adam{b1, b2, step, eps, decay_step};
    parallel_for(begin, end, end - begin > 65536, [&](int64_t share_begin, int64_t share_end) {
#if defined(__x86_64__)
      // Rounded in the update's own pass: the weights are read and written once either way.
      if (vector) return adam_update_avx512(w, g, m, v, share_begin, share_end, adam, rounded);
#endif
      for (int64_t i = share_begin; i < share_end; ++i) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        w[i] -= step * m[i] / (std::sqrt(v[i]) + eps) + decay_step * w[i];
      }
      round_share(w, share_begin, share_end, rounded, vector);
    });
  }
}

void Optimizer::set_second_moment(const std::string& variable, const Tensor& v, int64_t steps) {
  SF_CHECK(config_.kind == "adam" && config_.second_moment_from_outside,
           "a second moment is set for '{}' but the optimizer ({}) keeps its own", variable,
           config_.kind);
  SF_CHECK(steps > 0, "second moment of '{}' over {} steps", variable, steps);
  Tensor& slot_v = slot("v", variable, v);
  SF_CHECK(slot_v.shape() == v.shape() && v.dtype() == DType::f32,
           "second moment {} for variable '{}' {}", shape_str(v.shape()), variable,
           shape_str(slot_v.shape()));
  std::memcpy(slot_v.raw(), v.raw(), v.bytes());
  second_moment_steps_ = steps;
}

void Optimizer::mask_state(const std::string& variable, const Tensor& mask) {
  const std::string suffix = "/" + variable;
  for (auto& [key, value] : slots_) {
    // Keys are "<kind>/<slot>/<variable>" and variable names contain slashes themselves.
    if (key.size() <= suffix.size() ||
        key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0 ||
        std::count(key.begin(), key.end() - static_cast<std::ptrdiff_t>(suffix.size()), '/') != 1)
      continue;
    SF_CHECK(value.numel() == mask.numel(), "optimizer slot '{}': mask has {} elements, slot {}",
             key, mask.numel(), value.numel());
    float* v = value.data<float>();
    const float* m = mask.data<float>();
    for (int64_t i = 0; i < value.numel(); ++i) v[i] *= m[i];
  }
}

std::vector<std::string> Optimizer::slot_names() const {
  if (config_.kind == "momentum") return {"velocity"};
  if (config_.kind == "adam") return {"m", "v"};
  return {};
}

std::map<std::string, Tensor> Optimizer::state() const {
  std::map<std::string, Tensor> out = slots_;
  Tensor steps(DType::i64, {});
  *steps.data<int64_t>() = steps_;
  out["optimizer/steps"] = steps;
  if (config_.second_moment_from_outside) {
    Tensor second(DType::i64, {});
    *second.data<int64_t>() = second_moment_steps_;
    out["optimizer/second_moment_steps"] = second;
  }
  return out;
}

void Optimizer::restore(const std::map<std::string, Tensor>& tensors) {
  for (const auto& [key, value] : tensors) {
    if (key == "optimizer/steps") {
      steps_ = *value.data<int64_t>();
    } else if (key == "optimizer/second_moment_steps") {
      // A run that kept its own second moment resumes with the last one set from outside.
      if (config_.second_moment_from_outside) second_moment_steps_ = *value.data<int64_t>();
    } else if (key.rfind(config_.kind + "/", 0) == 0) {
      slots_[key] = value.clone();
    }
  }
}

double LrSchedule::at(int64_t step) const {
  const double progress = std::clamp(
      static_cast<double>(step) / static_cast<double>(std::max<int64_t>(total_steps, 1)), 0.0, 1.0);
  if (kind == "step") return base * (progress < 0.5 ? 1.0 : progress < 0.75 ? 0.1 : 0.01);
  if (kind == "cosine") return base * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return base;
}

}  // namespace sf
