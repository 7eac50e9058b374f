#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "autodiff/gradients.h"
#include "cpu/core_pinning.h"
#include "graph/op_registry.h"
#include "kernels/kernel.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "placement/device_name.h"
#include "placement/partition.h"
#include "placement/placer.h"
#include "runtime/session.h"
#include "support/cli.h"
#include "support/mnist.h"
#include "support/temp_files.h"
#include "support/mpi_jobs.h"
#include "support/testing.h"
#include "train/checkpoint.h"
#include "train/micro_batches.h"
#include "train/trainer.h"
#include "train/training_run.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using testing::expect_error;

// --- device names ---

TEST(DeviceName, ParsesAndFormatsEveryForm) {
  for (const char* text : {"/cpu:0", "/cpu:12", "/gpu:1", "/job:worker/task:3/cpu:1"})
    EXPECT_EQ(DeviceName::parse(text, "t").str(), text);
  const DeviceName d = DeviceName::parse("/job:worker/task:3/cpu:1", "t");
  EXPECT_EQ(d.job, "worker");
  EXPECT_EQ(d.task, 3);
  EXPECT_EQ(d.type, "cpu");
  EXPECT_EQ(d.index, 1);
}

TEST(DeviceName, MalformedNamesAreOneLineErrors) {
  for (const char* text : {"", "cpu:0", "/cpu", "/cpu:", "/cpu:-1", "/cpu:x", "/tpu:0", "/cpu:0/",
                           "/job:/task:0/cpu:0", "/job:w/task:/cpu:0", "/job:w/cpu:0",
                           "/job:w/task:0", "/cpu:99999999", "/job:w x/task:0/cpu:0"})
    expect_error([&] { DeviceName::parse(text, "--device"); },
                 fmt::format("--device: device '{}' is not a device name (expected /cpu:N, "
                             "/gpu:N or /job:NAME/task:K/cpu:N)",
                             text));
}

TEST(DeviceSet, ResolvesItsDevicesAndNamesUnknownOnes) {
  const DeviceSet set(2);
  EXPECT_EQ(set.names(), (std::vector<std::string>{"/cpu:0", "/cpu:1"}));
  auto resolve = [&](const DeviceSet& s, const std::string& name) {
    return s.resolve(DeviceName::parse(name, "t"), "layer 'fc1'");
  };
  EXPECT_EQ(resolve(set, "/cpu:1"), "/cpu:1");
  EXPECT_EQ(resolve(set, "/gpu:0"), "/gpu:0");
  expect_error([&] { resolve(set, "/cpu:2"); },
               "layer 'fc1': unknown device '/cpu:2' (this process has 2 CPU devices: "
               "/cpu:0../cpu:1; --cpu-devices sets the count)");
  expect_error([&] { resolve(set, "/job:worker/task:1/cpu:0"); },
               "layer 'fc1': device '/job:worker/task:1/cpu:0' belongs to an MPI job, and this "
               "process is not one (start it with mpirun)");
  expect_error([] { DeviceSet(0); }, "--cpu-devices: expected 1..64 CPU devices, got 0");

  const DeviceSet job(1, "worker", 2, 0);
  EXPECT_EQ(job.names(),
            (std::vector<std::string>{"/job:worker/task:0/cpu:0", "/job:worker/task:1/cpu:0"}));
  EXPECT_EQ(resolve(job, "/cpu:0"), "/job:worker/task:0/cpu:0");
  EXPECT_TRUE(job.is_local("/job:worker/task:0/cpu:0"));
  EXPECT_FALSE(job.is_local("/job:worker/task:1/cpu:0"));
  expect_error([&] { resolve(job, "/job:worker/task:2/cpu:0"); },
               "layer 'fc1': unknown device '/job:worker/task:2/cpu:0' (this job is /job:worker "
               "with tasks 0..1)");
}

// --- placement ---

// x -> fc1 = MatMul(x, w1) -> relu -> fc2 = MatMul(relu, w2)
struct Mlp {
  Graph g;
  Output x, w1, fc1, relu, w2, fc2;
};

Mlp mlp() {
  Mlp m;
  m.x = ops::placeholder(m.g, DType::f32, {4, 8}, "x");
  m.w1 = ops::variable(m.g, DType::f32, {8, 16}, "w1");
  m.fc1 = ops::matmul(m.g, m.x, m.w1, false, false, "fc1");
  m.relu = ops::relu(m.g, m.fc1, "relu");
  m.w2 = ops::variable(m.g, DType::f32, {16, 2}, "w2");
  m.fc2 = ops::matmul(m.g, m.relu, m.w2, false, false, "fc2");
  return m;
}

Node& node(Graph& g, Output o) { return g.mutable_node(o.node); }

TEST(Placement, RequestsThenInputsThenTheDefaultDevice) {
  Mlp m = mlp();
  node(m.g, m.fc1).requested_device = "/cpu:1";
  const PlacementReport r = place(m.g, DeviceSet(2), {});
  auto at = [&](Output o) { return r.nodes[static_cast<size_t>(o.node)]; };
  EXPECT_EQ(at(m.x).device, "/cpu:0");
  EXPECT_EQ(at(m.x).reason, "default device");
  EXPECT_EQ(at(m.fc1).device, "/cpu:1");
  EXPECT_EQ(at(m.fc1).reason, "requested");
  EXPECT_EQ(at(m.relu).device, "/cpu:1");
  EXPECT_EQ(at(m.relu).reason, "inherited from input fc1");
  EXPECT_EQ(at(m.fc2).reason, "inherited from input relu");
  EXPECT_EQ(m.g.node(m.fc2.node).device, "/cpu:1");
  EXPECT_EQ(r.devices, (std::vector<std::string>{"/cpu:0", "/cpu:1"}));
  // x and w1 (on /cpu:0) are read on /cpu:1; w2 is on /cpu:0 too (the default).
  ASSERT_EQ(r.transfers.size(), 3u);
  EXPECT_EQ(r.transfers[0].from, m.x);
  EXPECT_EQ(r.transfers[0].bytes, 4 * 8 * 4);

  Mlp all = mlp();
  const PlacementReport one = place(all.g, DeviceSet(2), {.default_device = "/cpu:1"});
  EXPECT_EQ(one.devices, (std::vector<std::string>{"/cpu:1"}));
  EXPECT_TRUE(one.transfers.empty());
}

