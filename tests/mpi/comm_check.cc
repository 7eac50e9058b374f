// Runs one communicator scenario on every rank of an mpirun job; tests/comm_test.cc starts it
// and reads what it prints. Prints "rank R ok" when the scenario held on that rank, and
// "rank R: <error>" (exit 1) when it did not.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/ring_average.h"
#include "core/error.h"
#include "graph/variable_store.h"
#include "train/data_parallel.h"

namespace {

using sf::Communicator;
using sf::DType;
using sf::Tensor;

void expect(bool condition, const std::string& what) {
  if (!condition) sf::fail("check failed: {}", what);
}

Tensor filled(DType dtype, sf::Shape shape, int seed) {
  Tensor t(dtype, shape);
  auto* bytes = static_cast<unsigned char*>(t.numel() ? t.raw() : nullptr);
  for (size_t i = 0; i < t.bytes(); ++i) bytes[i] = static_cast<unsigned char>((i * 31 + seed) & 0x7f);
  return t;
}

void collectives(Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  Tensor a(DType::f32, {5});
  for (int i = 0; i < 5; ++i) a.data<float>()[i] = static_cast<float>(r + i);
  comm.allreduce(a, sf::ReduceOp::sum, "floats");
  for (int i = 0; i < 5; ++i)
    expect(a.data<float>()[i] == static_cast<float>(n * i + n * (n - 1) / 2), "allreduce sum");
  Tensor m(DType::i64, {1});
  m.data<int64_t>()[0] = 10 * r;
  comm.allreduce(m, sf::ReduceOp::max, "max");
  expect(m.data<int64_t>()[0] == 10 * (n - 1), "allreduce max");
  // Two non-blocking reductions in flight at once, completed out of order.
  Tensor x(DType::f32, {1 << 16}), y(DType::i32, {3});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 1.0f;
  for (int i = 0; i < 3; ++i) y.data<int32_t>()[i] = r;
  sf::CommRequest rx = comm.iallreduce(x, sf::ReduceOp::sum, "x");
  sf::CommRequest ry = comm.iallreduce(y, sf::ReduceOp::min, "y");
  comm.wait(ry);
  comm.wait(rx);
  expect(x.data<float>()[x.numel() - 1] == static_cast<float>(n), "iallreduce sum");
  expect(y.data<int32_t>()[2] == 0, "iallreduce min");
  Tensor b = r == 1 ? filled(DType::u8, {7, 3}, 5) : Tensor(DType::u8, {7, 3});
  comm.broadcast(b, 1, "bytes");
  expect(std::memcmp(b.raw(), filled(DType::u8, {7, 3}, 5).raw(), b.bytes()) == 0, "broadcast");
  auto gathered = comm.allgather(static_cast<uint64_t>(100 + r), "ranks");
  for (int i = 0; i < n; ++i) expect(gathered[static_cast<size_t>(i)] == 100u + i, "allgather");
  comm.barrier("end");
}

// Rank 0 sends every dtype, an empty tensor and a large one; rank 1 receives them, posting its
// receives in the opposite order (matching is by tag).
void point_to_point(Communicator& comm) {
  const DType dtypes[] = {DType::f32, DType::i32, DType::i64, DType::u8, DType::i8};
  std::vector<Tensor> tensors;
  int seed = 0;
  for (DType d : dtypes) tensors.push_back(filled(d, {3, 4}, ++seed));
  tensors.push_back(filled(DType::f32, {0, 4}, ++seed));
  tensors.push_back(filled(DType::f32, {4 << 20}, ++seed));  // 16 MB
  std::vector<sf::CommRequest> requests;
  if (comm.rank() == 0) {
    for (size_t i = 0; i < tensors.size(); ++i)
      requests.push_back(comm.isend(tensors[i], 1, static_cast<int>(i)));
    comm.wait_all(requests);
  } else if (comm.rank() == 1) {
    std::vector<Tensor> received;
    for (const Tensor& t : tensors) received.emplace_back(t.dtype(), t.shape());
    for (size_t i = tensors.size(); i-- > 0;)
      requests.push_back(comm.irecv(received[i], 0, static_cast<int>(i)));
    comm.wait_all(requests);
    for (size_t i = 0; i < tensors.size(); ++i)
      expect(tensors[i].bytes() == 0 ||
                 std::memcmp(tensors[i].raw(), received[i].raw(), tensors[i].bytes()) == 0,
             "received bytes");
  }
  comm.barrier("end");
}

// Rank 1 expects another shape (or dtype) than rank 0 sends.
void mismatch(Communicator& comm, DType sent, sf::Shape sent_shape) {
  if (comm.rank() == 0) {
    Tensor t = filled(sent, sent_shape, 1);
    sf::CommRequest request = comm.isend(t, 1, 7);
    comm.wait(request);
  } else if (comm.rank() == 1) {
    Tensor t(DType::f32, {3, 2});
    sf::CommRequest request = comm.irecv(t, 0, 7);
    comm.wait(request);
  }
  comm.barrier("end");
}

// Pieces of odd sizes (one empty, some smaller than a chunk, one spanning chunks), filled with
// small integers so that every sum is exact: each rank must hold the average bit for bit.
void ring_average(Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  const std::vector<int64_t> sizes = {3, 0, 7, 1, 4099, 13};
  auto value = [](int rank, int64_t k) { return static_cast<float>((rank * 7 + k) % 11); };
  // Two rings in flight at once (each bucket has its own tag), driven in turn.
  std::vector<std::vector<Tensor>> pieces(2);
  std::vector<Tensor> outs;
  std::vector<std::unique_ptr<sf::RingAverage>> rings;
  int64_t total = 0;
  for (int64_t size : sizes) total += size;
  for (int ring = 0; ring < 2; ++ring) {
    int64_t k = 0;
    for (int64_t size : sizes) {
      Tensor p(DType::f32, {size});
      for (int64_t i = 0; i < size; ++i, ++k) p.data<float>()[i] = value(r + ring, k);
      pieces[static_cast<size_t>(ring)].push_back(p);
    }
    outs.emplace_back(DType::f32, sf::Shape{total});
    rings.push_back(std::make_unique<sf::RingAverage>(comm, 1000 + ring));
    rings.back()->start(pieces[static_cast<size_t>(ring)], outs.back(), "test ring");
  }
  for (bool done = false; !done;) {
    const bool first = rings[0]->progress();
    const bool second = rings[1]->progress();
    done = first && second;
  }
  rings[0]->wait();
  rings[1]->wait();
  for (int ring = 0; ring < 2; ++ring)
    for (int64_t k = 0; k < total; ++k) {
      float sum = 0.0f;
      for (int q = 0; q < n; ++q) sum += value(q + ring, k);
      const float average = sum * (1.0f / static_cast<float>(n));
      expect(outs[static_cast<size_t>(ring)].data<float>()[k] == average,
             "ring average of element " + std::to_string(k));
    }
  expect(n != 2 || rings[0]->bytes_sent() == static_cast<int64_t>(sizeof(float)) * total,
         "a ring of 2 ranks sends the vector once");
  // Again on the same rings: they are reusable from step to step.
  for (int ring = 0; ring < 2; ++ring) {
    rings[static_cast<size_t>(ring)]->start(pieces[static_cast<size_t>(ring)],
                                            outs[static_cast<size_t>(ring)], "test ring");
    rings[static_cast<size_t>(ring)]->wait();
  }
  expect(outs[1].data<float>()[total - 1] ==
             [&] {
               float sum = 0.0f;
               for (int q = 0; q < n; ++q) sum += value(q + 1, total - 1);
               return sum * (1.0f / static_cast<float>(n));
             }(),
         "second round");
  // The two halves apart, as sharded updates run them: the reduce-scatter leaves each rank the
  // average of its own share, and the allgather, in place over other pieces that hold only that
  // share (-1 elsewhere), passes every share to every rank.
  sf::RingAverage& split = *rings[0];
  split.start_reduce_scatter(pieces[0], outs[0], "test reduce-scatter");
  split.wait();
  const auto [own_begin, own_end] = split.owned_elements();
  expect(0 <= own_begin && own_begin <= own_end && own_end <= total, "the share is in the vector");
  std::vector<Tensor> targets;
  for (int64_t size : sizes) targets.emplace_back(DType::f32, sf::Shape{size});
  for (int64_t k = 0, p = 0; p < static_cast<int64_t>(sizes.size()); ++p)
    for (int64_t i = 0; i < sizes[static_cast<size_t>(p)]; ++i, ++k)
      targets[static_cast<size_t>(p)].data<float>()[i] =
          k >= own_begin && k < own_end ? outs[0].data<float>()[k] : -1.0f;
  split.start_allgather(targets, "test allgather");
  split.wait();
  for (int64_t k = 0, p = 0; p < static_cast<int64_t>(sizes.size()); ++p)
    for (int64_t i = 0; i < sizes[static_cast<size_t>(p)]; ++i, ++k) {
      float sum = 0.0f;
      for (int q = 0; q < n; ++q) sum += value(q, k);
      const float average = sum * (1.0f / static_cast<float>(n));
      expect(targets[static_cast<size_t>(p)].data<float>()[i] == average,
             "allgathered share, element " + std::to_string(k));
    }
  comm.barrier("end");
}

// One-bit buckets that keep Adam's second moment: each rank's moving average of its own squared
// gradients, averaged over the ranks at steps 1, 2, 4 and 8 of 10 (the same bits on every rank),
// and a restored average that goes on from where it was.
void second_moments(Communicator& comm) {
  const int n = comm.size();
  const std::vector<sf::Shape> shapes = {{3}, {40, 25}, {13}};
  const float b2 = 0.9f;
  auto gradient = [](int rank, int step, size_t p, int64_t k) {
    return 0.01f * static_cast<float>((rank * 5 + step * 3 + static_cast<int>(p) + k) % 9) - 0.04f;
  };
  // Every rank's average as that rank computes it, and their mean.
  std::vector<std::vector<std::vector<float>>> ema(
      static_cast<size_t>(n), std::vector<std::vector<float>>(shapes.size()));
  for (auto& per_rank : ema)
    for (size_t p = 0; p < shapes.size(); ++p)
      per_rank[p].assign(static_cast<size_t>(sf::num_elements(shapes[p])), 0.0f);
  auto run_steps = [&](sf::GradientBuckets& buckets, int first, int last,
                       const std::vector<int>& shared_at, int64_t steps_before) {
    for (int step = first; step <= last; ++step) {
      std::vector<Tensor> grads;
      for (size_t p = 0; p < shapes.size(); ++p) {
        grads.emplace_back(DType::f32, shapes[p]);
        for (int64_t k = 0; k < grads.back().numel(); ++k)
          grads.back().data<float>()[k] = gradient(comm.rank(), step, p, k);
        for (int q = 0; q < n; ++q)
          for (int64_t k = 0; k < grads.back().numel(); ++k) {
            const float g = gradient(q, step, p, k);
            float& v = ema[static_cast<size_t>(q)][p][static_cast<size_t>(k)];
            v = b2 * v + (1.0f - b2) * g * g;
          }
      }
      buckets.finish(grads, step);
      const bool shared = std::find(shared_at.begin(), shared_at.end(), step) != shared_at.end();
      const std::vector<Tensor>* v = buckets.shared_second_moments();
      expect((v != nullptr) == shared, fmt::format("shared at step {} only", step));
      if (!v) continue;
      expect(buckets.second_moment_steps() == steps_before + step - first + 1, "steps counted");
      sf::VariableStore store;
      for (size_t p = 0; p < shapes.size(); ++p) {
        store.set(fmt::format("v{}", p), (*v)[p].clone());
        for (int64_t k = 0; k < (*v)[p].numel(); ++k) {
          float sum = 0.0f;
          for (int q = 0; q < n; ++q) sum += ema[static_cast<size_t>(q)][p][static_cast<size_t>(k)];
          const float want = sum / static_cast<float>(n), got = (*v)[p].data<float>()[k];
          expect(std::fabs(got - want) <= 1e-6f * want + 1e-12f,
                 fmt::format("average second moment of parameter {}", p));
        }
      }
      sf::check_replicas(comm, store, {"v0", "v1", "v2"}, step);
    }
  };
  const auto onebit = sf::parse_grad_compression("onebit");
  // 0.002 MB: a bucket of about 500 floats, so the parameters span several buckets.
  sf::GradientBuckets buckets(comm, shapes, 0.002, onebit, b2);
  run_steps(buckets, 1, 10, {1, 2, 4, 8}, 0);
  // A run resumed with other ranks: every rank starts from the last shared average, 10 steps in,
  // shared at once.
  std::vector<Tensor> last;
  for (size_t p = 0; p < shapes.size(); ++p) {
    last.emplace_back(DType::f32, shapes[p]);
    for (int64_t k = 0; k < last.back().numel(); ++k) {
      float sum = 0.0f;
      for (int q = 0; q < n; ++q) sum += ema[static_cast<size_t>(q)][p][static_cast<size_t>(k)];
      last.back().data<float>()[k] = sum / static_cast<float>(n);
    }
    for (int q = 0; q < n; ++q)
      std::copy(last.back().data<float>(), last.back().data<float>() + last.back().numel(),
                ema[static_cast<size_t>(q)][p].begin());
  }
  sf::GradientBuckets resumed(comm, shapes, 0.002, onebit, b2);
  resumed.restore_second_moments(last, 10, true);
  run_steps(resumed, 11, 16, {11, 16}, 10);
  comm.barrier("end");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  double timeout = argc > 2 ? std::stod(argv[2]) : 30.0;
  std::unique_ptr<Communicator> comm;
  try {
    comm = std::make_unique<Communicator>(sf::CommOptions{.timeout_seconds = timeout});
    if (scenario == "collectives") {
      collectives(*comm);
    } else if (scenario == "p2p") {
      point_to_point(*comm);
    } else if (scenario == "shape-mismatch") {
      mismatch(*comm, DType::f32, {2, 3});
    } else if (scenario == "dtype-mismatch") {
      mismatch(*comm, DType::i32, {3, 2});
    } else if (scenario == "larger-message") {
      mismatch(*comm, DType::f32, {4, 4});
    } else if (scenario == "replicas-agree" || scenario == "replicas-drift") {
      // Identical weights pass; a last rank whose weights differ by one bit stops the job.
      sf::VariableStore variables;
      Tensor w = filled(DType::f32, {16, 4}, 3);
      if (scenario == "replicas-drift" && comm->rank() == comm->size() - 1)
        static_cast<uint8_t*>(w.raw())[17] ^= 1;
      variables.set("fc/w", w);
      sf::check_replicas(*comm, variables, {"fc/w"}, 7);
    } else if (scenario == "hung-peer") {
      // The last rank stops answering; the others must give up after the timeout.
      if (comm->rank() == comm->size() - 1) raise(SIGSTOP);
      Tensor t(DType::f32, {4});
      comm->allreduce(t, sf::ReduceOp::sum, "gradients");
    } else if (scenario == "ring-average") {
      ring_average(*comm);
    } else if (scenario == "second-moments") {
      second_moments(*comm);
    } else if (scenario == "ring-hung-peer") {
      if (comm->rank() == comm->size() - 1) raise(SIGSTOP);
      Tensor t(DType::f32, {1000});
      sf::RingAverage ring(*comm, 1000);
      ring.start({t}, Tensor(DType::f32, {1000}), "allreduce of gradients (step 3)");
      ring.wait();
    } else if (scenario == "dead-peer") {
      if (comm->rank() == comm->size() - 1) raise(SIGKILL);
      Tensor t(DType::f32, {4});
      comm->allreduce(t, sf::ReduceOp::sum, "gradients");
    } else {
      sf::fail("unknown scenario '{}'", scenario);
    }
  } catch (const sf::Error& e) {
    if (comm && comm->size() > 1) comm->abort(e.what());
    std::fprintf(stderr, "slimflow: error: %s\n", e.what());
    return 1;
  }
  std::printf("rank %d ok\n", comm->rank());
  std::fflush(stdout);
  return 0;
}
