// Synchronous data parallelism over a Communicator (src/comm): every rank trains a replica on
// its shard of each step (train/sharded_batches.h), the gradients are averaged by allreduce,
// and every rank applies the same update, so the replicas stay identical (checked by
// check_replicas).
//
// GradientBuckets overlaps the averaging with the backward pass, as PyTorch DDP and Horovod do:
// the gradients are grouped, in the order the backward pass produces them, into buckets of about
// --bucket-mb; a bucket's ring average (comm/ring_average.h, straight from the gradients'
// memory into the bucket) starts as soon as its last gradient is computed (the session reports
// each fetch as it is produced) while the backward pass goes on, and the ring is driven forward
// each time another gradient arrives. With compression the gradients are packed into the bucket
// and its compressed message allgathered. The first step learns the order and
// reduces after the backward pass; every rank learns the same order (same graph, same plan), so
// the ranks start the same reductions in the same order. Without compression, each rank updates
// only its share of the weights (update_in_shards), and a dense layer's weight gradient can
// cross as the layer's input and output gradient instead (exchange_as_factors).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "comm/ring_average.h"
#include "core/tensor.h"
#include "graph/variable_store.h"
#include "train/grad_compression.h"

namespace sf {

// The factor --lr-scaling applies to the learning rate for `world` ranks: linear (world),
// sqrt (sqrt(world)) or none (1). Throws a one-line error for another name.
double lr_scale_factor(const std::string& scaling, int world);
void check_lr_scaling(const std::string& scaling);

struct CommStats {
  double comm_seconds = 0.0;     // wall time with at least one reduction in flight
  double exposed_seconds = 0.0;  // of which the training thread waited (not overlapped)
  int64_t bytes = 0;             // gradient bytes each rank sent (compressed, if it is)
  int64_t steps = 0;             // steps those bytes were sent in
  double overlap_fraction() const {
    return comm_seconds > 0.0 ? std::max(0.0, 1.0 - exposed_seconds / comm_seconds) : 0.0;
  }
};

class GradientBuckets {
 public:
  // One gradient per parameter, f32, of these shapes. With compression, each bucket's message
  // (grad_compression.h) is allgathered instead of the floats being allreduced.
  // With `second_moment_beta2` (Adam's beta2; for one-bit compression, see
  // OptimizerConfig::second_moment_from_outside) each rank also keeps the moving average of its
  // own squared gradients, and the ranks average it at the first step of this object, then
  // whenever the steps it has seen reach a power of two up to kSecondMomentPeriod and every
  // kSecondMomentPeriod steps after: Adam's second moment moves over ~1/(1 - beta2) steps (1,000
  // by default), and a share every 1,024 steps adds 3% to one-bit's bytes.
  GradientBuckets(Communicator& comm, std::vector<Shape> shapes, double bucket_mb,
                  GradCompression compression = {},
                  std::optional<double> second_moment_beta2 = std::nullopt);
  static constexpr int64_t kSecondMomentPeriod = 1024;

  // A step's gradient `index` has been computed (Session's FetchReady).
  void ready(size_t index, const Tensor& gradient);
  // Completes the step: reduces what has not been reduced yet, waits for every bucket and
  // returns the averaged gradients (views into the buckets, valid until the next step).
  const std::vector<Tensor>& finish(const std::vector<Tensor>& gradients, int64_t step);

  int64_t buckets() const { return static_cast<int64_t>(buckets_.size()); }