TEST(Placement, ColocationGroupsShareADevice) {
  Mlp m = mlp();
  node(m.g, m.fc1).requested_device = "/cpu:1";
  node(m.g, m.x).requested_device = "/cpu:0";
  node(m.g, m.fc2).colocate_with = "x";
  const PlacementReport r = place(
      m.g, DeviceSet(2), {.default_device = "/cpu:0", .soft = true, .colocate = {{"fc1", "w1"}}});
  EXPECT_EQ(r.nodes[static_cast<size_t>(m.w1.node)].device, "/cpu:1");
  EXPECT_EQ(r.nodes[static_cast<size_t>(m.w1.node)].reason, "colocated with fc1");
  EXPECT_EQ(r.nodes[static_cast<size_t>(m.fc2.node)].device, "/cpu:0");
  EXPECT_EQ(r.nodes[static_cast<size_t>(m.fc2.node)].reason, "colocated with x");
}

TEST(Placement, GradientsFollowTheirForwardNodes) {
  Mlp m = mlp();
  node(m.g, m.fc1).requested_device = "/cpu:1";
  node(m.g, m.w1).requested_device = "/cpu:1";
  Output loss = ops::reduce_sum(m.g, m.fc2, {0, 1}, false, "loss");
  const std::vector<Output> grads = gradients(m.g, loss, {m.w1, m.w2});
  place(m.g, DeviceSet(2), {});
  EXPECT_EQ(m.g.node(grads[0].node).device, "/cpu:1");
  for (int id = 0; id < m.g.num_nodes(); ++id)
    if (m.g.node(id).colocate_with == "fc1") {
      EXPECT_EQ(m.g.node(id).device, "/cpu:1") << m.g.node(id).name;
    }
}

TEST(Placement, BadRequestsAreOneLineErrorsNamingTheNode) {
  {
    Mlp m = mlp();
    node(m.g, m.fc1).requested_device = "/cpu:7";
    expect_error([&] { place(m.g, DeviceSet(2), {}); },
                 "node 'fc1' (MatMul): unknown device '/cpu:7' (this process has 2 CPU devices");
  }
  {
    Mlp m = mlp();
    node(m.g, m.fc1).requested_device = "/cpu:one";
    expect_error([&] { place(m.g, DeviceSet(2), {}); },
                 "node 'fc1' (MatMul): device '/cpu:one' is not a device name");
  }
  {
    Mlp m = mlp();
    node(m.g, m.fc1).colocate_with = "nope";
    expect_error([&] { place(m.g, DeviceSet(2), {}); },
                 "node 'fc1' (MatMul): colocate_with 'nope' is not a node of the graph");
  }
  {
    Mlp m = mlp();
    node(m.g, m.fc1).requested_device = "/cpu:1";
    node(m.g, m.w1).requested_device = "/cpu:0";
    expect_error(
        [&] {
          place(m.g, DeviceSet(2),
                {.default_device = "/cpu:0", .soft = true, .colocate = {{"fc1", "w1"}}});
        },
        "colocation group [w1, fc1]: node 'w1' requests /cpu:0 but node 'fc1' requests "
        "/cpu:1, and they must share a device");
  }
  {
    Mlp m = mlp();
    expect_error([&] { place(m.g, DeviceSet(2), {.default_device = "cpu0"}); },
                 "--device: device 'cpu0' is not a device name");
  }
}

TEST(Placement, SoftPlacementFallsBackFromTheGpuAndSaysWhy) {
  Mlp m = mlp();
  node(m.g, m.fc1).requested_device = "/gpu:0";
  const PlacementReport r = place(m.g, DeviceSet(2), {});
  EXPECT_EQ(r.nodes[static_cast<size_t>(m.fc1.node)].device, "/cpu:0");
  EXPECT_EQ(r.nodes[static_cast<size_t>(m.fc1.node)].reason,
            "requested; soft fallback from /gpu:0: no gpu kernel for MatMul f32");

  Mlp d = mlp();
  const PlacementReport all = place(d.g, DeviceSet(2), {.default_device = "/gpu:0"});
  EXPECT_EQ(all.nodes[static_cast<size_t>(d.x.node)].reason,
            "default device; soft fallback from /gpu:0: no gpu memory here");
  EXPECT_EQ(all.devices, (std::vector<std::string>{"/cpu:0"}));
}

TEST(Placement, StrictPlacementNamesNodeOpDeviceKernelsAndGroup) {
  Mlp m = mlp();
  node(m.g, m.relu).requested_device = "/gpu:0";
  node(m.g, m.fc2).colocate_with = "relu";
  expect_error([&] { place(m.g, DeviceSet(2), {.default_device = "/cpu:0", .soft = false}); },
               "node 'relu' (Relu): no gpu kernel for Relu f32 on /gpu:0 (requested); devices "
               "with kernels: /cpu:0, /cpu:1; colocation group: [relu, fc2] (--strict-placement; "
               "without it the node moves to /cpu:0)");
  Mlp s = mlp();
  node(s.g, s.relu).requested_device = "/gpu:0";
  expect_error([&] { place(s.g, DeviceSet(1), {.default_device = "/cpu:0", .soft = false}); },
               "devices with kernels: /cpu:0; colocation group: none");
}

