// erf(z) ~ z P(z^2) / Q(z^2) on [-4, 4], clamped to [-1, 1] (float rounds erf to +-1 beyond
// 3.92). P and Q are a least-squares fit of the relative error on [0, 3.92], refined towards
// minimax: within 8e-8 of erf when evaluated in double, within a few float roundings (< 6e-7
// relative) in float. The Gelu kernels evaluate it, portable and AVX-512 alike, by Horner's rule
// from the highest coefficient.
#pragma once

namespace sf::erf_rational {

inline constexpr float kClamp = 4.0f;
inline constexpr float kP[] = {1.1283791555490634f,    0.19080493464893403f,
                               0.04934447905228993f,   0.0033211337411094837f,
                               0.0001334833677556214f, -1.9452628689470555e-06f,
                               2.047445790848987e-08f};
inline constexpr float kQ[] = {1.0f, 0.5024291182896643f, 0.11121135710944442f,
                               0.013569403880145395f, 0.0008664662756970409f};
inline constexpr int kPSize = sizeof(kP) / sizeof(kP[0]);
inline constexpr int kQSize = sizeof(kQ) / sizeof(kQ[0]);

inline float erf(float z) {
  const float zc = z < -kClamp ? -kClamp : (z > kClamp ? kClamp : z);
  const float t = zc * zc;
  float p = kP[kPSize - 1];
  for (int i = kPSize - 2; i >= 0; --i) p = p * t + kP[i];
  float q = kQ[kQSize - 1];
  for (int i = kQSize - 2; i >= 0; --i) q = q * t + kQ[i];
  const float r = zc * p / q;
  return r < -1.0f ? -1.0f : (r > 1.0f ? 1.0f : r);
}

}  // namespace sf::erf_rational
