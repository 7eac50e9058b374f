#include "train/trainer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <sstream>
#include <utility>

#include "autodiff/gradients.h"
#include "comm/communicator.h"
#include "comm/process_links.h"
#include "core/error.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "placement/device_name.h"
#include "runtime/process_stats.h"
#include "runtime/session.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/micro_batches.h"
#include "train/optimizer.h"
#include "train/parameter_server.h"
#include "train/sharded_batches.h"
#include "train/training_run.h"
#include "transforms/training_passes.h"

namespace sf {

using json = nlohmann::json;

namespace {

void clip_to_unit(Tensor& weights) {
  float* w = weights.data<float>();
  for (int64_t i = 0; i < weights.numel(); ++i) w[i] = std::clamp(w[i], -1.0f, 1.0f);
}

constexpr int64_t kEvalBatch = 200;

// The options a run trains with once the command line, a resumed run, the spec's `train:`
// section and the built-in defaults are merged (in that order of precedence).
struct RunConfig {
  int64_t epochs = 5;
  int64_t batch = 64;
  double lr = 1e-3;
  std::string optimizer = "adam";
  double weight_decay = 0.0;
  double momentum = 0.9;
  std::string lr_schedule = "constant";
  uint64_t seed = 1;
  std::string data;
  int64_t train_limit = 0;
  int64_t test_limit = 0;
  std::string lr_scaling = "linear";
  Augmentation augment;

  json to_json() const {
    return {{"epochs", epochs},       {"batch", batch},
            {"lr", lr},               {"optimizer", optimizer},
            {"weight_decay", weight_decay}, {"momentum", momentum},
            {"lr_schedule", lr_schedule}, {"seed", seed},
            {"data", data},           {"train_limit", train_limit},
            {"test_limit", test_limit}, {"lr_scaling", lr_scaling},
            {"augment", augmentation_str(augment)}};
  }
};

// The recipe a run recorded in its metadata's "options", which both --resume and --init-from
// take over; the epochs and data limits only a resumed run keeps.
void read_recipe(const json& o, RunConfig& config) {
  config.batch = o.at("batch");
  config.lr = o.at("lr");
  config.optimizer = o.at("optimizer");
  config.weight_decay = o.at("weight_decay");
  config.momentum = o.at("momentum");
  config.lr_schedule = o.at("lr_schedule");
  config.seed = o.at("seed");
  config.data = o.at("data");
  config.lr_scaling = o.value("lr_scaling", config.lr_scaling);
  config.augment = parse_augmentation(o.value("augment", ""));
}

template <typename T>
T spec_default(const ModelSpec& spec, const std::string& key, T fallback) {
  auto it = spec.train_defaults.find(key);
  if (it == spec.train_defaults.end()) return fallback;
  try {
    if constexpr (std::is_same_v<T, std::string>) {
      return it->second;
    } else if constexpr (std::is_floating_point_v<T>) {
      return static_cast<T>(std::stod(it->second));
    } else {
      return static_cast<T>(std::stoll(it->second));
    }
  } catch (const std::exception&) {
    fail("{}: train.{}: '{}' is not a valid value", spec.origin, key, it->second);
  }
}

struct TrainingGraph {
  Model model;
  Output labels;
  Output teacher_logits;  // distillation only
  Output loss;            // what training minimizes
  Output label_loss;      // cross-entropy against the labels (the test loss)
  Output probs;
  std::vector<Output> grads;
  int first_backward = 0;  // the node gradients() added first
  // With micro-batches, evaluation runs micro-batch 0's copy (model.input, labels, label_loss,
  // probs) and a training step feeds every copy's (input, labels) and fetches step_probs.
  std::vector<std::pair<Output, Output>> micro_batch_inputs;
  Output step_probs;
};

TrainingGraph build_training_graph(const ModelSpec& spec, int64_t batch,
                                   const Distillation* distillation = nullptr) {
  TrainingGraph t{build_model(spec, batch), {}, {}, {}, {}, {}, {}};
  Graph& g = t.model.graph;
  t.labels = ops::placeholder(g, DType::i32, {batch}, "labels");
  if (distillation) {
    if (distillation->classes != spec.classes)
      fail("distill: the teacher has {} classes, the student {} ({}) has {}",
           distillation->classes, spec.name, spec.origin, spec.classes);
    t.label_loss = ops::softmax_cross_entropy(g, t.model.logits, t.labels, "label_loss");
    t.teacher_logits =
        ops::placeholder(g, DType::f32, {batch, distillation->classes}, "teacher_logits");
    t.loss = distillation_loss(g, t.model.logits, t.teacher_logits, t.label_loss,
                               distillation->temperature, distillation->alpha);
  } else {
    t.loss = t.label_loss = ops::softmax_cross_entropy(g, t.model.logits, t.labels, "loss");
  }
  t.probs = Output{t.label_loss.node, 1};
  std::vector<Output> wrt;
  for (const Parameter& p : t.model.parameters) wrt.push_back(p.output);
  t.first_backward = g.num_nodes();
  t.grads = gradients(g, t.loss, wrt);
  for (size_t i = 0; i < wrt.size(); ++i)
    if (!t.grads[i].valid())
      fail("{}: parameter '{}' does not affect the loss", spec.origin,
           t.model.parameters[i].name);
  // The training rewrites, every output the loop holds mapped along.
  std::vector<Output*> held = {&t.model.input, &t.model.logits, &t.labels,
                               &t.loss,        &t.label_loss,   &t.probs};
  if (t.teacher_logits.valid()) held.push_back(&t.teacher_logits);
  for (Parameter& p : t.model.parameters) held.push_back(&p.output);
  for (MovingAverage& m : t.model.moving_averages) held.push_back(&m.batch_value);
  for (Output& grad : t.grads) held.push_back(&grad);
  std::vector<Output> outputs;
  for (const Output* o : held) outputs.push_back(*o);
  // The rewrite keeps the nodes' order and names, not their ids: the gradient seed is found
  // again by name.
  const std::string seed = t.model.graph.node(t.first_backward).name;
  t.model.graph = rewrite_training_graph(t.model.graph, outputs);
  t.first_backward = t.model.graph.id_of(seed);
  for (size_t i = 0; i < held.size(); ++i) *held[i] = outputs[i];
  t.step_probs = t.probs;
  return t;
}

// The training graph of a batch in `micro_batches` micro-batches (train/micro_batches.h);
// `step` is one micro-batch's.
TrainingGraph micro_batched(TrainingGraph step, int64_t micro_batches) {
  MicroBatchGraph mb = micro_batch_graph(
      StepGraph{.graph = &step.model.graph,
                .first_backward = step.first_backward,
                .fed = {step.model.input, step.labels},
                .loss = step.loss,
                .probs = step.probs,
                .grads = step.grads},
      micro_batches);
  TrainingGraph t;
  t.model = std::move(step.model);
  t.model.graph = std::move(mb.graph);
  for (Parameter& p : t.model.parameters) p.output = Output{t.model.graph.id_of(p.name), 0};
  t.model.input = mb.fed[0][0];
  t.labels = mb.fed[0][1];
  t.model.logits = Output{};  // one per micro-batch
  t.label_loss = mb.losses[0];
  t.probs = mb.probs[0];
  t.loss = mb.loss;
  t.step_probs = mb.probs_all;
  t.grads = mb.grads;
  for (const auto& fed : mb.fed) t.micro_batch_inputs.emplace_back(fed[0], fed[1]);
  return t;
}

// Rows [begin, end) of a batch, copied (a kernel may expect its input aligned as a new tensor is).
Tensor batch_rows(const Tensor& batch, int64_t begin, int64_t end) {
  Shape shape = batch.shape();
  shape[0] = end - begin;
  Tensor part(batch.dtype(), shape);
  const size_t row_bytes = batch.bytes() / static_cast<size_t>(batch.dim(0));
  std::memcpy(part.raw(), static_cast<const char*>(batch.raw()) + static_cast<size_t>(begin) * row_bytes,
              part.bytes());
  return part;
}

int64_t count_correct(const Tensor& probs, const Tensor& labels) {
  const int64_t n = probs.dim(0), classes = probs.dim(1);
  const float* p = probs.data<float>();
  const int32_t* y = labels.data<int32_t>();
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = p + i * classes;
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c)
      if (row[c] > row[best]) best = c;
    correct += best == y[i];
  }
  return correct;
}

