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
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"

namespace sf {

// What the runtime sees (runtime/partitioned_run.h): the engine and the C API link no MPI, so
// they reach the job through this interface only.
class ProcessExchange {
 public:
  struct Incoming {
    std::string key;  // the edge's rendezvous key (or a fetch's), for errors
    int peer = 0;
    int tag = 0;
    DType dtype = DType::f32;
    Shape shape;
    std::string from_device;
  };
  struct Outgoing {
    int peer = 0;
    int tag = 0;
  };

  virtual ~ProcessExchange() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int max_tag() const = 0;
  // Device threads: `key`'s value is computed; it leaves for every peer in `to`.
  virtual void post(const std::vector<Outgoing>& to, const std::string& key,
                    const Tensor& value) = 0;
  // Device threads: a device finished (or failed); wakes `exchange` to look.
  virtual void wake() = 0;
  // The calling thread, once per step: receives `incoming` (each handed to `arrived` with its
  // index) and sends whatever is posted, until `finished()` and nothing is in flight, or
  // `stopped()` (a device of this process failed). Throws sf::Error naming the edge.
  virtual void exchange(const std::vector<Incoming>& incoming,
                        const std::function<void(size_t, Tensor)>& arrived,
                        const std::function<bool()>& finished,
                        const std::function<bool()>& stopped) = 0;
};

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
