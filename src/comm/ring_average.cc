#include "comm/ring_average.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace sf {

namespace {

int wrap(int chunk, int ranks) { return ((chunk % ranks) + ranks) % ranks; }

// Elements [begin, begin + count) of `t`, flattened, over the same memory.
Tensor elements(const Tensor& t, int64_t begin, int64_t count) {
  return t.reshaped({t.numel()}).rows(begin, begin + count);
}

}  // namespace

RingAverage::RingAverage(Communicator& comm, int tag) : comm_(comm), tag_(tag) {}

int64_t RingAverage::chunk_begin(int chunk) const {
  return piece_begin_.back() * chunk / ranks_;
}

void RingAverage::start(std::vector<Tensor> pieces, Tensor out, std::string what) {
  const int steps = 2 * (comm_.size() - 1);
  start_steps(std::move(pieces), std::move(out), std::move(what), 0, steps);
}

void RingAverage::start_reduce_scatter(std::vector<Tensor> pieces, Tensor out, std::string what) {
  start_steps(std::move(pieces), std::move(out), std::move(what), 0, comm_.size() - 1);
}

void RingAverage::start_allgather(std::vector<Tensor> pieces, std::string what) {
  const int ranks = comm_.size();
  start_steps(std::move(pieces), Tensor(), std::move(what), ranks - 1, 2 * (ranks - 1));
}

std::pair<int64_t, int64_t> RingAverage::owned_elements() const {
  return share_of(piece_begin_.back(), rank_, ranks_);
}

std::pair<int64_t, int64_t> RingAverage::share_of(int64_t elements, int rank, int ranks) {
  // The reduce-scatter's last step leaves chunk rank + 1 complete on this rank.
  const int chunk = (rank + 1) % ranks;
  return {elements * chunk / ranks, elements * (chunk + 1) / ranks};
}

void RingAverage::start_steps(std::vector<Tensor> pieces, Tensor out, std::string what,
                              int first_step, int last_step) {
  SF_CHECK(requests_.empty() && step_ == last_step_, "a ring started while one is running");
  ranks_ = comm_.size();
  rank_ = comm_.rank();
  pieces_ = std::move(pieces);
  piece_begin_.assign(1, 0);
  for (const Tensor& p : pieces_) {
    SF_CHECK(p.dtype() == DType::f32, "ring average of a {} piece", dtype_name(p.dtype()));
    piece_begin_.push_back(piece_begin_.back() + p.numel());
  }
  gather_into_pieces_ = !out.defined();
  SF_CHECK(gather_into_pieces_ || (out.dtype() == DType::f32 && out.numel() == piece_begin_.back()),
           "ring average of {} elements into a tensor of {}", piece_begin_.back(), out.numel());
  out_ = std::move(out);
  what_ = std::move(what);
  bytes_sent_ = 0;
  step_ = first_step;
  last_step_ = last_step;
  if (ranks_ == 1) {
    if (!gather_into_pieces_)
      for (size_t p = 0; p < pieces_.size(); ++p)
        if (pieces_[p].bytes() > 0)
          std::memcpy(out_.data<float>() + piece_begin_[p], pieces_[p].raw(), pieces_[p].bytes());
    return;
  }
  int64_t largest_chunk = 0;
  for (int c = 0; c < ranks_; ++c)
    largest_chunk = std::max(largest_chunk, chunk_begin(c + 1) - chunk_begin(c));
  if (step_ < ranks_ - 1 && received_.numel() < largest_chunk)
    received_ = Tensor(DType::f32, {largest_chunk});
  post_step();
}

void RingAverage::send_pieces(int64_t begin, int64_t end) {
  const int right = (rank_ + 1) % ranks_;
  // Segments end at piece boundaries on both sides of every transfer, so the receiver's
  // messages match the sender's one for one.
  for (size_t p = 0; p < pieces_.size(); ++p) {
    const int64_t lo = std::max(begin, piece_begin_[p]), hi = std::min(end, piece_begin_[p + 1]);
    if (lo >= hi) continue;
    const Tensor segment = step_ == 0 || gather_into_pieces_
                               ? elements(pieces_[p], lo - piece_begin_[p], hi - lo)
                               : elements(out_, lo, hi - lo);
    requests_.push_back(comm_.isend(segment, right, tag_, what_));
    bytes_sent_ += static_cast<int64_t>(segment.bytes());
  }
}

void RingAverage::receive_pieces(int64_t begin, int64_t end) {
  const int left = (rank_ + ranks_ - 1) % ranks_;
  const bool reducing = step_ < ranks_ - 1;
  for (size_t p = 0; p < pieces_.size(); ++p) {
    const int64_t lo = std::max(begin, piece_begin_[p]), hi = std::min(end, piece_begin_[p + 1]);
    if (lo >= hi) continue;
    Tensor segment = reducing             ? elements(received_, lo - begin, hi - lo)
                     : gather_into_pieces_ ? elements(pieces_[p], lo - piece_begin_[p], hi - lo)
                                           : elements(out_, lo, hi - lo);
    requests_.push_back(comm_.irecv(segment, left, tag_, what_));
  }
}

void RingAverage::post_step() {
  // Reduce-scatter step s sends chunk r - s (the pieces themselves at s = 0, then the partial
  // sums made at the step before) and receives chunk r - s - 1; after N - 1 steps rank r holds
  // the whole sum of chunk r + 1. Allgather step s passes on chunk r + 1 - s and receives r - s.
  const bool reducing = step_ < ranks_ - 1;
  const int s = reducing ? step_ : step_ - (ranks_ - 1);
  const int send_chunk = wrap(reducing ? rank_ - s : rank_ + 1 - s, ranks_);
  received_chunk_ = wrap(rank_ - s - (reducing ? 1 : 0), ranks_);
  receive_pieces(chunk_begin(received_chunk_), chunk_begin(received_chunk_ + 1));
  send_pieces(chunk_begin(send_chunk), chunk_begin(send_chunk + 1));
}

void RingAverage::reduce_received(int chunk, bool last) {
  const int64_t begin = chunk_begin(chunk), end = chunk_begin(chunk + 1);
  const float scale = last ? 1.0f / static_cast<float>(ranks_) : 1.0f;
  const float* received = received_.data<float>();
  float* out = out_.data<float>();
  for (size_t p = 0; p < pieces_.size(); ++p) {
    const int64_t lo = std::max(begin, piece_begin_[p]), hi = std::min(end, piece_begin_[p + 1]);
    if (lo >= hi) continue;
    const float* mine = pieces_[p].data<float>() + (lo - piece_begin_[p]);
    const float* theirs = received + (lo - begin);
    float* sum = out + lo;
    for (int64_t k = 0; k < hi - lo; ++k) sum[k] = (mine[k] + theirs[k]) * scale;
  }
}

bool RingAverage::progress() {
  while (step_ < last_step_) {
    for (CommRequest& r : requests_)
      if (!comm_.test(r)) return false;
    requests_.clear();
    if (step_ < ranks_ - 1) reduce_received(received_chunk_, step_ == ranks_ - 2);
    if (++step_ < last_step_) post_step();
  }
  return true;
}

void RingAverage::wait() {
  while (!progress())
    for (CommRequest& r : requests_)
      if (r.active()) {
        comm_.wait(r);
        break;
      }
}

}  // namespace sf