EvalResult evaluate(Session& session, const TrainingGraph& t, const Dataset& test) {
  BatchIterator it(test, BatchOptions{.batch_size = kEvalBatch, .seed = 0, .shuffle = false});
  Tensor images, labels;
  EvalResult result;
  double loss_sum = 0.0;
  int64_t correct = 0;
  while (it.next(images, labels)) {
    Feeds feeds = {{t.model.input, images}, {t.labels, labels}};
    // Shapes are re-inferred over the whole graph for the evaluation batch, so the teacher's
    // input (which the test loss does not read) gets a placeholder of that batch.
    if (t.teacher_logits.valid()) {
      Tensor unused(DType::f32, {labels.numel(), t.model.graph.type(t.teacher_logits).shape[1]});
      std::fill(unused.data<float>(), unused.data<float>() + unused.numel(), 0.0f);
      feeds.emplace_back(t.teacher_logits, unused);
    }
    auto out = session.run(feeds, {t.label_loss, t.probs}, false);
    loss_sum += static_cast<double>(*out[0].data<float>()) * static_cast<double>(labels.numel());
    correct += count_correct(out[1], labels);
    result.count += labels.numel();
  }
  result.accuracy = result.count ? static_cast<double>(correct) / static_cast<double>(result.count) : 0.0;
  result.loss = result.count ? loss_sum / static_cast<double>(result.count) : 0.0;
  return result;
}

// Rows [begin, end) of `data`, sharing its storage.
Dataset rows(const Dataset& data, int64_t begin, int64_t end) {
  Dataset part = data;
  Shape image_shape = data.images.shape();
  image_shape[0] = end - begin;
  const size_t example_bytes = static_cast<size_t>(data.images.numel() / std::max<int64_t>(data.size(), 1)) * sizeof(float);
  part.images = Tensor(DType::f32, image_shape, data.images.storage(),
                       static_cast<size_t>(begin) * example_bytes +
                           (static_cast<char*>(data.images.raw()) -
                            static_cast<char*>(data.images.storage()->data())));
  part.labels = Tensor(DType::i32, {end - begin}, data.labels.storage(),
                       static_cast<size_t>(begin) * sizeof(int32_t) +
                           (static_cast<char*>(data.labels.raw()) -
                            static_cast<char*>(data.labels.storage()->data())));
  return part;
}

// Every rank evaluates its share of the test set; the counts are summed.
EvalResult evaluate_sharded(Session& session, const TrainingGraph& t, const Dataset& test,
                            Communicator& comm) {
  const int64_t n = test.size(), world = comm.size(), r = comm.rank();
  EvalResult local;
  const int64_t begin = n * r / world, end = n * (r + 1) / world;
  if (end > begin) local = evaluate(session, t, rows(test, begin, end));
  Tensor counts(DType::i64, {2});
  counts.data<int64_t>()[0] = std::llround(local.accuracy * static_cast<double>(local.count));
  counts.data<int64_t>()[1] = local.count;
  Tensor loss(DType::f32, {1});
  loss.data<float>()[0] = static_cast<float>(local.loss * static_cast<double>(local.count));
  comm.allreduce(counts, ReduceOp::sum, "test counts");
  comm.allreduce(loss, ReduceOp::sum, "test loss");
  EvalResult result;
  result.count = counts.data<int64_t>()[1];
  if (result.count > 0) {
    result.accuracy = static_cast<double>(counts.data<int64_t>()[0]) / static_cast<double>(result.count);
    result.loss = static_cast<double>(loss.data<float>()[0]) / static_cast<double>(result.count);
  }
  return result;
}

Dataset limited(const Dataset& data, int64_t limit) {
  return limit > 0 && limit < data.size() ? take(data, limit) : data;
}

std::string rng_state(const std::mt19937_64& rng) {
  std::ostringstream out;
  out << rng;
  return out.str();
}

void restore_rng(std::mt19937_64& rng, const std::string& state) {
  std::istringstream in(state);
  in >> rng;
  if (!in) fail("checkpoint: random generator state is corrupt");
}

// Every rank of the job takes `owner`'s generator state.
void share_rng(Communicator& comm, std::mt19937_64& rng, int owner) {
  const std::string state = rng_state(rng);
  Tensor size(DType::i64, {1});
  size.data<int64_t>()[0] = static_cast<int64_t>(state.size());
  comm.broadcast(size, owner, "random generator state size");
  Tensor bytes(DType::u8, {size.data<int64_t>()[0]});
  if (comm.rank() == owner) std::memcpy(bytes.raw(), state.data(), state.size());
  comm.broadcast(bytes, owner, "random generator state");
  restore_rng(rng, std::string(static_cast<const char*>(bytes.raw()), bytes.bytes()));
}

json report_json(const EpochReport& r) {
  json j = {{"epoch", r.epoch},
          {"epochs", r.epochs},
          {"step", r.step},
          {"loss", r.loss},
          {"train_accuracy", r.train_accuracy},
          {"test_accuracy", r.test_accuracy},
          {"test_count", r.test_count},
          {"images_per_sec", r.images_per_sec},
          {"epoch_seconds", r.epoch_seconds},
          {"peak_rss_mb", r.peak_rss_mb},
          {"current_rss_mb", r.current_rss_mb},
          {"lr", r.lr},
          {"world_size", r.world_size},
          {"global_batch", r.global_batch},
          {"comm_seconds", r.comm_seconds},
          {"comm_bytes", r.comm_bytes},
          {"comm_bytes_per_step", r.comm_bytes_per_step},
          {"overlap_fraction", r.overlap_fraction},
          {"precision", r.precision},
          {"precision_reason", r.precision_reason},
          {"micro_batches", r.micro_batches}};
  if (r.parameter_servers > 0) {
    j["data_parallel"] = "async";
    j["parameter_servers"] = r.parameter_servers;
    j["workers"] = r.workers;
    j["staleness_max"] = r.staleness_max;
    j["staleness_mean"] = r.staleness_mean;
  }
  return j;
}

}  // namespace

