// A cross-process edge of a partitioned graph (comm/process_links.h) against OpenMPI's own
// MPI_Send / MPI_Recv ping-pong, in one `mpirun -np 2` job, rounds alternating between the two.
// Ours: x on task 0 goes to an Identity on task 1 and back to one on task 0, so each run is a
// round trip through the partitioned run (the rendezvous, MPI, the dtype and shape check, and
// one Identity copy per side). Prints one JSON object per size from rank 0 (one-way latency
// in microseconds, bandwidth in GB/s). bench/placement.py runs it:
//   mpirun -np 2 build/release/bench/process_edge_bench [--rounds 5]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/process_links.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "runtime/session.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--rounds" && i + 1 < argc) {
      rounds = std::stoi(argv[++i]);
    } else {
      std::fprintf(stderr, "process_edge_bench: unknown argument '%s'\n", arg.c_str());
      return 2;
    }
  }
  try {
    sf::Communicator comm;
    sf::ProcessLinks links(comm);
    const int rank = comm.rank();
    for (int64_t bytes : {int64_t{4} << 10, int64_t{64} << 10, int64_t{1} << 20, int64_t{16} << 20}) {
      const int64_t floats = bytes / 4;
      sf::Graph g;
      const sf::Output x = sf::ops::placeholder(g, sf::DType::f32, {floats}, "x");
      const sf::Output there = g.add(sf::op_names::kIdentity, {x}, {}, "there");
      const sf::Output back = g.add(sf::op_names::kIdentity, {there}, {}, "back");
      for (int id = 0; id < g.num_nodes(); ++id) g.mutable_node(id).device = "/job:bench/task:0/cpu:0";
      g.mutable_node(there.node).device = "/job:bench/task:1/cpu:0";
      sf::Session session(g, sf::SessionOptions{.threads = 1,
                                                .processes = &links,
                                                .local_fetches = {back}});
      sf::Tensor in(sf::DType::f32, {floats});
      in.fill_zero();
      std::vector<char> buffer(static_cast<size_t>(bytes));
      const int reps = static_cast<int>(std::clamp<int64_t>((int64_t{64} << 20) / bytes, 4, 200));
      double ours = std::numeric_limits<double>::max(), plain = ours;
      for (int round = -1; round < rounds; ++round) {  // round -1: warm-up, not counted
        comm.barrier("bench");
        auto start = Clock::now();
        for (int r = 0; r < reps; ++r) session.run({{x, in}}, {back});
        const double t_ours = seconds_since(start) / reps;
        comm.barrier("bench");
        start = Clock::now();
        for (int r = 0; r < reps; ++r) {
          if (rank == 0) {
            MPI_Send(buffer.data(), static_cast<int>(bytes), MPI_BYTE, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(buffer.data(), static_cast<int>(bytes), MPI_BYTE, 1, 0, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
          } else {
            MPI_Recv(buffer.data(), static_cast<int>(bytes), MPI_BYTE, 0, 0, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
            MPI_Send(buffer.data(), static_cast<int>(bytes), MPI_BYTE, 0, 0, MPI_COMM_WORLD);
          }
        }
        const double t_plain = seconds_since(start) / reps;
        if (round >= 0) ours = std::min(ours, t_ours), plain = std::min(plain, t_plain);
      }
      // One way is half a round trip.
      if (rank == 0)
        std::printf("{\"bytes\": %lld, \"reps\": %d, \"rounds\": %d, \"ours_us\": %.2f, "
                    "\"mpi_us\": %.2f, \"ours_gbps\": %.3f, \"mpi_gbps\": %.3f}\n",
                    static_cast<long long>(bytes), reps, rounds, ours / 2 * 1e6, plain / 2 * 1e6,
                    static_cast<double>(bytes) / (ours / 2) * 1e-9,
                    static_cast<double>(bytes) / (plain / 2) * 1e-9);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "process_edge_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