TEST(Placement, LogPutsTheSummaryFirstThenNodesThenTransfers) {
  Mlp m = mlp();
  node(m.g, m.fc1).requested_device = "/cpu:1";
  node(m.g, m.w1).requested_device = "/cpu:1";
  node(m.g, m.w2).requested_device = "/cpu:1";
  const PlacementReport r = place(m.g, DeviceSet(2), {});
  const std::string log = placement_log(m.g, r);
  const std::vector<std::string> lines = testing::non_empty_lines(log);
  ASSERT_GE(lines.size(), 10u) << log;
  EXPECT_EQ(lines[0], "placement: 6 nodes on 2 devices, 1 transfer moving 128 bytes per step");
  EXPECT_EQ(lines[1].find("  /cpu:0"), 0u) << log;
  EXPECT_NE(lines[2].find("/cpu:1       5 nodes"), std::string::npos) << log;
  EXPECT_NE(lines[2].find("640 parameter bytes"), std::string::npos) << log;  // (8x16 + 16x2) x 4
  EXPECT_EQ(lines[3].find("  threads "), 0u) << log;  // pinned or not, and why
  EXPECT_EQ(lines[4], "nodes:");
  EXPECT_NE(log.find(fmt::format("  relu  {:<11}  /cpu:1  inherited from input fc1\n", "Relu")),
            std::string::npos)
      << log;
  EXPECT_EQ(lines[11], "transfers:");
  EXPECT_EQ(lines[12], "  x:0  /cpu:0 -> /cpu:1  f32[4,8]  128 bytes per step");

  const nlohmann::json j = nlohmann::json::parse(placement_json(m.g, r));
  ASSERT_EQ(j["devices"].size(), 2u);
  EXPECT_EQ(j["devices"][1]["device"], "/cpu:1");
  EXPECT_EQ(j["devices"][1]["nodes"], 5);
  EXPECT_DOUBLE_EQ(
      j["devices"][1]["flops"].get<double>(),
      node_flops(m.g, m.fc1.node) + node_flops(m.g, m.relu.node) + node_flops(m.g, m.fc2.node));
  EXPECT_EQ(j["nodes"][2]["reason"], "requested");
  EXPECT_EQ(j["transfers"][0]["bytes_per_step"], 128);
  EXPECT_EQ(j["transfers"][0]["output"], "x:0");
}

TEST(CorePinning, DevicesGetDistinctCoresOrTheLogSaysWhyNot) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const CorePlan plan = plan_device_cores({"/cpu:1", "/cpu:0"}, 1, /*others_running=*/0);
  if (cores >= 2 && !plan.cores.empty()) {
    ASSERT_EQ(plan.cores.size(), 2u);
    ASSERT_EQ(plan.cores[0].size(), 1u);
    EXPECT_NE(plan.cores[0], plan.cores[1]);
    // Slots go by sorted name, so every process of a job picks the same cores for a device.
    EXPECT_EQ(plan.note, fmt::format("threads pinned: /cpu:1 on core {}; /cpu:0 on core {}",
                                     plan.cores[0][0], plan.cores[1][0]));
    EXPECT_LT(plan.cores[1][0], plan.cores[0][0]);
  }
  // Busy cores: a pinned device would wait for its core while another is free.
  const CorePlan busy = plan_device_cores({"/cpu:1", "/cpu:0"}, 1, 3);
  EXPECT_TRUE(busy.cores.empty());
  if (!plan.cores.empty()) {  // the cores exist: only their load stops the pinning
    EXPECT_EQ(busy.note.find("threads not pinned: the cores are busy (3 other tasks running on "),
              0u)
        << busy.note;
  }
  const CorePlan too_many = plan_device_cores({"/cpu:0", "/cpu:1"}, 4096);
  EXPECT_TRUE(too_many.cores.empty());
  EXPECT_EQ(too_many.note.find("threads not pinned: 2 device(s) x 4096 thread(s) need 8192 cores, "
                               "this process may use "),
            0u)
      << too_many.note;
}

// --- partitioned runs ---

TEST(Partition, CrossDeviceEdgesBecomeRecvNodesKeyedByEdge) {
  Mlp m = mlp();
  node(m.g, m.fc1).requested_device = "/cpu:1";
  place(m.g, DeviceSet(2), {});
  const Partition p = partition_graph(m.g, needed_nodes(m.g, {m.fc2}));
  ASSERT_EQ(p.parts.size(), 2u);
  EXPECT_EQ(p.parts[0].device, "/cpu:0");
  EXPECT_EQ(testing::count_ops(p.parts[0].graph, op_names::kRecv), 0);
  EXPECT_EQ(testing::count_ops(p.parts[1].graph, op_names::kRecv), 3);
  EXPECT_EQ(p.keys[0], "x:0->/cpu:1");
  const Graph& g1 = p.parts[1].graph;
  EXPECT_EQ(g1.node(g1.id_of("x/recv:0")).attrs.get_string("edge"), "x:0->/cpu:1");
  EXPECT_EQ(g1.type(Output{g1.id_of("fc2"), 0}), m.g.type(m.fc2));
}

TEST(PartitionedRun, AGraphOnOneDeviceIsNotPartitioned) {
  Mlp m = mlp();
  place(m.g, DeviceSet(2), {.default_device = "/cpu:1"});
  EXPECT_FALSE(Session(m.g).partitioned());
  node(m.g, m.fc2).device = "/cpu:0";
  EXPECT_TRUE(Session(m.g).partitioned());
}

// A random graph of [4,8] tensors: x, three weights, and a mix of elementwise ops and
// matmuls; its loss sums the last two values.
struct RandomGraph {
  Graph g;
  Output x;
  std::vector<Output> weights;
  std::vector<Output> fetches;
  int forward_nodes = 0;
};

