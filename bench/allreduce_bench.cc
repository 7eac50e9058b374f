// Algorithm bandwidth of the data-parallel gradient averaging (train/data_parallel.h: buckets
// of --bucket-mb, each a ring average straight from the gradients: comm/ring_average.h) against
// OpenMPI's own MPI_Allreduce on one contiguous buffer of the same bytes, in one mpirun job;
// rounds alternate between the two, and the medians are compared. The gradients
// are shaped as a network's parameters (Deep-MNIST by default; --resnet18 for ~11.7 M floats).
// Prints one JSON object from rank 0. bench/data_parallel.py runs it:
//   mpirun -np 2 build/release/bench/allreduce_bench [--bucket-mb 4] [--rounds 300] [--resnet18]
// 300 rounds by default: with 40, the Deep-MNIST figure moved between 87% and 117% from one
// run to the next on a quiet machine; with 300, between 88% and 96%.
// --floats N reduces one gradient of N floats instead (bench/scaling_model.py's size sweep).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "train/data_parallel.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::vector<sf::Shape> deep_mnist_gradients() {
  // Backward order: fc2, fc1, conv2, conv1 (bias after weights).
  return {{10}, {1024, 10}, {1024}, {3136, 1024}, {64}, {5, 5, 32, 64}, {32}, {5, 5, 1, 32}};
}

std::vector<sf::Shape> resnet18_gradients() {
  // ResNet-18's 11.7 M parameters in its conv layers' sizes, last layer first.
  std::vector<sf::Shape> shapes = {{1000}, {512, 1000}};
  const int64_t widths[] = {512, 256, 128, 64};
  for (int64_t w : widths) {
    for (int i = 0; i < 4; ++i) shapes.push_back({3, 3, i == 3 && w != 64 ? w / 2 : w, w});
    if (w != 64) shapes.push_back({1, 1, w / 2, w});
  }
  shapes.push_back({7, 7, 3, 64});
  return shapes;
}

}  // namespace

int main(int argc, char** argv) {
  double bucket_mb = 4.0;
  int rounds = 300;
  bool resnet = false;
  int64_t floats = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--bucket-mb" && i + 1 < argc) bucket_mb = std::stod(argv[++i]);
    else if (arg == "--rounds" && i + 1 < argc) rounds = std::stoi(argv[++i]);
    else if (arg == "--resnet18") resnet = true;
    else if (arg == "--floats" && i + 1 < argc) floats = std::stoll(argv[++i]);
    else {
      std::fprintf(stderr, "allreduce_bench: unknown argument '%s'\n", arg.c_str());
      return 2;
    }
  }
  try {
    sf::Communicator comm;
    const std::vector<sf::Shape> shapes = floats > 0 ? std::vector<sf::Shape>{{floats}}
                                          : resnet  ? resnet18_gradients()
                                                    : deep_mnist_gradients();
    std::vector<sf::Tensor> grads;
    int64_t total = 0;
    for (const sf::Shape& s : shapes) {
      grads.emplace_back(sf::DType::f32, s);
      for (int64_t k = 0; k < grads.back().numel(); ++k) grads.back().data<float>()[k] = 1.0f;
      total += grads.back().numel();
    }
    sf::GradientBuckets buckets(comm, shapes, bucket_mb);
    std::vector<float> flat(static_cast<size_t>(total), 1.0f);
    std::vector<double> ours, plain;
    for (int round = -1; round < rounds; ++round) {  // round -1: warm-up, not timed
      comm.barrier("bench");
      auto start = Clock::now();
      for (size_t i = 0; i < grads.size(); ++i) buckets.ready(i, grads[i]);
      buckets.finish(grads, round + 2);
      const double t_ours = std::chrono::duration<double>(Clock::now() - start).count();
      comm.barrier("bench");
      start = Clock::now();
      MPI_Allreduce(MPI_IN_PLACE, flat.data(), static_cast<int>(total), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
      const double t_plain = std::chrono::duration<double>(Clock::now() - start).count();
      if (round >= 0) ours.push_back(t_ours), plain.push_back(t_plain);
    }
    // Medians: on a shared 2-core machine a round that another process interrupts takes several
    // times longer, and a mean would report the interruptions.
    const double t_ours = median(ours), t_plain = median(plain);
    const double bytes = static_cast<double>(total) * sizeof(float);
    if (comm.rank() == 0)
      std::printf(
          "{\"network\": \"%s\", \"ranks\": %d, \"bytes\": %.0f, \"bucket_mb\": %g, "
          "\"buckets\": %lld, \"rounds\": %d, \"ours_seconds\": %.6f, \"mpi_seconds\": %.6f, "
          "\"ours_algbw_gbps\": %.3f, \"mpi_algbw_gbps\": %.3f, \"efficiency\": %.3f}\n",
          floats > 0 ? "one-buffer" : resnet ? "resnet18" : "deep-mnist", comm.size(), bytes, bucket_mb,
          static_cast<long long>(buckets.buckets()), rounds, t_ours, t_plain,
          bytes * 8e-9 / t_ours, bytes * 8e-9 / t_plain, t_plain / t_ours);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
