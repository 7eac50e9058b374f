// Gradient compression for data parallelism (--grad-compression), with error feedback: each
// rank compresses its gradient plus the residual of earlier steps, and keeps as the new residual
// what the compressed message left out, so nothing is lost, only delayed (1-bit SGD, Seide et
// al. 2014; Deep Gradient Compression, Lin et al. 2018). Compressed gradients cannot be summed
// on the way, so the ranks allgather them and each rank decodes and adds the N messages in rank
// order: every rank gets the same sum, bit for bit.
//   fp16     2 bytes per float (half precision, rounded to nearest even)
//   topk:F   the ceil(F x n) largest magnitudes: their values as halves and their indices
//            Elias-Fano coded, 2 + log2(1/F) bits each: about 3.1 bytes per entry at F = 1%,
//            130x fewer bytes than the floats
//   onebit   one sign bit per float and a bf16 scale (the mean magnitude) per 512 floats: 31x
//            fewer bytes (the bound is 32x: one bit for each 32-bit float, whatever the coding);
//            with Adam the ranks also average its second moment of their own gradients once
//            every 1,024 steps (data_parallel.h), 30x fewer bytes over a long run
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace sf {

struct GradCompression {
  enum class Kind { none, fp16, topk, onebit };
  Kind kind = Kind::none;
  double fraction = 0.01;  // topk
  std::string name() const;
};

// Parses "none", "fp16", "topk:F" (0 < F <= 1) or "onebit"; a one-line error otherwise.
GradCompression parse_grad_compression(const std::string& text);

// Bytes of one rank's message for a bucket of `n` floats.
size_t compressed_bytes(const GradCompression& c, int64_t n);
// Writes the message for `residual` (the gradient plus the residual so far) into `message` and
// leaves in `residual` what the message does not carry.
void compress(const GradCompression& c, float* residual, int64_t n, uint8_t* message);
// Adds the gradient a message carries to `sum`.
void add_decoded(const GradCompression& c, const uint8_t* message, int64_t n, float* sum);

}  // namespace sf