RandomGraph random_graph(uint32_t seed) {
  std::mt19937 rng(seed);
  RandomGraph r;
  r.x = ops::placeholder(r.g, DType::f32, {4, 8}, "x");
  for (int k = 0; k < 3; ++k)
    r.weights.push_back(ops::variable(r.g, DType::f32, {8, 8}, fmt::format("w{}", k)));
  std::vector<Output> pool = {r.x};
  const int count = 6 + static_cast<int>(rng() % 12);
  for (int i = 0; i < count; ++i) {
    Output a = pool[rng() % pool.size()], b = pool[rng() % pool.size()];
    switch (rng() % 6) {
      case 0:
        pool.push_back(ops::add(r.g, a, b));
        break;
      case 1:
        pool.push_back(ops::mul(r.g, a, b));
        break;
      case 2:
        pool.push_back(ops::relu(r.g, a));
        break;
      case 3:
        pool.push_back(ops::tanh(r.g, a));
        break;
      case 4:
        pool.push_back(ops::sub(r.g, a, b));
        break;
      default:
        pool.push_back(ops::matmul(r.g, a, r.weights[rng() % 3]));
        break;
    }
  }
  // Every weight reaches the loss.
  Output sum = ops::add(r.g, pool.back(), pool[pool.size() - 2]);
  for (Output w : r.weights)
    sum = ops::add(r.g, sum, ops::tanh(r.g, ops::matmul(r.g, pool.back(), w)));
  Output loss = ops::reduce_sum(r.g, sum, {0, 1}, false, "loss");
  r.forward_nodes = r.g.num_nodes();
  r.fetches = {loss, sum, pool[pool.size() / 2]};
  for (Output grad : gradients(r.g, loss, r.weights)) r.fetches.push_back(grad);
  return r;
}

std::vector<Tensor> run_graph(const Graph& g, const RandomGraph& r, bool expect_partitioned) {
  auto store = std::make_shared<VariableStore>();
  for (size_t k = 0; k < r.weights.size(); ++k)
    store->set(fmt::format("w{}", k),
               testing::random_tensor({8, 8}, 100 + static_cast<uint32_t>(k)));
  Session session(g, SessionOptions{.threads = 1}, store);
  EXPECT_EQ(session.partitioned(), expect_partitioned);
  std::vector<Tensor> out;
  const Tensor x = testing::random_tensor({4, 8}, 7);
  for (int step = 0; step < 2; ++step) {
    out.clear();
    for (const Tensor& t : session.run({{r.x, x}}, r.fetches, true)) out.push_back(t.clone());
  }
  return out;
}

TEST(PartitionedRun, RandomGraphsOnRandomDevicesMatchOneDeviceBitForBit) {
  for (uint32_t seed = 0; seed < 24; ++seed) {
    SCOPED_TRACE(fmt::format("seed {}", seed));
    RandomGraph r = random_graph(seed);
    const std::vector<Tensor> want = run_graph(r.g, r, false);

    std::mt19937 rng(seed + 1000);
    const int devices = 2 + static_cast<int>(seed % 2);
    Graph split = r.g;
    // Half the graphs place the gradients with their forward nodes; the others everywhere.
    const bool colocate = seed % 4 < 2;
    for (int id = 0; id < split.num_nodes(); ++id) {
      Node& n = split.mutable_node(id);
      if (!colocate) n.colocate_with.clear();
      if (!colocate || id < r.forward_nodes)
        n.requested_device = fmt::format("/cpu:{}", rng() % static_cast<unsigned>(devices));
    }
    const PlacementReport report = place(split, DeviceSet(devices), {});
    const bool spans = report.devices.size() > 1;
    const std::vector<Tensor> got = run_graph(split, r, spans);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i].shape(), want[i].shape()) << i;
      EXPECT_EQ(std::memcmp(got[i].raw(), want[i].raw(), want[i].bytes()), 0)
          << "fetch " << i << " differs";
    }
  }
}

TEST(PartitionedRun, EveryDtypeEmptyAndLargeTensorsCrossDevices) {
  for (DType dtype : {DType::f32, DType::i32, DType::i64, DType::u8, DType::i8}) {
    for (const Shape& shape : {Shape{0}, Shape{3, 5}, Shape{1 << 20}}) {
      Graph g;
      Output x = ops::placeholder(g, dtype, shape, "x");
      Output y = g.add(op_names::kIdentity, {x}, {}, "y");
      g.mutable_node(y.node).device = "/cpu:1";
      Session session(g);
      ASSERT_TRUE(session.partitioned());
      Tensor in(dtype, shape);
      for (size_t b = 0; b < in.bytes(); ++b)
        static_cast<uint8_t*>(in.raw())[b] = static_cast<uint8_t>(b * 7);
      const Tensor out = session.run({{x, in}}, {y, x})[0];
      ASSERT_EQ(out.dtype(), dtype);
      ASSERT_EQ(out.shape(), shape);
      if (in.bytes() > 0) {
        EXPECT_EQ(std::memcmp(out.raw(), in.raw(), in.bytes()), 0);
      }
    }
  }
}

// Hands a Recv whatever it is given.
class FixedTransfers : public Transfers {
 public:
  explicit FixedTransfers(Tensor value) : value_(std::move(value)) {}
  Tensor receive(const Node&) override { return value_; }

 private:
  Tensor value_;
};