std::string epoch_report_json(const EpochReport& report) { return report_json(report).dump(); }

// --resume continues the run as it was started: a flag that names another model, data set or
// option would silently mix two runs, so it is refused rather than obeyed or ignored.
void refuse_contradictions(const TrainOptions& options, const RunConfig& run) {
  const std::string& dir = options.resume_dir;
  if (!options.model_path.empty())
    fail("train: --resume {} trains the run's own model; drop --model {} (or start a new run "
         "with --out)", dir, options.model_path);
  if (!options.out_dir.empty() && options.out_dir != dir)
    fail("train: --resume {} writes to its own directory; drop --out {}", dir, options.out_dir);
  auto refuse = [&](const char* flag, const auto& given, const auto& stored) {
    if (given != stored)
      fail("train: {} {} contradicts the run in {}, which trains with {} {}; drop it to resume",
           flag, given, dir, flag, stored);
  };
  if (!options.data.empty()) refuse("--data", options.data, run.data);
  if (options.batch) refuse("--batch", *options.batch, run.batch);
  if (options.lr) refuse("--lr", *options.lr, run.lr);
  if (options.optimizer) refuse("--optimizer", *options.optimizer, run.optimizer);
  if (options.weight_decay) refuse("--weight-decay", *options.weight_decay, run.weight_decay);
  if (options.momentum) refuse("--momentum", *options.momentum, run.momentum);
  if (options.lr_schedule) refuse("--lr-schedule", *options.lr_schedule, run.lr_schedule);
  if (options.seed) refuse("--seed", *options.seed, run.seed);
  if (options.train_limit) refuse("--train-limit", options.train_limit, run.train_limit);
  if (options.test_limit) refuse("--test-limit", options.test_limit, run.test_limit);
}