  // Before the first step, without compression: from then on finish() averages only each rank's
  // share of every bucket (its ring's reduce-scatter: owned_parts()), each rank updates only
  // those parts of the parameters, and share_parts() passes the updated values on (the ring's
  // allgather), as the first stage of ZeRO does. The same bytes go over the wire as for whole
  // averages, but the update's memory traffic (Adam reads 4 and writes 3 floats per weight) is
  // split between the ranks instead of repeated by each of them, at the same moment: on
  // Deep-MNIST with 2 ranks here, Adam took 3.4 ms a step against 2.1 ms in a lone process.
  void update_in_shards();
  bool updates_in_shards() const { return sharded_; }
  // With update_in_shards, before the first step: parameter `index` is a dense layer's weights
  // [K, N], whose gradient is x^T * dy for its input x [B, K] and output gradient dy [B, N];
  // its gradient then arrives as those two factors (factor_ready), not through ready() or
  // finish(). The ranks exchange the factors, B(K + N) floats each, instead of reducing K * N,
  // and each rank forms its share of the average from the whole step's factors with the FLOPs
  // its own gradient would have taken ("sufficient factors", as in Poseidon). For Deep-MNIST's
  // fc1 between 2 ranks: 0.5 MB sent instead of 6.4 MB, and no sums.
  void exchange_as_factors(size_t index);
  // This step's factor `which` (0: x, 1: dy) of a parameter exchange_as_factors named, once
  // computed; it must stay unchanged until finish() returns.
  void factor_ready(size_t index, int which, const Tensor& factor);
  // With update_in_shards, after finish(): per parameter, the elements [first, second) whose
  // averages this rank holds (the rest of its averaged gradient are partial sums). Every rank
  // owns the same parts every step.
  const std::vector<std::pair<int64_t, int64_t>>& owned_parts() const { return owned_parts_; }
  // With update_in_shards, after finish(): every rank's owned parts of `tensors` (one f32 tensor
  // per parameter, of its shape: the parameters, or an optimizer slot) to every rank, in place.
  // `what` names them in errors; `per_step` counts the transfer in take_stats().
  void share_parts(const std::vector<Tensor>& tensors, const std::string& what, bool per_step);
  // With compression: each parameter's error-feedback residual (what this rank's messages have
  // not carried yet), for checkpoints; empty without compression.
  std::vector<Tensor> residuals() const;
  // Restores residuals() of a checkpoint (one per parameter, of its shape).
  void restore_residuals(std::vector<Tensor> residuals);
  // Statistics since the last call.
  CommStats take_stats();

  // With second_moment_beta2: the ranks' average second moments (one per parameter), when the
  // last finish() shared them; nullptr otherwise. Valid until the next finish().
  const std::vector<Tensor>* shared_second_moments() const {
    return shared_now_ ? &second_moment_views_ : nullptr;
  }
  // The steps those averages span (their bias correction).
  int64_t second_moment_steps() const { return second_moment_steps_; }
  // This rank's own moving averages (one per parameter) for checkpoints; empty without them.
  std::vector<Tensor> own_second_moments() const;
  // Starts this rank's averages from `v` (one per parameter, of its shape) over `steps` steps,
  // before the first step: own_second_moments() of a checkpoint, which go on as if never
  // stopped, or (`share_first`) another start, such as the second moment a resumed optimizer
  // holds, shared at the first step.
  void restore_second_moments(std::vector<Tensor> v, int64_t steps, bool share_first);

 private:
  using Clock = std::chrono::steady_clock;
  struct Bucket {
    Tensor data;                  // f32 [elements]: the averaged gradients
    std::vector<size_t> members;  // gradient indices
    size_t pending = 0;           // members not packed yet this step
    std::vector<Tensor> sources;  // uncompressed: this step's gradients, by member
    std::unique_ptr<RingAverage> ring;  // uncompressed
    Tensor residual;  // compression: what earlier messages left out
    Tensor second_moment;  // this rank's moving average of its squared gradients
    Tensor message;   // compression: this rank's message (u8)
    Tensor gathered;  // compression: every rank's message, by rank (u8)
    CommRequest request;
    bool launched = false;
    // exchange_as_factors: the bucket's one parameter, from every rank's factors, by rank.
    bool factored = false;
    Tensor gathered_x;   // f32 [ranks * B, K]
    Tensor gathered_dy;  // f32 [ranks * B, N]
    std::vector<CommRequest> factor_requests;
  };
  void build();
  void pack(size_t index, const Tensor& gradient);
  void launch(Bucket& bucket);
  void progress();
  bool done(Bucket& bucket);  // drives the bucket's reduction; true once it is complete
  void launch_factors(Bucket& bucket, size_t index);
  // A factored bucket's share of the average gradient, from the gathered factors.
  void average_from_factors(Bucket& bucket);
  void note_done();
  void share_second_moments();
  // Each parameter's part of a per-bucket tensor, copied (zeros before the first step).
  std::vector<Tensor> by_parameter(Tensor Bucket::*field) const;
  // One f32 tensor per parameter, of its shape; `what` names them.
  void check_per_parameter(const std::vector<Tensor>& tensors, const std::string& what) const;

