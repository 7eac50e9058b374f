// The interface through which a partitioned run reaches the other processes of an MPI job
// (comm/process_links.h implements it over the Communicator). The engine and the C API link no
// MPI, and see only this: they must not even see the implementation, whose inline members the
// compiler may emit wherever a call could be devirtualized.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace sf {

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

}  // namespace sf