std::vector<EpochReport> train(const TrainOptions& options, const TrainCallbacks& all_callbacks) {
  // Data parallelism's replicas; a model placed on the job's devices sets `job` instead (below).
  Communicator* comm = options.comm;
  Communicator* job = nullptr;
  const int rank = comm ? comm->rank() : 0;
  int world = comm ? comm->size() : 1;
  // Async: the first `servers` ranks serve parameters, the others (the data shards) train.
  if (options.data_parallel != "sync" && options.data_parallel != "async")
    fail("train: --data-parallel must be sync or async, got '{}'", options.data_parallel);
  const bool async = options.data_parallel == "async";
  if (!async && options.parameter_servers)
    fail("train: --ps {} needs --data-parallel async", *options.parameter_servers);
  if (!async && options.max_staleness)
    fail("train: --max-staleness {} needs --data-parallel async", *options.max_staleness);
  const int64_t max_staleness = options.max_staleness.value_or(4);
  if (max_staleness < 0)
    fail("train: --max-staleness must be 0 or more, got {}", max_staleness);
  const int64_t servers = async ? options.parameter_servers.value_or(1) : 0;
  if (async && !comm)
    fail("train: --data-parallel async needs an mpirun job of more ranks than --ps {} (e.g. "
         "mpirun -np {} slimflow train ...)",
         servers, servers + 2);
  if (async && (servers < 1 || servers >= world))
    fail("train: --ps {} must be 1..{} for this {}-rank job: at least one rank serves and one "
         "trains",
         servers, world - 1, world);
  if (async && options.grad_compression != "none")
    fail("train: --grad-compression {} compresses sync's allreduce; drop it with --data-parallel "
         "async",
         options.grad_compression);
  if (async && all_callbacks.after_step)
    fail("train: this training (pruning) needs --data-parallel sync");
  const bool serving = async && rank < servers;
  // The ranks that train, each on its shard of every step's data.
  int shards = static_cast<int>(world - servers);
  int shard = static_cast<int>(rank - servers);
  // Rank 0 speaks for the job; every rank keeps after_step (pruning masks its own replica).
  TrainCallbacks callbacks = all_callbacks;
  if (rank != 0) callbacks = TrainCallbacks{all_callbacks.after_step, {}, {}, {}, {}};
  auto message = [&](const std::string& text) {
    if (callbacks.on_message) callbacks.on_message(text);
  };
  // Resolve the spec and configuration.
  ModelSpec spec;
  RunConfig config;
  std::optional<TrainingRun> resumed;
  std::optional<TrainingRun> initial;  // --init-from: the run to start from
  if (!options.resume_dir.empty() && !options.init_from.empty())
    fail("train: --resume continues a run, --init-from starts a new one from it: give one");
  if (!options.resume_dir.empty()) {
    std::string path = checkpoint_path(options.resume_dir);
    if (!std::filesystem::exists(path))
      fail("{}: no checkpoint to resume from (expected {})", options.resume_dir, path);
    resumed.emplace(options.resume_dir);
    spec = resumed->spec();
    if (resumed->metadata().contains("distill") && !options.distillation)
      fail("{}: a distillation run; resume it with slimflow distill --resume {}",
           options.resume_dir, options.resume_dir);
    resumed->read_metadata([&](const json& meta) {
      const json& o = meta.at("options");
      read_recipe(o, config);
      config.epochs = o.at("epochs");
      config.train_limit = o.at("train_limit");
      config.test_limit = o.at("test_limit");
    });
    refuse_contradictions(options, config);
  } else if (!options.init_from.empty()) {
    if (options.out_dir.empty()) fail("train: --out DIR is required");
    initial.emplace(options.init_from);
    spec = initial->spec();
    initial->read_metadata([&](const json& meta) { read_recipe(meta.at("options"), config); });
    config.train_limit = options.train_limit;
    config.test_limit = options.test_limit;
  } else {
    if (options.model_path.empty()) fail("train: --model is required (or --resume DIR)");
    if (options.out_dir.empty()) fail("train: --out DIR is required");
    spec = load_model_spec(options.model_path);
    config.epochs = spec_default<int64_t>(spec, "epochs", config.epochs);
    config.batch = spec_default<int64_t>(spec, "batch", config.batch);
    config.lr = spec_default<double>(spec, "lr", config.lr);
    config.optimizer = spec_default<std::string>(spec, "optimizer", config.optimizer);
    config.weight_decay = spec_default<double>(spec, "weight_decay", config.weight_decay);
    config.momentum = spec_default<double>(spec, "momentum", config.momentum);
    config.lr_schedule = spec_default<std::string>(spec, "lr_schedule", config.lr_schedule);
    config.seed = spec_default<uint64_t>(spec, "seed", config.seed);
    config.data = options.data.empty() ? "mnist" : options.data;
    config.train_limit = options.train_limit;
    config.test_limit = options.test_limit;
  }
  const bool resuming = resumed.has_value();
  if (options.qat_bits != 0) {
    if (resuming && spec.qat_bits != options.qat_bits)
      fail("train: --qat cannot change when resuming ({} trains with qat bits {})",
           options.resume_dir, spec.qat_bits);
    spec = with_qat(spec, options.qat_bits);
  }
  if (options.binarize_all && options.binarize.empty())
    fail("train: --binarize-all needs --binarize weights|xnor|ternary");
  if (!options.binarize.empty()) {
    if (resuming && (spec.binarize != options.binarize || spec.binarize_all != options.binarize_all))
      fail("train: --binarize cannot change when resuming ({} trains with binarize '{}'{})",
           options.resume_dir, spec.binarize, spec.binarize_all ? " on all layers" : "");
    spec = with_binarize(spec, options.binarize, options.binarize_all);
  }
  if (!resuming || !options.data.empty()) {
    if (!options.data.empty()) config.data = options.data;
  }
  if (options.batch) config.batch = *options.batch;
  if (options.lr) config.lr = *options.lr;
  if (options.optimizer) config.optimizer = *options.optimizer;
  if (options.weight_decay) config.weight_decay = *options.weight_decay;
  if (options.momentum) config.momentum = *options.momentum;
  if (options.lr_schedule) config.lr_schedule = *options.lr_schedule;
  if (options.seed) config.seed = *options.seed;
  if (options.lr_scaling) config.lr_scaling = *options.lr_scaling;
  check_lr_scaling(config.lr_scaling);
  if (!options.augment.empty()) config.augment = parse_augmentation(options.augment);
  if (!resuming && options.epochs) config.epochs = *options.epochs;
  if (resuming && options.train_limit) config.train_limit = options.train_limit;
  if (resuming && options.test_limit) config.test_limit = options.test_limit;
  check_optimizer_kind(config.optimizer);
  check_lr_schedule(config.lr_schedule);
  if (config.batch <= 0) fail("train: --batch must be positive, got {}", config.batch);
  if (config.epochs < 0) fail("train: --epochs must be non-negative, got {}", config.epochs);
  if (!(config.lr > 0.0) || !std::isfinite(config.lr))
    fail("train: --lr must be a positive number, got {}", config.lr);
  const std::string out_dir = resuming ? options.resume_dir : options.out_dir;
  if (!resuming && !options.overwrite && std::filesystem::exists(checkpoint_path(out_dir)))
    fail("train: {} already holds a run (its checkpoint {}); continue it with --resume {}, or "
         "replace it with --overwrite",
         out_dir, checkpoint_path(out_dir), out_dir);

  // Model parallelism: a spec placed on an MPI job's devices trains as one model, each process
  // running its devices' part on the same batches (no replicas, no shards).
  if (comm && !spec.job.empty()) {
    if (async)
      fail("train: {} places its layers on /job:{}, whose processes train one model; drop "
           "--data-parallel async",
           spec.origin, spec.job);
    job = std::exchange(comm, nullptr);
    world = shards = 1;
    shard = 0;
  }

  // The devices, and the default device, checked with the other flags before the data loads. A
  // job's processes place the graph alike, each as task 0 does: a device named without its task
  // (`/cpu:1`, the default device) is task 0's on every process.
  const int cpu_devices = options.cpu_devices > 0 ? options.cpu_devices : default_cpu_devices();
  const DeviceSet devices =
      job ? DeviceSet(cpu_devices, spec.job, job->size(), 0) : DeviceSet(cpu_devices);
  devices.resolve(DeviceName::parse(options.device, "--device"), "--device");
  if (comm && !(options.bucket_mb > 0.0 && std::isfinite(options.bucket_mb)))
    fail("train: --bucket-mb must be a positive number, got {}", options.bucket_mb);
  const GradCompression compression = parse_grad_compression(options.grad_compression);
  const Distillation* distillation = options.distillation.get();
  const int64_t micro_batches = options.micro_batches;
  if (micro_batches < 1) fail("train: --micro-batches must be 1 or more, got {}", micro_batches);
  if (micro_batches > 1) {
    if (distillation)
      fail("train: --micro-batches {} is not supported with distillation; drop it",
           micro_batches);
    if (comm)
      fail("train: --micro-batches {} pipelines a model placed over devices; data-parallel "
           "replicas (mpirun without /job: devices in the spec) do not take it, drop it",
           micro_batches);
    if (config.batch % micro_batches != 0)
      fail("train: --micro-batches {} must divide the batch {} (equal micro-batches give the "
           "whole batch's mean gradient)",
           micro_batches, config.batch);
  }

  // Data.
  DataSplit split = options.data_split ? *options.data_split : load_dataset(config.data);
  Dataset train_data = limited(split.train, config.train_limit);
  Dataset test_data = limited(split.test, config.test_limit);
  const Shape example = {train_data.images.dim(1), train_data.images.dim(2), train_data.images.dim(3)};
  if (example != spec.input)
    fail("{}: model input is {} but {} examples are {}", spec.origin, shape_str(spec.input),
         config.data, shape_str(example));
  if (train_data.size() < config.batch)
    fail("train: batch {} is larger than the {} training examples", config.batch, train_data.size());

  // Graph, session, variables.
  TrainingGraph t = micro_batches == 1
                        ? build_training_graph(spec, config.batch, distillation)
                        : build_training_graph(spec, config.batch / micro_batches);
  if (micro_batches > 1) {
    if (!t.model.moving_averages.empty())
      fail("train: --micro-batches {}: {} keeps batch statistics ('{}': batch norm or learned "
           "activation ranges), which micro-batches would compute over {} examples instead of "
           "the batch's {}; use --micro-batches 1",
           micro_batches, spec.origin, t.model.moving_averages[0].variable,
           config.batch / micro_batches, config.batch);
    t = micro_batched(std::move(t), micro_batches);
  }
  std::optional<TeacherOutputs> teacher;
  if (distillation)
    teacher.emplace(*distillation, train_data, /*cache=*/!config.augment.any(), config.batch,
                    message);
  {
    PlacementOptions placement{.default_device = options.device,
                               .soft = !options.strict_placement,
                               .colocate = {},
                               .device_threads = options.device_threads};
    // Each variable stays with its gradient (and so with the optimizer's update of it).
    for (size_t i = 0; i < t.model.parameters.size(); ++i)
      placement.colocate.emplace_back(t.model.graph.node(t.grads[i].node).name,
                                      t.model.parameters[i].name);
    const PlacementReport report = place(t.model.graph, devices, placement);
    if (callbacks.on_placement && rank == 0) callbacks.on_placement(t.model.graph, report);
  }
  auto store = std::make_shared<VariableStore>();
  // The parameters this process updates: all, or in a job those on its own devices.
  std::vector<size_t> owned;
  std::vector<int> owners;
  std::vector<Output> fetched_where_computed;
  std::optional<ProcessLinks> links;
  for (size_t i = 0; i < t.model.parameters.size(); ++i) {
    const std::string& device = t.model.graph.node(t.model.parameters[i].output.node).device;
    owners.push_back(job ? DeviceName::parse(device, "train").task : 0);
    if (owners.back() == rank || !job) owned.push_back(i);
    fetched_where_computed.push_back(t.grads[i]);
  }
  for (const MovingAverage& m : t.model.moving_averages)
    fetched_where_computed.push_back(m.batch_value);
  if (job) links.emplace(*job);
  // Dropout masks come from one generator, as on one device: the process whose device draws
  // them holds its true state (with draws on several, every process reseeds them alike).
  int rng_owner = 0;
  for (const Node& n : t.model.graph.nodes())
    if (job && n.op == op_names::kDropout) {
      rng_owner = DeviceName::parse(n.device, "train").task;
      break;
    }
  const PrecisionChoice precision = choose_precision(options.precision, "--precision");
  Session session(t.model.graph,
                  SessionOptions{.threads = options.threads,
                                 .kernel_impl = options.kernel_impl,
                                 // Each replica draws its own dropout masks.
                                 .seed = config.seed + 1 + 1000003ull * static_cast<uint64_t>(comm ? rank : 0),
                                 .precision = precision.precision,
                                 .device_threads = options.device_threads,
                                 .processes = links ? &*links : nullptr,
                                 .local_fetches = job ? fetched_where_computed
                                                      : std::vector<Output>{}},
                  store);
  if (precision.precision != Precision::fp32)
    message(fmt::format("precision {} ({})", precision_name(precision.precision),
                        precision.reason));
  // One-bit's decoded gradients carry a chunk's mean magnitude for every float: Adam's second
  // moment comes from the ranks' own gradients instead (GradientBuckets shares it).
  const bool shared_second_moment = comm && !async && config.optimizer == "adam" &&
                                    compression.kind == GradCompression::Kind::onebit;
  Optimizer optimizer(OptimizerConfig{.kind = config.optimizer,
                                      .momentum = config.momentum,
                                      .weight_decay = config.weight_decay,
                                      .second_moment_from_outside = shared_second_moment});
  // A server reads no data; it follows the step count of shard 0.
  ShardedBatches batches(train_data, config.batch, config.seed, serving ? 0 : shard, shards,
                         config.augment);
  const int64_t batches_per_epoch = batches.steps_per_epoch();
  int64_t epoch = 0, start_batch = 0, start_offset = 0, step = 0;
  double resumed_loss_sum = 0.0, resumed_seconds = 0.0;
  int64_t resumed_correct = 0, resumed_seen = 0;
  std::vector<EpochReport> history;
  if (resuming) {
    resumed->restore_variables(*store, t.model);
    optimizer.restore(resumed->optimizer_state());
    const json& resumed_meta = resumed->metadata();
    const json& pos = resumed_meta.at("position");
    epoch = pos.at("epoch");
    start_batch = pos.at("batch");
    // Examples the job had consumed in the epoch (older runs: whole single-process batches).
    start_offset = pos.value("images", start_batch * config.batch);
    step = pos.at("step");
    if (rank == 0 || job) restore_rng(session.rng(), resumed_meta.at("rng").get<std::string>());
    const json& stats = resumed_meta.at("epoch_stats");
    resumed_loss_sum = stats.at("loss_sum");
    resumed_correct = stats.at("correct");
    resumed_seen = stats.at("seen");
    resumed_seconds = stats.at("seconds");
    for (const json& r : resumed_meta.at("history"))
      history.push_back(EpochReport{r.at("epoch"), r.at("epochs"), r.at("step"), r.at("loss"),
                                    r.at("train_accuracy"), r.at("test_accuracy"),
                                    r.at("test_count"), r.at("images_per_sec"),
                                    r.at("epoch_seconds"), r.at("peak_rss_mb"),
                                    r.at("current_rss_mb"), r.at("lr"),
                                    r.value("world_size", int64_t{1}),
                                    r.value("global_batch", config.batch),
                                    r.value("comm_seconds", 0.0), r.value("comm_bytes", int64_t{0}),
                                    r.value("comm_bytes_per_step", 0.0),
                                    r.value("overlap_fraction", 0.0),
                                    r.value("parameter_servers", int64_t{0}),
                                    r.value("workers", int64_t{0}),
                                    r.value("staleness_max", int64_t{0}),
                                    r.value("staleness_mean", 0.0),
                                    r.value("precision", std::string("fp32")),
                                    r.value("precision_reason", std::string()),
                                    r.value("micro_batches", int64_t{1})});
    if (options.epochs) config.epochs = epoch + *options.epochs;
    const int64_t saved_world = pos.value("world_size", int64_t{1});
    if (saved_world != shards || start_offset % batches.global_batch() != 0)
      message(fmt::format("resuming {} at epoch {}, image {}/{} (step {}; saved by {} rank(s), "
                          "now {} x batch {})",
                          out_dir, epoch + 1, start_offset, train_data.size(), step, saved_world,
                          shards, config.batch));
    else
      message(fmt::format("resuming {} at epoch {}, batch {}/{} (step {})", out_dir, epoch + 1,
                          start_batch, batches_per_epoch, step));
  } else if (initial) {
    initial->restore_variables(*store, t.model, /*initialize_missing_state=*/true);
    if (rank == 0) std::filesystem::create_directories(out_dir);
  } else {
    std::mt19937_64 init_rng(config.seed);
    for (const Parameter& p : t.model.parameters) {
      Tensor value(DType::f32, t.model.graph.type(p.output).shape);
      initialize(value, p.init, p.fan_in, p.fan_out, init_rng);
      store->set(p.name, value);
    }
    for (const auto& [name, init] : t.model.state) {
      Tensor value(DType::f32, t.model.graph.node(t.model.graph.id_of(name)).outputs[0].shape);
      initialize(value, init, 1, 1, init_rng);
      store->set(name, value);
    }
    if (rank == 0) std::filesystem::create_directories(out_dir);
  }
  if (comm) broadcast_variables(*comm, *store);
  const double lr_factor = lr_scale_factor(config.lr_scaling, shards);
  LrSchedule schedule{config.lr_schedule, config.lr * lr_factor, config.epochs * batches_per_epoch};

  const size_t num_params = t.model.parameters.size();
  std::vector<std::string> parameter_names, statistics_names;
  std::vector<Shape> shapes;
  for (const Parameter& p : t.model.parameters) {
    parameter_names.push_back(p.name);
    shapes.push_back(t.model.graph.type(p.output).shape);
  }
  std::vector<Shape> statistics_shapes;
  std::vector<int> statistics_owners;
  for (const MovingAverage& m : t.model.moving_averages) {
    statistics_names.push_back(m.variable);
    const Node& n = t.model.graph.node(t.model.graph.id_of(m.variable));
    statistics_shapes.push_back(n.outputs[0].shape);
    statistics_owners.push_back(job ? DeviceName::parse(n.device, "train").task : 0);
  }

  // Checkpointing.
  double epoch_loss_sum = 0.0, epoch_seconds_before = 0.0;
  int64_t epoch_correct = 0, epoch_seen = 0;
  std::optional<GradientBuckets> buckets;  // sync data parallelism (below)
  auto save = [&](int64_t at_epoch, int64_t at_batch, int64_t at_offset) {
    // Compression's residuals are each rank's own: rank 0 gathers them (every rank is here).
    std::map<std::string, Tensor> residuals;
    if (buckets) residuals = gather_residuals(*comm, *buckets, parameter_names);
    // A job's processes each updated their own parameters: rank 0 gathers them.
    if (job) {
      share_rng(*job, session.rng(), rng_owner);
      share_parameters(*job, parameter_names, shapes, owners, *store, &optimizer);
      share_parameters(*job, statistics_names, statistics_shapes, statistics_owners, *store,
                       nullptr);
    }
    if (rank != 0) return;
    const bool with_residuals = !residuals.empty();
    Checkpoint ckpt;
    ckpt.tensors = std::move(residuals);
    for (const auto& [name, value] : store->all()) ckpt.tensors[kVariablePrefix + name] = value;
    for (const auto& [name, value] : optimizer.state()) ckpt.tensors[kOptimizerPrefix + name] = value;
    json history_json = json::array();
    for (const EpochReport& r : history) history_json.push_back(report_json(r));
    json meta = {{"format", "slimflow-run"},
                 {"model_origin", spec.origin},
                 {"model_spec", spec.text},
                 {"options", config.to_json()},
                 {"position",
                  {{"epoch", at_epoch},
                   {"batch", at_batch},
                   {"step", step},
                   {"images", at_offset},
                   {"world_size", shards}}},
                 {"rng", rng_state(session.rng())},
                 {"epoch_stats",
                  {{"loss_sum", epoch_loss_sum},
                   {"correct", epoch_correct},
                   {"seen", epoch_seen},
                   {"seconds", epoch_seconds_before}}},
                 {"history", history_json}};
    if (distillation) meta["distill"] = distillation->description;
    if (with_residuals)
      meta["compression"] = {{"scheme", compression.name()}, {"ranks", world}};
    ckpt.metadata_json = meta.dump();
    save_checkpoint(checkpoint_path(out_dir), ckpt);
  };

  std::vector<Output> fetches = {t.loss, t.step_probs};
  for (const Output& g : t.grads) fetches.push_back(g);
  for (const MovingAverage& m : t.model.moving_averages) fetches.push_back(m.batch_value);

  // Data parallelism: gradients are averaged in buckets while the backward pass runs.
  FetchReady on_fetch_ready;
  if (comm && !async) {
    buckets.emplace(*comm, shapes, options.bucket_mb, compression,
                    shared_second_moment ? std::optional<double>(optimizer.config().beta2)
                                         : std::nullopt);
    on_fetch_ready = [&](size_t index, const Tensor& value) {
      if (index >= 2 && index < 2 + num_params) buckets->ready(index - 2, value);
    };
  }
  // Compression residuals continue where they were with the same ranks and scheme; otherwise
  // the shards of the residuals no longer match the ranks' data, so they are dropped.
  bool own_second_moments_restored = false;
  if (resuming && resumed->metadata().contains("compression")) {
    std::string saved_scheme;
    int64_t saved_ranks = 0;
    resumed->read_metadata([&](const json& meta) {
      saved_scheme = meta.at("compression").at("scheme").get<std::string>();
      saved_ranks = meta.at("compression").at("ranks").get<int64_t>();
    });
    if (buckets && saved_scheme == compression.name() && saved_ranks == world) {
      const auto& tensors = resumed->checkpoint().tensors;
      buckets->restore_residuals(residuals_of_rank(tensors, rank, parameter_names, shapes));
      // One-bit's ranks go on with their own second moments, as if never stopped.
      if (shared_second_moment) {
        std::vector<Tensor> own = own_second_moments_of_rank(tensors, rank, parameter_names, shapes);
        own_second_moments_restored = !own.empty();
        if (own_second_moments_restored)
          buckets->restore_second_moments(std::move(own), optimizer.steps(), false);
      }
    } else {
      message(fmt::format("note: the {} compression residuals of the {} rank(s) that saved {} "
                          "are dropped (this job: {} rank(s), compression {}); error feedback "
                          "starts from zero{}",
                          saved_scheme, saved_ranks, out_dir, world,
                          buckets ? compression.name() : "none",
                          shared_second_moment ? ", and each rank's second moment from the last "
                                                 "one the ranks shared"
                                               : ""));
    }
  }
  // Otherwise a resumed one-bit run's ranks start from the second moment its optimizer holds
  // (the last one shared, or its own before compression), shared at the first step.
  if (shared_second_moment && resuming && !own_second_moments_restored) {
    const std::map<std::string, Tensor> state = optimizer.state();
    std::vector<Tensor> v;
    for (size_t i = 0; i < parameter_names.size(); ++i) {
      auto it = state.find("adam/v/" + parameter_names[i]);
      if (it != state.end()) {
        v.push_back(it->second);
      } else {  // resumed before its first step
        v.emplace_back(DType::f32, shapes[i]);
        std::memset(v.back().raw(), 0, v.back().bytes());
      }
    }
    buckets->restore_second_moments(std::move(v), optimizer.steps(), true);
  }
  // One optimizer step on these parameters (all of them, or a parameter server's shard).
  auto apply_update = [&](int64_t at_step, const std::vector<size_t>& parameters,
                          const std::vector<Tensor>& grads) {
    const double step_lr = schedule.at(at_step);
    optimizer.begin_step();
    for (size_t k = 0; k < parameters.size(); ++k) {
      const Parameter& p = t.model.parameters[parameters[k]];
      optimizer.apply(p.name, store->get(p.name), grads[k], step_lr, p.decay);
      if (p.clip_to_unit) clip_to_unit(store->get(p.name));
    }
  };
  // Async data parallelism: this rank serves a shard of the parameters or trains as a worker.
  std::optional<ParameterShards> ps_shards;
  std::optional<ParameterServer> server;
  std::optional<AsyncWorker> worker;
  if (async) {
    ps_shards.emplace(rank, world, static_cast<int>(servers), parameter_names, shapes);
    if (serving)
      server.emplace(*comm, *ps_shards, *store, apply_update, step);
    else
      worker.emplace(*comm, *ps_shards, *store, max_staleness, step);
  }
  // At a sync point every rank holds the servers' whole state (rank 0 then writes it).
  auto async_sync_point = [&] {
    if (!async) return;
    if (worker) worker->drain();
    gather_parameters(*comm, *ps_shards, *store, optimizer);
  };
  std::vector<Tensor> local_grads(num_params);
  // Sums this epoch's loss, accuracy and image counts over the ranks (every rank calls it at
  // the same step).
  auto global_epoch_stats = [&](double& loss_sum, int64_t& correct, int64_t& seen, int64_t& fresh) {
    if (!comm) return;
    Tensor counts(DType::i64, {3});
    counts.data<int64_t>()[0] = correct;
    counts.data<int64_t>()[1] = seen;
    counts.data<int64_t>()[2] = fresh;
    Tensor loss(DType::f32, {1});
    loss.data<float>()[0] = static_cast<float>(loss_sum);
    comm->allreduce(counts, ReduceOp::sum, "epoch statistics");
    comm->allreduce(loss, ReduceOp::sum, "epoch loss");
    correct = counts.data<int64_t>()[0];
    seen = counts.data<int64_t>()[1];
    fresh = counts.data<int64_t>()[2];
    loss_sum = static_cast<double>(loss.data<float>()[0]);
  };
  // The epoch's async figures over the workers: staleness, the longest wait, bytes per worker.
  auto global_async_stats = [&](CommStats& comm_stats, int64_t& staleness_max,
                                double& staleness_mean) {
    const AsyncStats mine = worker ? worker->take_stats() : AsyncStats{};
    Tensor sums(DType::i64, {2});
    sums.data<int64_t>()[0] = mine.staleness_sum;
    sums.data<int64_t>()[1] = mine.steps;
    Tensor most(DType::i64, {3});
    most.data<int64_t>()[0] = mine.staleness_max;
    most.data<int64_t>()[1] = mine.bytes;
    most.data<int64_t>()[2] = std::llround(mine.wait_seconds * 1e6);
    comm->allreduce(sums, ReduceOp::sum, "staleness");
    comm->allreduce(most, ReduceOp::max, "staleness");
    staleness_mean = static_cast<double>(sums.data<int64_t>()[0]) /
                     static_cast<double>(std::max<int64_t>(sums.data<int64_t>()[1], 1));
    staleness_max = most.data<int64_t>()[0];
    comm_stats.bytes = most.data<int64_t>()[1];
    comm_stats.steps = sums.data<int64_t>()[1] / std::max(shards, 1);
    comm_stats.comm_seconds = static_cast<double>(most.data<int64_t>()[2]) * 1e-6;
    comm_stats.exposed_seconds = comm_stats.comm_seconds;  // waiting hides nothing
  };
  Tensor images, labels;
  using Clock = std::chrono::steady_clock;

  for (; epoch < config.epochs; ++epoch, start_batch = 0, start_offset = 0) {
    const bool continuing = resuming && start_offset > 0;
    // A resumed epoch's statistics so far are the job's (rank 0 saved them): rank 0 carries them.
    const bool carries = continuing && rank == 0;
    epoch_loss_sum = carries ? resumed_loss_sum : 0.0;
    epoch_correct = carries ? resumed_correct : 0;
    epoch_seen = carries ? resumed_seen : 0;
    epoch_seconds_before = continuing ? resumed_seconds : 0.0;
    resumed_seen = 0;
    const int64_t seen_before = epoch_seen;
    batches.seek(epoch, start_offset);
    const auto epoch_start = Clock::now();
    auto elapsed = [&] {
      return std::chrono::duration<double>(Clock::now() - epoch_start).count();
    };
    double lr = schedule.at(step);
    // A mid-epoch checkpoint after the step just done (never after the epoch's last step).
    auto mid_epoch_checkpoint = [&](int64_t at_offset) {
      if (!(options.checkpoint_every > 0 && step % options.checkpoint_every == 0 &&
            at_offset + batches.global_batch() <= train_data.size()))
        return;
      async_sync_point();
      double saved_seconds = epoch_seconds_before, saved_loss = epoch_loss_sum;
      int64_t saved_correct = epoch_correct, saved_seen = epoch_seen, fresh = 0;
      epoch_seconds_before += elapsed();
      global_epoch_stats(epoch_loss_sum, epoch_correct, epoch_seen, fresh);
      save(epoch, at_offset / batches.global_batch(), at_offset);
      epoch_seconds_before = saved_seconds;
      epoch_loss_sum = saved_loss;
      epoch_correct = saved_correct;
      epoch_seen = saved_seen;
    };
    if (server) {
      // Serve this epoch's steps (as many as shard 0 takes), stopping at each checkpoint.
      const int64_t first_step = step;
      const int64_t epoch_steps = (train_data.size() - start_offset) / batches.global_batch();
      StepReport reported;
      server->take_reports();
      auto on_update = [&](int64_t applied) {
        lr = schedule.at(applied - 1);
        if (!callbacks.on_progress) return;
        const StepReport r = server->take_reports();
        reported.loss_sum += r.loss_sum;
        reported.correct += r.correct;
        reported.examples += r.examples;
        const double seen = static_cast<double>(std::max<int64_t>(reported.examples, 1));
        const int64_t done = start_offset / batches.global_batch() + applied - first_step;
        const double rate = static_cast<double>((applied - first_step) * batches.global_batch()) /
                            std::max(elapsed(), 1e-9);
        const int64_t left = (batches_per_epoch - done) * batches.global_batch();
        callbacks.on_progress(Progress{epoch + 1, config.epochs, done, batches_per_epoch,
                                       reported.loss_sum / seen,
                                       static_cast<double>(reported.correct) / seen, rate,
                                       static_cast<double>(left) / std::max(rate, 1e-9)});
      };
      while (step < first_step + epoch_steps) {
        int64_t target = first_step + epoch_steps;
        if (options.checkpoint_every > 0)
          target = std::min(target, (step / options.checkpoint_every + 1) * options.checkpoint_every);
        server->serve_until(target, on_update);
        step = target;
        mid_epoch_checkpoint(start_offset + (step - first_step) * batches.global_batch());
      }
    }
    while (!server && batches.next(images, labels)) {
      lr = schedule.at(step);
      if (worker) worker->await_weights(step);
      Feeds feeds;
      if (t.micro_batch_inputs.empty()) {
        feeds = {{t.model.input, images}, {t.labels, labels}};
      } else {
        const int64_t size = config.batch / micro_batches;
        for (size_t k = 0; k < t.micro_batch_inputs.size(); ++k) {
          const int64_t begin = static_cast<int64_t>(k) * size;
          feeds.emplace_back(t.micro_batch_inputs[k].first, batch_rows(images, begin, begin + size));
          feeds.emplace_back(t.micro_batch_inputs[k].second, batch_rows(labels, begin, begin + size));
        }
      }
      if (teacher)
        feeds.emplace_back(t.teacher_logits, teacher->for_batch(images, batches.batch_indices()));
      std::vector<Tensor> out = session.run(feeds, fetches, true, on_fetch_ready);
      const float loss = *out[0].data<float>();
      if (!std::isfinite(loss)) {
        const std::string where = std::filesystem::exists(checkpoint_path(out_dir))
                                      ? "the last checkpoint is " + checkpoint_path(out_dir)
                                      : "no checkpoint was written yet";
        fail("step {}: loss is {} (epoch {}, batch {}); lower --lr (now {:g}) or check the data; "
             "{}",
             step + 1, loss, epoch + 1, batches.step_in_epoch(), lr, where);
      }
      const int64_t correct = count_correct(out[1], labels);
      for (size_t i = 0; i < num_params; ++i) local_grads[i] = out[2 + i];
      std::vector<Tensor> owned_grads;
      for (size_t i : owned) owned_grads.push_back(local_grads[i]);
      if (worker) {
        worker->push(local_grads,
                     StepReport{static_cast<double>(loss) * static_cast<double>(labels.numel()),
                                correct, labels.numel()});
      } else if (buckets) {
        const std::vector<Tensor>& averaged = buckets->finish(local_grads, step + 1);
        if (const std::vector<Tensor>* v = buckets->shared_second_moments())
          for (size_t k : owned)
            optimizer.set_second_moment(t.model.parameters[k].name, (*v)[k],
                                        buckets->second_moment_steps());
        apply_update(step, owned, averaged);
      } else {
        apply_update(step, owned, owned_grads);
      }
      for (size_t i = 0; i < t.model.moving_averages.size(); ++i) {
        const MovingAverage& m = t.model.moving_averages[i];
        const Tensor& observed = out[2 + num_params + i];
        if (!observed.defined()) continue;  // another process's statistic
        float* avg = store->get(m.variable).data<float>();
        const float* obs = observed.data<float>();
        const float mom = static_cast<float>(m.momentum);
        // NaN: nothing observed yet (learned activation ranges), so the first batch is taken.
        for (int64_t k = 0; k < observed.numel(); ++k)
          avg[k] = std::isnan(avg[k]) ? obs[k] : mom * avg[k] + (1 - mom) * obs[k];
      }
      ++step;
      if (comm && !async && options.check_replicas_every > 0 &&
          step % options.check_replicas_every == 0)
        check_replicas(*comm, *store, parameter_names, step);
      if (callbacks.after_step)
        callbacks.after_step(StepState{step, config.epochs * batches_per_epoch, *store, optimizer});
      if (options.profile && step == 5) session.set_profiling(true);  // after warm-up
      epoch_loss_sum += static_cast<double>(loss) * static_cast<double>(labels.numel());
      epoch_correct += correct;
      epoch_seen += labels.numel();
      if (callbacks.on_progress) {
        double seconds = elapsed();
        // Rank 0's own rate, times the ranks that run in step with it.
        double rate = static_cast<double>(world) * static_cast<double>(epoch_seen - seen_before) /
                      std::max(seconds, 1e-9);
        int64_t left = (batches_per_epoch - batches.step_in_epoch()) * batches.global_batch();
        callbacks.on_progress(Progress{epoch + 1, config.epochs, batches.step_in_epoch(),
                                       batches_per_epoch,
                                       epoch_loss_sum / static_cast<double>(epoch_seen),
                                       static_cast<double>(epoch_correct) / static_cast<double>(epoch_seen),
                                       rate, static_cast<double>(left) / std::max(rate, 1e-9)});
      }
      mid_epoch_checkpoint(batches.offset());
    }
    const double train_seconds = elapsed();
    if (options.profile && callbacks.on_profile) callbacks.on_profile(session.profile());
    async_sync_point();
    int64_t fresh_seen = epoch_seen - seen_before;
    global_epoch_stats(epoch_loss_sum, epoch_correct, epoch_seen, fresh_seen);
    // The moving statistics are the training ranks' (a server's never moved).
    if (comm) average_variables(*comm, *store, statistics_names, /*contribute=*/!serving, shards);
    EvalResult eval = comm ? evaluate_sharded(session, t, test_data, *comm)
                           : evaluate(session, t, test_data);
    CommStats comm_stats = buckets ? buckets->take_stats() : CommStats{};
    int64_t staleness_max = 0;
    double staleness_mean = 0.0;
    if (async) global_async_stats(comm_stats, staleness_max, staleness_mean);
    EpochReport report{epoch + 1,
                       config.epochs,
                       step,
                       epoch_loss_sum / static_cast<double>(std::max<int64_t>(epoch_seen, 1)),
                       static_cast<double>(epoch_correct) / static_cast<double>(std::max<int64_t>(epoch_seen, 1)),
                       eval.accuracy,
                       eval.count,
                       static_cast<double>(fresh_seen) / std::max(train_seconds, 1e-9),
                       epoch_seconds_before + train_seconds,
                       peak_rss_mb(),
                       current_rss_mb(),
                       lr,
                       world,
                       batches.global_batch(),
                       comm_stats.comm_seconds,
                       comm_stats.bytes,
                       comm_stats.steps > 0 ? static_cast<double>(comm_stats.bytes) /
                                                  static_cast<double>(comm_stats.steps)
                                            : 0.0,
                       comm_stats.overlap_fraction(),
                       servers,
                       async ? shards : 0,
                       staleness_max,
                       staleness_mean,
                       precision_name(precision.precision),
                       precision.reason,
                       micro_batches};
    history.push_back(report);
    epoch_loss_sum = 0.0;
    epoch_correct = epoch_seen = 0;
    epoch_seconds_before = 0.0;
    save(epoch + 1, 0, 0);
    if (callbacks.on_epoch) callbacks.on_epoch(report);
  }
  return history;
}

