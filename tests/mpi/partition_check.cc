// One rank of an `mpirun -np 2` job that runs a graph placed on both processes' devices
// (/job:worker/task:0 and task:1), for tests/placement_test.cc. Prints "rank R ok" when its
// checks pass; an error ends the job the way `slimflow train` does (Communicator::abort).
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "comm/communicator.h"
#include "comm/process_links.h"
#include "core/error.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "runtime/session.h"

namespace {

using sf::DType;
using sf::Graph;
using sf::Output;
using sf::Shape;
using sf::Tensor;

constexpr char kTask0[] = "/job:worker/task:0/cpu:0";
constexpr char kTask1[] = "/job:worker/task:1/cpu:0";

Tensor patterned(DType dtype, const Shape& shape) {
  Tensor t(dtype, shape);
  for (size_t b = 0; b < t.bytes(); ++b) static_cast<uint8_t*>(t.raw())[b] = static_cast<uint8_t>(b * 7 + 3);
  return t;
}

// x on task 0 goes to task 1 and back: Identity on each side, every dtype, an empty tensor and
// a 4 MB one; each rank checks what it fetched from the other.
void round_trips(sf::Communicator& comm, sf::ProcessLinks& links) {
  for (DType dtype : {DType::f32, DType::i32, DType::i64, DType::u8, DType::i8})
    for (const Shape& shape : {Shape{0, 3}, Shape{3, 5}, Shape{1 << 20}}) {
      Graph g;
      Output x = sf::ops::placeholder(g, dtype, shape, "x");
      Output there = g.add(sf::op_names::kIdentity, {x}, {}, "there");
      Output back = g.add(sf::op_names::kIdentity, {there}, {}, "back");
      for (int id = 0; id < g.num_nodes(); ++id) g.mutable_node(id).device = kTask0;
      g.mutable_node(there.node).device = kTask1;
      sf::Session session(g, sf::SessionOptions{.processes = &links});
      const Tensor in = patterned(dtype, shape);
      for (int step = 0; step < 2; ++step) {
        const std::vector<Tensor> out = session.run({{x, in}}, {there, back});
        for (const Tensor& t : out)
          if (t.dtype() != dtype || t.shape() != shape ||
              (in.bytes() > 0 && std::memcmp(t.raw(), in.raw(), in.bytes()) != 0))
            sf::fail("{}{}: round trip changed the tensor", sf::dtype_name(dtype),
                     sf::shape_str(shape));
      }
    }
  std::printf("rank %d ok\n", comm.rank());
}

// Each rank feeds x with its own shape, so task 1 expects another shape than task 0 sends.
void mismatch(sf::ProcessLinks& links, int rank) {
  const Shape shape = rank == 0 ? Shape{2, 3} : Shape{3, 2};
  Graph g;
  Output x = sf::ops::placeholder(g, DType::f32, shape, "x");
  Output a = sf::ops::relu(g, x, "a");
  Output b = sf::ops::tanh(g, a, "b");
  g.mutable_node(x.node).device = g.mutable_node(a.node).device = kTask0;
  g.mutable_node(b.node).device = kTask1;
  sf::Session session(g, sf::SessionOptions{.processes = &links});
  session.run({{x, Tensor(DType::f32, shape)}}, {b});
}

// Task 1 stops (killed, or hung) before its part: task 0 waits for a's way back.
void lost_task(sf::ProcessLinks& links, int rank, bool killed) {
  Graph g;
  Output x = sf::ops::placeholder(g, DType::f32, {4}, "x");
  Output a = sf::ops::relu(g, x, "a");
  Output b = sf::ops::tanh(g, a, "b");
  for (int id = 0; id < g.num_nodes(); ++id) g.mutable_node(id).device = kTask0;
  g.mutable_node(a.node).device = kTask1;
  sf::Session session(g, sf::SessionOptions{.processes = &links});
  if (rank == 1) {
    if (killed) raise(SIGKILL);
    std::this_thread::sleep_for(std::chrono::seconds(60));
  }
  session.run({{x, Tensor(DType::f32, {4})}}, {b});
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  const double timeout = argc > 2 ? std::stod(argv[2]) : 30.0;
  std::unique_ptr<sf::Communicator> comm;
  try {
    comm = std::make_unique<sf::Communicator>(sf::CommOptions{.timeout_seconds = timeout});
    sf::ProcessLinks links(*comm);
    if (scenario == "round-trips") {
      round_trips(*comm, links);
    } else if (scenario == "mismatch") {
      mismatch(links, comm->rank());
    } else if (scenario == "killed-task" || scenario == "hung-task") {
      lost_task(links, comm->rank(), scenario == "killed-task");
    } else {
      sf::fail("unknown scenario '{}'", scenario);
    }
    comm->barrier("end");
  } catch (const std::exception& e) {
    if (comm) comm->abort(e.what());
    std::fprintf(stderr, "slimflow: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
