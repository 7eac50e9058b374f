// The average over the ranks of a float vector that lies in pieces (a bucket of gradients, each
// its own tensor), without packing the pieces into one buffer first: a ring reduce-scatter, then
// a ring allgather (the bandwidth-optimal allreduce OpenMPI's MPI_Allreduce also uses for large
// messages), on the communicator's point-to-point messages. Each rank sends and receives
// 2(N-1)/N of the vector. A chunk's sum is formed on one rank, scaled to the average there and
// copied as is to the others, so every rank ends with the same bits.
//
// Why not MPI_Iallreduce: OpenMPI's non-blocking collectives (libnbc) took 5.3 ms for
// Deep-MNIST's 13.1 MB of gradients between 2 ranks here, against 2.1-2.4 ms for the blocking
// MPI_Allreduce and for this ring; and they reduce one buffer, which costs a copy of every
// gradient into it and a pass to divide the sum by N.
//
// Non-blocking: start() posts the first messages and progress() advances the ring whenever it is
// called (data parallelism calls it each time another gradient is computed). The two halves
// also run apart (start_reduce_scatter, then start_allgather over other pieces), so that each
// rank can update its own share of the weights in between and pass those on.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"

namespace sf {

class RingAverage {
 public:
  // Messages of this ring use `tag` (one per ring in flight at once).
  RingAverage(Communicator& comm, int tag);

  // `pieces` (f32, any shapes), laid end to end, are this rank's vector; `out` (f32, as many
  // elements) receives the average over the ranks. Both must stay alive and unchanged until the
  // ring is done. Every rank starts its rings in the same order with the same piece sizes.
  // `what` names the operation in errors ("allreduce of gradients (step 12)").
  void start(std::vector<Tensor> pieces, Tensor out, std::string what);
  // The ring's first half only: once done, this rank's share of `out` (owned_elements()) holds
  // the average; the rest of `out` holds partial sums.
  void start_reduce_scatter(std::vector<Tensor> pieces, Tensor out, std::string what);
  // The ring's second half, in place: `pieces` (laid end to end as in the reduce-scatter before,
  // the same element count) hold this rank's share; once done, every rank's share, on every rank.
  void start_allgather(std::vector<Tensor> pieces, std::string what);
  // [begin, end) of the vector: this rank's share, the chunk whose average its reduce-scatter
  // forms (the whole vector on one rank). Valid after a start.
  std::pair<int64_t, int64_t> owned_elements() const;
  // The share of `rank` of `ranks` in a vector of `elements`, as owned_elements() gives it.
  static std::pair<int64_t, int64_t> share_of(int64_t elements, int rank, int ranks);
  // Advances without blocking; true once the average is in `out` (and when nothing was started).
  bool progress();
  // Blocks until done; a peer that stops answering is an error after the communicator's timeout.
  void wait();
  // Bytes this rank sent in the last ring.
  int64_t bytes_sent() const { return bytes_sent_; }

 private:
  int64_t chunk_begin(int chunk) const;
  // Takes the pieces, checks them and posts the first step; `out` may be undefined (allgather).
  void start_steps(std::vector<Tensor> pieces, Tensor out, std::string what, int first_step,
                   int last_step);
  // Posts the messages of step `step_` (reduce-scatter steps first, then allgather steps).
  void post_step();
  // Adds this rank's pieces to the partial sums received in a reduce-scatter step.
  void reduce_received(int chunk, bool last);
  // Sends elements [begin, end) of the pieces, one message per piece it touches.
  void send_pieces(int64_t begin, int64_t end);
  void receive_pieces(int64_t begin, int64_t end);

  Communicator& comm_;
  int tag_;
  int ranks_ = 1;
  int rank_ = 0;
  std::vector<Tensor> pieces_;
  std::vector<int64_t> piece_begin_;  // of each piece in the vector, and the total at the end
  Tensor out_;
  Tensor received_;  // a reduce-scatter step's partial sums from the left neighbour
  std::string what_;
  int step_ = 0;       // 0 .. 2(N-1): N-1 reduce-scatter steps, then N-1 allgather steps
  int last_step_ = 0;  // done when step_ reaches it
  bool gather_into_pieces_ = false;  // start_allgather: the allgather reads and writes pieces_
  int received_chunk_ = 0;
  std::vector<CommRequest> requests_;
  int64_t bytes_sent_ = 0;
};

}  // namespace sf