struct RunEvaluator::Impl {
  ModelSpec spec;
  TrainingGraph graph;
  std::shared_ptr<VariableStore> store = std::make_shared<VariableStore>();
  std::unique_ptr<Session> session;
  Dataset test;
};

RunEvaluator::RunEvaluator(const std::string& run_dir, const std::string& data, int64_t limit,
                           int threads)
    : impl_(std::make_unique<Impl>()) {
  const TrainingRun run(run_dir);
  impl_->spec = run.spec();
  impl_->graph = build_training_graph(impl_->spec, kEvalBatch);
  run.restore_variables(*impl_->store, impl_->graph.model);
  impl_->session = std::make_unique<Session>(impl_->graph.model.graph,
                                             SessionOptions{.threads = threads}, impl_->store);
  impl_->test = limited(load_test_split(data), limit);
  const Dataset& test = impl_->test;
  const Shape example = {test.images.dim(1), test.images.dim(2), test.images.dim(3)};
  if (example != impl_->spec.input)
    fail("{}: model input is {} but {} examples are {}", run_dir, shape_str(impl_->spec.input),
         data, shape_str(example));
}

RunEvaluator::~RunEvaluator() = default;
EvalResult RunEvaluator::evaluate() { return sf::evaluate(*impl_->session, impl_->graph, impl_->test); }
VariableStore& RunEvaluator::variables() { return *impl_->store; }
const Model& RunEvaluator::model() const { return impl_->graph.model; }
const ModelSpec& RunEvaluator::spec() const { return impl_->spec; }

EvalResult evaluate_run(const std::string& run_dir, const std::string& data, int64_t limit,
                        int threads) {
  return RunEvaluator(run_dir, data, limit, threads).evaluate();
}

}  // namespace sf