  Communicator& comm_;
  std::vector<Shape> shapes_;
  double bucket_bytes_;
  GradCompression compression_;
  std::vector<size_t> order_;  // the backward pass's order of the gradients (first step)
  std::vector<bool> seen_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<size_t> slot_in_bucket_;  // index of gradient i in its bucket's members
  std::vector<int64_t> offsets_;           // of each gradient in its bucket, in floats
  std::vector<Tensor> restored_residuals_;  // until the buckets are built
  std::vector<Tensor> averaged_;
  bool sharded_ = false;
  std::vector<std::pair<int64_t, int64_t>> owned_parts_;
  std::vector<bool> packed_;
  std::vector<bool> factored_;                 // by parameter: exchange_as_factors
  std::vector<std::array<Tensor, 2>> factors_;  // by parameter: this step's x and dy
  size_t next_to_finish_ = 0;
  int64_t step_ = 0;
  bool in_flight_ = false;
  Clock::time_point first_launch_;
  Clock::time_point last_done_;
  CommStats stats_;
  std::optional<float> second_moment_beta2_;
  int64_t second_moment_steps_ = 0;
  bool share_first_ = true;
  bool shared_now_ = false;
  std::vector<Tensor> restored_second_moments_;  // until the buckets are built
  std::unique_ptr<RingAverage> second_moment_ring_;
  Tensor shared_second_moment_;  // f32 [all parameters' elements], in bucket order
  std::vector<Tensor> second_moment_views_;
};

// Checkpoint names of compression residuals: "compression/rank<R>/<parameter>".
inline constexpr const char* kResidualPrefix = "compression/";
// Every rank's residuals (GradientBuckets::residuals) and own second moments, by checkpoint name,
// on rank 0 (empty on the others); every rank calls it at the same point.
std::map<std::string, Tensor> gather_residuals(Communicator& comm, const GradientBuckets& buckets,
                                               const std::vector<std::string>& names);
// Rank `rank`'s residuals among a checkpoint's tensors; a missing one or one of another shape is
// an error naming it.
std::vector<Tensor> residuals_of_rank(const std::map<std::string, Tensor>& tensors, int rank,
                                      const std::vector<std::string>& names,
                                      const std::vector<Shape>& shapes);
// Rank `rank`'s own second moments (GradientBuckets::own_second_moments), checkpointed as
// "compression/rank<R>/second_moment/<parameter>"; empty when the checkpoint has none (another
// scheme or optimizer), an error naming one that is missing or of another shape otherwise.
std::vector<Tensor> own_second_moments_of_rank(const std::map<std::string, Tensor>& tensors,
                                               int rank, const std::vector<std::string>& names,
                                               const std::vector<Shape>& shapes);

// Copies rank 0's value of every variable to the other ranks (at start and resume, so the
// replicas begin identical whatever each rank read or initialized).
void broadcast_variables(Communicator& comm, VariableStore& variables);
// Averages these variables over the `contributors` ranks that call it with `contribute` (the
// others' values count as nothing and receive the average): BatchNorm statistics at an epoch's
// end, which async's parameter servers never move.
void average_variables(Communicator& comm, VariableStore& variables,
                       const std::vector<std::string>& names, bool contribute, int contributors);
// Stops the job when the replicas' parameters differ: compares a checksum of `names`' bytes
// across ranks and throws a one-line error naming the step and the ranks that drifted.
void check_replicas(Communicator& comm, const VariableStore& variables,
                    const std::vector<std::string>& names, int64_t step);

}  // namespace sf
