// The edges of a partitioned graph that cross the processes of an MPI job.
//
// Every process of the job places and partitions the same graph, so each cross-process edge
// gets the same MPI tag everywhere (its index in the partition). The communicator is
// funneled (every MPI call on the thread that made it), so the device threads only queue what
// they computed (`post`); the thread that called Session::run drives MPI in `exchange`: it
// posts this step's receives up front, sends what the devices queue the moment they queue it
// (non-blocking, no copy: a computed tensor stays valid until the step ends), and hands each
// arrival to the device waiting for it. A tensor of another dtype or shape, or a peer that
// sends nothing within the communicator's timeout, is an error naming the edge.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/process_exchange.h"
#include "core/tensor.h"

namespace sf {

class ProcessLinks final : public ProcessExchange {
 public:
  explicit ProcessLinks(Communicator& comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  int max_tag() const override { return comm_.max_tag(); }
  void post(const std::vector<Outgoing>& to, const std::string& key,
            const Tensor& value) override;
  void wake() override;
  void exchange(const std::vector<Incoming>& incoming,
                const std::function<void(size_t, Tensor)>& arrived,
                const std::function<bool()>& finished,
                const std::function<bool()>& stopped) override;

 private:
  struct Posted {
    std::vector<Outgoing> to;
    std::string key;
    Tensor value;
  };
  Communicator& comm_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Posted> outbox_;
  bool woken_ = false;
};

}  // namespace sf