TEST(PartitionedRun, ARecvOfTheWrongDtypeOrShapeNamesTheEdge) {
  Graph g;
  Output r = g.add(
      op_names::kRecv, {},
      {{"edge", std::string("a:0->/cpu:1")}, {"dtype", std::string("f32")}, {"shape", Shape{2, 3}}},
      "a/recv:0");
  Output y = ops::relu(g, r, "y");
  FixedTransfers wrong_shape(Tensor(DType::f32, {2, 4}));
  Session a(g, SessionOptions{.transfers = &wrong_shape});
  expect_error([&] { a.run({}, {y}); },
               "edge 'a:0->/cpu:1': Recv 'a/recv:0' on /cpu:0 expects f32[2,3], got f32[2,4]");
  FixedTransfers wrong_dtype(Tensor(DType::i32, {2, 3}));
  Session b(g, SessionOptions{.transfers = &wrong_dtype});
  expect_error([&] { b.run({}, {y}); }, "expects f32[2,3], got i32[2,3]");
  FixedTransfers right(testing::random_tensor({2, 3}, 1));
  Session c(g, SessionOptions{.transfers = &right});
  EXPECT_EQ(c.run({}, {y})[0].shape(), (Shape{2, 3}));
}

TEST(PartitionedRun, AFailingDeviceStopsTheOthersWithItsError) {
  // /cpu:1 waits for x from /cpu:0, whose feed is missing: the step ends with /cpu:0's error.
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {2}, "x");
  Output a = ops::relu(g, x, "a");
  Output b = ops::tanh(g, a, "b");
  g.mutable_node(b.node).device = "/cpu:1";
  Session session(g);
  expect_error([&] { session.run({}, {b}); }, "node 'a' (Relu): input 'x' was not fed");
}

// --- training ---

TEST(PartitionedTraining, DeepMnistOnTwoDevicesEqualsOneDevice) {
  REQUIRE_MNIST();
  const std::string one = testing::make_temp_dir("sf-1dev"),
                    two = testing::make_temp_dir("sf-2dev");
  auto options = [](const std::string& model, const std::string& out) {
    TrainOptions o;
    o.model_path = testing::source_path(model);
    o.data = "mnist";
    o.out_dir = out;
    o.epochs = 1;
    o.batch = 32;
    o.train_limit = 96;  // 3 steps
    o.test_limit = 32;
    o.threads = 1;
    o.seed = 5;
    o.cpu_devices = 2;
    return o;
  };
  std::string log;
  TrainCallbacks callbacks;
  callbacks.on_placement = [&](const Graph& g, const PlacementReport& r) {
    log = placement_log(g, r);
  };
  train(options("models/deep-mnist.yaml", one), {});
  train(options("models/deep-mnist-2dev.yaml", two), callbacks);
  EXPECT_NE(log.find("on 2 devices"), std::string::npos) << log;
  EXPECT_NE(log.find("pool2:0  /cpu:0 -> /cpu:1"), std::string::npos) << log;
  const auto a = load_checkpoint(checkpoint_path(one)).tensors;
  const auto b = load_checkpoint(checkpoint_path(two)).tensors;
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    ASSERT_EQ(t.bytes(), b.at(name).bytes()) << name;
    EXPECT_EQ(std::memcmp(t.raw(), b.at(name).raw(), t.bytes()), 0) << name << " differs";
  }
  std::filesystem::remove_all(one);
  std::filesystem::remove_all(two);
}

// --- micro-batches (GPipe-style pipelining) ---

// x [N,3] -> a = x w1, b = x w1 (so w1's gradient is a sum of two products) -> relu(a + b)
// -> logits = . w2 -> mean cross-entropy; its gradients for w1 and w2.
struct SmallStep {
  Graph g;
  StepGraph step;
};

std::unique_ptr<SmallStep> small_step(int64_t batch) {
  auto s = std::make_unique<SmallStep>();
  Graph& g = s->g;
  const Output x = ops::placeholder(g, DType::f32, {batch, 3}, "x");
  const Output labels = ops::placeholder(g, DType::i32, {batch}, "labels");
  const Output w1 = ops::variable(g, DType::f32, {3, 5}, "w1");
  const Output w2 = ops::variable(g, DType::f32, {5, 4}, "w2");
  const Output a = ops::matmul(g, x, w1, false, false, "a");
  const Output b = ops::matmul(g, x, w1, false, false, "b");
  const Output h = ops::relu(g, ops::add(g, a, b, "sum"), "h");
  const Output logits = ops::matmul(g, h, w2, false, false, "logits");
  const Output loss = ops::softmax_cross_entropy(g, logits, labels, "loss");
  s->step.graph = &g;
  s->step.first_backward = g.num_nodes();
  s->step.grads = gradients(g, loss, {w1, w2});
  s->step.fed = {x, labels};
  s->step.loss = loss;
  s->step.probs = Output{loss.node, 1};
  return s;
}

TEST(MicroBatchGraph, SummedAndDeferredGradientsEqualTheWholeBatch) {
  const auto whole = small_step(8);
  const auto part = small_step(2);
  const MicroBatchGraph mb = micro_batch_graph(part->step, 4);
  // w2's gradient (x^T dy) runs once on the micro-batches' rows together; w1's (a sum of two
  // products) is accumulated micro-batch by micro-batch.
  const Node& w2_grad = mb.graph.node(mb.grads[1].node);
  EXPECT_EQ(w2_grad.name, whole->g.node(whole->step.grads[1].node).name);
  EXPECT_EQ(w2_grad.op, op_names::kMatMul);
  EXPECT_EQ(mb.graph.node(w2_grad.inputs[0].node).op, op_names::kConcat);
  EXPECT_EQ(mb.graph.node(mb.grads[0].node).op, op_names::kAdd);
  EXPECT_EQ(mb.graph.node(mb.fed[3][0].node).name, "x/mb3");

  auto store = std::make_shared<VariableStore>();
  store->set("w1", testing::random_tensor({3, 5}, 1));
  store->set("w2", testing::random_tensor({5, 4}, 2));
  const Tensor x = testing::random_tensor({8, 3}, 3);
  const Tensor labels = testing::random_labels(8, 4, 4);
  Session one(whole->g, SessionOptions{.threads = 1}, store);
  const std::vector<Tensor> want =
      one.run({{whole->step.fed[0], x}, {whole->step.fed[1], labels}},
              {whole->step.loss, whole->step.grads[0], whole->step.grads[1],
               whole->step.probs});
  Session piped(mb.graph, SessionOptions{.threads = 1}, store);
  Feeds feeds;
  for (int64_t k = 0; k < 4; ++k) {
    Tensor xs(DType::f32, {2, 3}), ls(DType::i32, {2});
    std::memcpy(xs.raw(), x.data<float>() + k * 6, xs.bytes());
    std::memcpy(ls.raw(), labels.data<int32_t>() + k * 2, ls.bytes());
    feeds.push_back({mb.fed[static_cast<size_t>(k)][0], xs});
    feeds.push_back({mb.fed[static_cast<size_t>(k)][1], ls});
  }
  const std::vector<Tensor> got = piped.run(feeds, {mb.loss, mb.grads[0], mb.grads[1], mb.probs_all});
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(want[i].shape(), got[i].shape()) << i;
    for (int64_t e = 0; e < want[i].numel(); ++e)
      EXPECT_NEAR(want[i].data<float>()[e], got[i].data<float>()[e], 1e-6) << i << "[" << e << "]";
  }
}

