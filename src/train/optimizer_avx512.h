// Adam's update with AVX-512F, sixteen parameters to a vector: GCC leaves the portable loop
// scalar (a square root and a division per parameter), 8 ms for Deep-MNIST's 3.2M fc1 weights
// on one core where this takes 3. The same operations in the same order, none fused, so the
// weights are the portable loop's bit for bit. Callers check cpu_features().avx512f.
#pragma once

#include <cstdint>

namespace sf {

struct AdamStep {
  float beta1, beta2;
  float step;  // the learning rate with Adam's bias correction folded in
  float epsilon;
  float decay_step;  // learning rate x decoupled weight decay
};

// For i in [begin, end): m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g g;
// w -= step m / (sqrt(v) + eps) + decay_step w; and, where `rounded` is set, the new w rounded
// to bf16 there in the same pass, as codec/weight_codec.h's float_to_bf16 rounds.
void adam_update_avx512(float* w, const float* g, float* m, float* v, int64_t begin, int64_t end,
                        const AdamStep& s, uint16_t* rounded = nullptr);
// w[i] rounded to bf16 as float_to_bf16 rounds, for i in [begin, end).
void round_to_bf16_avx512(const float* w, int64_t begin, int64_t end, uint16_t* rounded);

// Adam with a second moment kept elsewhere (OptimizerConfig::second_moment_from_outside), for i
// in [begin, end): m = b1 m + (1 - b1) g; a = m_scale m; d = max(v_scale sqrt(v), |a|) + eps;
// w -= rate a / d + decay_step w.
struct AdamOutsideStep {
  float beta1;
  float m_scale;  // 1 / (1 - b1^t)
  float v_scale;  // 1 / sqrt(1 - b2^s), s the steps the second moment averages
  float rate, epsilon, decay_step;
};
void adam_outside_update_avx512(float* w, const float* g, float* m, const float* v, int64_t begin,
                                int64_t end, const AdamOutsideStep& s);

}  // namespace sf