// One step of the tiny CNN (tests/data/tiny-cnn-2dev.yaml, no dropout) with momentum, whose
// velocity after one step is the gradient itself: the checkpoint's tensors.
struct OneStep {
  std::map<std::string, Tensor> tensors;
  int64_t micro_batches = 0;  // as the epoch report says
};

// 32 MNIST images to train on and 32 to test, loaded once.
std::shared_ptr<const DataSplit> few_mnist_images() {
  static const auto split = [] {
    const DataSplit all = load_dataset("mnist");
    return std::make_shared<const DataSplit>(DataSplit{take(all.train, 32), take(all.test, 32)});
  }();
  return split;
}

OneStep one_step(const std::string& model, const std::string& out, int64_t micro_batches) {
  TrainOptions o;
  o.model_path = model;
  o.data = "mnist";
  o.data_split = few_mnist_images();
  o.out_dir = out;
  o.epochs = 1;
  o.batch = 32;
  o.train_limit = 32;
  o.test_limit = 32;
  o.threads = 1;
  o.seed = 5;
  o.cpu_devices = 2;
  o.optimizer = "momentum";
  o.lr = 0.1;
  o.micro_batches = micro_batches;
  const std::vector<EpochReport> reports = train(o, {});
  return {load_checkpoint(checkpoint_path(out)).tensors, reports.at(0).micro_batches};
}

// The same spec with every layer on the default device.
std::string unsplit_copy(const std::string& spec, const std::string& dir) {
  std::string text = testing::run_shell("cat " + spec).out;
  for (const char* request : {", device: /cpu:0", ", device: /cpu:1"})
    for (size_t at; (at = text.find(request)) != std::string::npos;)
      text.erase(at, std::strlen(request));
  const std::string path = dir + "/unsplit.yaml";
  FILE* f = std::fopen(path.c_str(), "w");
  std::fputs(text.c_str(), f);
  std::fclose(f);
  return path;
}

// Equal up to float summation order: the gradients' sums over the batch run in other orders.
void expect_close(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b,
                  const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << what << ": " << name;
    ASSERT_EQ(t.shape(), b.at(name).shape()) << what << ": " << name;
    if (t.dtype() != DType::f32) {  // the optimizer's step count
      EXPECT_EQ(std::memcmp(t.raw(), b.at(name).raw(), t.bytes()), 0) << what << ": " << name;
      continue;
    }
    const float* x = t.data<float>();
    const float* y = b.at(name).data<float>();
    float largest = 0.0f, worst = 0.0f;
    for (int64_t i = 0; i < t.numel(); ++i) {
      largest = std::max(largest, std::fabs(x[i]));
      worst = std::max(worst, std::fabs(x[i] - y[i]));
    }
    EXPECT_LE(worst, 2e-6f * std::max(largest, 1.0f)) << what << ": " << name;
  }
}

TEST(PartitionedTraining, MicroBatchesGiveTheWholeBatchUpdate) {
  REQUIRE_MNIST();
  const std::string dir = testing::make_temp_dir("sf-micro");
  const std::string split = testing::source_path("tests/data/tiny-cnn-2dev.yaml");
  const OneStep whole = one_step(split, dir + "/m1", 1);
  const OneStep piped = one_step(split, dir + "/m4", 4);
  const OneStep unsplit = one_step(unsplit_copy(split, dir), dir + "/one", 1);
  EXPECT_EQ(whole.micro_batches, 1);
  EXPECT_EQ(piped.micro_batches, 4);
  // M=1 is today's step: split and unsplit bit for bit.
  ASSERT_EQ(whole.tensors.size(), unsplit.tensors.size());
  for (const auto& [name, t] : whole.tensors)
    EXPECT_EQ(std::memcmp(t.raw(), unsplit.tensors.at(name).raw(), t.bytes()), 0) << name;
  // The gradients (velocity) and the weights of 4 micro-batches are the whole batch's.
  const Tensor& gradient = whole.tensors.at(std::string(kOptimizerPrefix) + "momentum/velocity/conv1/weights");
  float largest = 0.0f;
  for (int64_t i = 0; i < gradient.numel(); ++i)
    largest = std::max(largest, std::fabs(gradient.data<float>()[i]));
  EXPECT_GT(largest, 1e-3f) << "the step must move the weights for the comparison to mean much";
  expect_close(whole.tensors, piped.tensors, "4 micro-batches vs the whole batch");
  expect_close(unsplit.tensors, piped.tensors, "4 micro-batches vs one device");
  std::filesystem::remove_all(dir);
}

TEST(PartitionedTraining, MicroBatchesThatCannotGiveTheBatchUpdateAreOneLineErrors) {
  REQUIRE_MNIST();
  const std::string dir = testing::make_temp_dir("sf-micro-bad");
  TrainOptions o;
  o.data = "mnist";
  o.data_split = few_mnist_images();
  o.out_dir = dir;
  o.batch = 32;
  o.train_limit = 32;
  o.test_limit = 32;
  o.model_path = testing::source_path("tests/data/tiny-cnn-2dev.yaml");
  o.micro_batches = 3;
  expect_error([&] { train(o, {}); },
               "train: --micro-batches 3 must divide the batch 32 (equal micro-batches give the "
               "whole batch's mean gradient)");
  o.micro_batches = 0;
  expect_error([&] { train(o, {}); }, "train: --micro-batches must be 1 or more, got 0");
  o.micro_batches = 2;
  o.model_path = testing::source_path("models/resnet-mnist.yaml");
  expect_error([&] { train(o, {}); },
               "train: --micro-batches 2: " + o.model_path +
                   " keeps batch statistics ('stem/bn/moving_mean': batch norm or learned "
                   "activation ranges), which micro-batches would compute over 16 examples "
                   "instead of the batch's 32; use --micro-batches 1");
  std::filesystem::remove_all(dir);
}

TEST(PlacementCli, MicroBatchesAreValidatedAndRecorded) {
  const std::string dir = testing::make_temp_dir("sf-micro-cli");
  const std::string common = "train --model " +
                             testing::source_path("tests/data/tiny-cnn-2dev.yaml") +
                             " --batch 32 --train-limit 32 --test-limit 32 --epochs 1 --quiet "
                             "--threads 1 --cpu-devices 2 --json --out " + dir;
  const testing::CliResult zero = testing::run_cli(common + "/zero --micro-batches 0");
  EXPECT_EQ(zero.exit_code, 2) << zero.out;
  EXPECT_NE(zero.out.find("slimflow: error: --micro-batches: must be at least 1, got 0"),
            std::string::npos)
      << zero.out;
  if (testing::mnist_available()) {
    const testing::CliResult piped = testing::run_cli(common + "/piped --micro-batches 2");
    EXPECT_EQ(piped.exit_code, 0) << piped.out;
    EXPECT_NE(piped.out.find("\"micro_batches\":2"), std::string::npos) << piped.out;
  }
  std::filesystem::remove_all(dir);
}

TEST(PlacementCli, GpuFallsBackSoftlyAndStrictIsAOneLineError) {
  REQUIRE_MNIST();
  const std::string dir = testing::make_temp_dir("sf-place-cli");
  const std::string tiny = testing::source_path("tests/data/tiny-cnn.yaml");
  const std::string common = " --model " + tiny +
                             " --train-limit 64 --batch 32 --test-limit 32 "
                             "--epochs 1 --quiet --threads 1 --cpu-devices 2 --out " +
                             dir;
  const testing::CliResult soft =
      testing::run_cli("train" + common + "/soft --device /gpu:0 --log-placement");
  EXPECT_EQ(soft.exit_code, 0) << soft.out;
  EXPECT_NE(soft.out.find("default device; soft fallback from /gpu:0: no gpu memory here"),
            std::string::npos)
      << soft.out;
  const testing::CliResult logged = testing::run_cli(
      "train" + common + "/file --device /cpu:1 --log-placement=" + dir + "/log.json --json");
  EXPECT_EQ(logged.exit_code, 0) << logged.out;
  const nlohmann::json j =
      nlohmann::json::parse(testing::run_shell("cat " + dir + "/log.json").out);
  EXPECT_EQ(j["devices"][0]["device"], "/cpu:1");
  const testing::CliResult strict =
      testing::run_cli("train" + common + "/strict --device /gpu:0 --strict-placement");
  EXPECT_EQ(strict.exit_code, 1) << strict.out;
  EXPECT_NE(strict.out.find("slimflow: error: node '"), std::string::npos) << strict.out;
  EXPECT_NE(strict.out.find("on /gpu:0 (default device); devices with kernels: /cpu:0, /cpu:1"),
            std::string::npos)
      << strict.out;
  std::filesystem::remove_all(dir);
}

TEST(PlacementCli, BadDevicesAndStepFlagsAreRefusedBeforeTheDataLoads) {
  const std::string dir = testing::make_temp_dir("sf-place-unknown");
  const std::string tiny = testing::source_path("tests/data/tiny-cnn.yaml");
  // The data folder does not exist: the device's error must come first.
  testing::expect_one_line_error("train --model " + tiny + " --data " + dir +
                                     "/no-such-data --cpu-devices 2 --device /cpu:9 --out " +
                                     dir + "/run",
                                 {"--device: unknown device '/cpu:9'", "2 CPU devices",
                                  "--cpu-devices sets the count"});
  testing::expect_one_line_error(
      "train --model " + tiny + " --data " + dir + "/no-such-data --device /tpu:0 --out " + dir +
          "/run",
      {"--device: device '/tpu:0' is not a device name"});
  const std::string no_data =
      "train --model " + tiny + " --data " + dir + "/no-such-data --batch 32 --out " + dir + "/run ";
  testing::expect_one_line_error(no_data + "--micro-batches 3",
                                 {"--micro-batches 3 must divide the batch 32"});
  testing::expect_one_line_error(no_data + "--grad-compression topk:7",
                                 {"--grad-compression must be none, fp16"});
  EXPECT_FALSE(std::filesystem::exists(dir + "/run"));
  std::filesystem::remove_all(dir);
}

// --- processes of an MPI job as devices ---

#ifdef SLIMFLOW_PARTITION_CHECK

testing::CliResult run_partition_check(const std::string& scenario, const std::string& args = "") {
  return testing::run_shell(std::string("timeout -k 5 60 ") + SLIMFLOW_MPIRUN + " -np 2 " +
                            SLIMFLOW_PARTITION_CHECK + " " + scenario + " " + args);
}

TEST(ProcessDevices, EveryDtypeEmptyAndLargeTensorsCrossProcesses) {
  const testing::CliResult r = run_partition_check("round-trips");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("rank 0 ok"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 1 ok"), std::string::npos) << r.out;
}

TEST(ProcessDevices, AnArrivalOfAnotherShapeNamesTheEdge) {
  const testing::CliResult r = run_partition_check("mismatch");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("slimflow: error: rank 1: edge 'a:0->/job:worker/task:1/cpu:0' from "
                       "/job:worker/task:0/cpu:0: receive of tag 0 from rank 0: expected "
                       "f32[3,2], got f32[2,3]"),
            std::string::npos)
      << r.out;
}

TEST(ProcessDevices, AHungTaskEndsTheJobAfterTheTimeoutNamingTheEdge) {
  const auto start = std::chrono::steady_clock::now();
  const testing::CliResult r = run_partition_check("hung-task", "1");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(seconds, 45.0) << r.out;  // a bound on a hang, not a timing claim
  EXPECT_NE(r.out.find("slimflow: error: rank 0: edge 'a:0->/job:worker/task:0/cpu:0' from "
                       "/job:worker/task:1/cpu:0 got no answer in 1 s: task 1 died or hangs"),
            std::string::npos)
      << r.out;
}

TEST(ProcessDevices, AKilledTaskEndsTheJobNamingIt) {
  const testing::CliResult r = run_partition_check("killed-task");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("rank 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("signal 9"), std::string::npos) << r.out;
}

TEST(ProcessDevices, TinyCnnOnTwoProcessesEqualsOneDeviceAndResumes) {
  REQUIRE_MNIST();
  const std::string dir = testing::make_temp_dir("sf-2proc");
  const std::string common =
      "train --data mnist --batch 32 --train-limit 96 --test-limit 32 --threads 1 --seed 5 "
      "--quiet --json ";
  const testing::CliResult one = testing::run_cli(
      common + "--epochs 2 --model " + testing::source_path("tests/data/tiny-cnn.yaml") +
      " --out " + dir + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.out;
  // One epoch, then a second resumed from rank 0's checkpoint: the dropout generator, the
  // variables and the optimizer slots of both processes must all have been saved.
  const std::string mpirun = testing::mpirun_slimflow(2, 120);
  const testing::CliResult two = testing::run_shell(
      mpirun + common + "--epochs 1 --log-placement=" + dir + "/placement.json --model " +
      testing::source_path("tests/data/tiny-cnn-2proc.yaml") + " --out " + dir + "/two");
  ASSERT_EQ(two.exit_code, 0) << two.out;
  EXPECT_EQ(testing::json_lines(two.out).size(), 1u) << "rank 0 alone reports\n" << two.out;
  const testing::CliResult resumed =
      testing::run_shell(mpirun + "train --resume " + dir + "/two --epochs 1 --threads 1 --quiet");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out;
  const nlohmann::json placement =
      nlohmann::json::parse(testing::run_shell("cat " + dir + "/placement.json").out);
  EXPECT_EQ(placement["transfers"][0]["output"], "pool2:0") << placement.dump();
  EXPECT_EQ(placement["transfers"][0]["from"], "/job:worker/task:0/cpu:0");
  EXPECT_EQ(placement["transfers"][0]["to"], "/job:worker/task:1/cpu:0");
  // Rank 0's checkpoint holds every variable and optimizer slot, as one device's does.
  const auto a = load_checkpoint(checkpoint_path(dir + "/one")).tensors;
  const auto b = load_checkpoint(checkpoint_path(dir + "/two")).tensors;
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    ASSERT_EQ(t.bytes(), b.at(name).bytes()) << name;
    EXPECT_EQ(std::memcmp(t.raw(), b.at(name).raw(), t.bytes()), 0) << name << " differs";
  }
  const testing::CliResult frozen =
      testing::run_cli("freeze " + dir + "/two --out " + dir + "/two.sfm");
  EXPECT_EQ(frozen.exit_code, 0) << frozen.out;
  std::filesystem::remove_all(dir);
}

TEST(ProcessDevices, MicroBatchesOnTwoProcessesEqualOneProcess) {
  REQUIRE_MNIST();
  const std::string dir = testing::make_temp_dir("sf-2proc-micro");
  const std::string common =
      "train --data mnist --batch 32 --train-limit 64 --test-limit 32 --threads 1 --seed 5 "
      "--epochs 1 --micro-batches 4 --quiet --json ";
  const testing::CliResult one = testing::run_cli(
      common + "--model " + testing::source_path("tests/data/tiny-cnn.yaml") + " --out " + dir +
      "/one");
  ASSERT_EQ(one.exit_code, 0) << one.out;
  const testing::CliResult two = testing::run_shell(
      testing::mpirun_slimflow(2, 120) + common + "--model " +
      testing::source_path("tests/data/tiny-cnn-2proc.yaml") + " --out " + dir + "/two");
  ASSERT_EQ(two.exit_code, 0) << two.out;
  const std::vector<nlohmann::json> reports = testing::json_lines(two.out);
  ASSERT_EQ(reports.size(), 1u) << two.out;
  EXPECT_EQ(reports[0]["micro_batches"], 4);
  // Dropout is on one process alone, so its masks are drawn in one device's order.
  const auto a = load_checkpoint(checkpoint_path(dir + "/one")).tensors;
  const auto b = load_checkpoint(checkpoint_path(dir + "/two")).tensors;
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    EXPECT_EQ(std::memcmp(t.raw(), b.at(name).raw(), t.bytes()), 0) << name << " differs";
  }
  std::filesystem::remove_all(dir);
}

#endif

}  // namespace
}  // namespace sf
