#include "train/trainer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <sstream>
#include <utility>

#include "comm/communicator.h"
#include "comm/process_links.h"
#include "core/error.h"
#include "ops/op_names.h"
#include "placement/device_name.h"
#include "runtime/precision.h"
#include "runtime/process_stats.h"
#include "runtime/session.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/grad_compression.h"
#include "train/job_roles.h"
#include "train/optimizer.h"
#include "train/parameter_server.h"
#include "train/run_config.h"
#include "train/sharded_batches.h"
#include "train/training_graph.h"
#include "train/training_run.h"

namespace sf {

using json = nlohmann::json;

namespace {

void clip_to_unit(Tensor& weights) {
  float* w = weights.data<float>();
  for (int64_t i = 0; i < weights.numel(); ++i) w[i] = std::clamp(w[i], -1.0f, 1.0f);
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

// The position and running statistics a resumed run continues from.
struct ResumePoint {
  int64_t epoch = 0, batch = 0, offset = 0, step = 0;
  double loss_sum = 0.0, seconds = 0.0;
  int64_t correct = 0, seen = 0;
};

// The training of one process: set up by the constructor (flags, data, graph, session,
// variables, the exchange with the other ranks), then run() epoch by epoch.
class TrainingLoop {
 public:
  TrainingLoop(const TrainOptions& options, const TrainCallbacks& callbacks);
  TrainingLoop(const TrainingLoop&) = delete;
  TrainingLoop& operator=(const TrainingLoop&) = delete;

  std::vector<EpochReport> run();

 private:
  void message(const std::string& text) const {
    if (callbacks_.on_message) callbacks_.on_message(text);
  }
  DeviceSet check_step_flags();
  void load_data();
  void build_graph(const DeviceSet& devices);
  void create_session();
  void restore_or_initialize();
  void prepare_exchange();
  void exchange_dense_factors();
  void restore_compression_state();

  void serve_epoch();
  void train_step(const Tensor& images, const Tensor& labels);
  void finish_epoch(double train_seconds, int64_t fresh_seen);
  double elapsed() const {
    return std::chrono::duration<double>(Clock::now() - epoch_start_).count();
  }
  void apply_update(int64_t at_step, const std::vector<size_t>& parameters,
                    const std::vector<Tensor>& grads);
  void share_optimizer_slots();
  void save(int64_t at_epoch, int64_t at_batch, int64_t at_offset);
  void mid_epoch_checkpoint(int64_t at_offset);
  void async_sync_point();
  void global_epoch_stats(double& loss_sum, int64_t& correct, int64_t& seen, int64_t& fresh);
  void global_async_stats(CommStats& comm_stats, int64_t& staleness_max, double& staleness_mean);

  using Clock = std::chrono::steady_clock;

  const TrainOptions& options_;
  TrainCallbacks callbacks_;
  JobRoles roles_;
  ResolvedRun run_;
  const RunConfig& config_ = run_.config;
  GradCompression compression_;
  const Distillation* distillation_ = options_.distillation.get();
  Dataset train_data_, test_data_;

  TrainingGraph t_;
  std::optional<TeacherOutputs> teacher_;
  std::shared_ptr<VariableStore> store_ = std::make_shared<VariableStore>();
  // The parameters this process updates: all, or in a job those on its own devices.
  std::vector<size_t> owned_;
  std::vector<int> owners_;
  std::optional<ProcessLinks> links_;
  int rng_owner_ = 0;
  PrecisionChoice precision_;
  std::optional<Session> session_;
  bool shared_second_moment_ = false;
  std::optional<Optimizer> optimizer_;
  std::optional<ShardedBatches> batches_;
  int64_t batches_per_epoch_ = 0;

  ResumePoint resume_;
  int64_t epoch_ = 0, step_ = 0;
  std::vector<EpochReport> history_;
  std::optional<LrSchedule> schedule_;

  std::vector<std::string> parameter_names_, statistics_names_;
  std::vector<Shape> shapes_, statistics_shapes_;
  std::vector<int> statistics_owners_;
  std::vector<Output> fetches_;
  std::optional<GradientBuckets> buckets_;  // sync data parallelism
  // Parameters whose gradients cross as factors, in the order their dy are fetched.
  std::vector<size_t> factored_;
  FetchReady on_fetch_ready_;
  std::optional<ParameterShards> ps_shards_;
  std::optional<ParameterServer> server_;
  std::optional<AsyncWorker> worker_;

  // The epoch under way.
  double epoch_loss_sum_ = 0.0, epoch_seconds_before_ = 0.0;
  int64_t epoch_correct_ = 0, epoch_seen_ = 0, seen_before_ = 0, start_offset_ = 0;
  Clock::time_point epoch_start_;
  double lr_ = 0.0;
};

TrainingLoop::TrainingLoop(const TrainOptions& options, const TrainCallbacks& callbacks)
    : options_(options),
      callbacks_(callbacks),
      roles_(job_roles(options, static_cast<bool>(callbacks.after_step))),
      run_(resolve_run(options)) {
  // Rank 0 speaks for the job; every rank keeps after_step (pruning masks its own replica).
  if (roles_.rank != 0) callbacks_ = TrainCallbacks{callbacks.after_step, {}, {}, {}, {}};
  place_on_job(roles_, run_.spec);
  const DeviceSet devices = check_step_flags();
  load_data();
  build_graph(devices);
  create_session();
  restore_or_initialize();
  prepare_exchange();
}

// The devices, and the default device, checked with the other flags before the data loads. A
// job's processes place the graph alike, each as task 0 does: a device named without its task
// (`/cpu:1`, the default device) is task 0's on every process.
DeviceSet TrainingLoop::check_step_flags() {
  const int cpu_devices = options_.cpu_devices > 0 ? options_.cpu_devices : default_cpu_devices();
  DeviceSet devices = roles_.job ? DeviceSet(cpu_devices, run_.spec.job, roles_.job->size(), 0)
                                 : DeviceSet(cpu_devices);
  devices.resolve(DeviceName::parse(options_.device, "--device"), "--device");
  if (roles_.comm && !(options_.bucket_mb > 0.0 && std::isfinite(options_.bucket_mb)))
    fail("train: --bucket-mb must be a positive number, got {}", options_.bucket_mb);
  compression_ = parse_grad_compression(options_.grad_compression);
  const int64_t micro_batches = options_.micro_batches;
  if (micro_batches < 1) fail("train: --micro-batches must be 1 or more, got {}", micro_batches);
  if (micro_batches > 1) {
    if (distillation_)
      fail("train: --micro-batches {} is not supported with distillation; drop it",
           micro_batches);
    if (roles_.comm)
      fail("train: --micro-batches {} pipelines a model placed over devices; data-parallel "
           "replicas (mpirun without /job: devices in the spec) do not take it, drop it",
           micro_batches);
    if (config_.batch % micro_batches != 0)
      fail("train: --micro-batches {} must divide the batch {} (equal micro-batches give the "
           "whole batch's mean gradient)",
           micro_batches, config_.batch);
  }
  return devices;
}

void TrainingLoop::load_data() {
  DataSplit split = options_.data_split ? *options_.data_split : load_dataset(config_.data);
  train_data_ = limited(split.train, config_.train_limit);
  test_data_ = limited(split.test, config_.test_limit);
  const Shape example = {train_data_.images.dim(1), train_data_.images.dim(2),
                         train_data_.images.dim(3)};
  if (example != run_.spec.input)
    fail("{}: model input is {} but {} examples are {}", run_.spec.origin,
         shape_str(run_.spec.input), config_.data, shape_str(example));
  if (train_data_.size() < config_.batch)
    fail("train: batch {} is larger than the {} training examples", config_.batch,
         train_data_.size());
}

// The training graph (micro-batched if asked), the teacher's outputs, and the placement.
void TrainingLoop::build_graph(const DeviceSet& devices) {
  const int64_t micro_batches = options_.micro_batches;
  t_ = micro_batches == 1 ? build_training_graph(run_.spec, config_.batch, distillation_)
                          : build_training_graph(run_.spec, config_.batch / micro_batches);
  if (micro_batches > 1) {
    if (!t_.model.moving_averages.empty())
      fail("train: --micro-batches {}: {} keeps batch statistics ('{}': batch norm or learned "
           "activation ranges), which micro-batches would compute over {} examples instead of "
           "the batch's {}; use --micro-batches 1",
           micro_batches, run_.spec.origin, t_.model.moving_averages[0].variable,
           config_.batch / micro_batches, config_.batch);
    t_ = micro_batched(std::move(t_), micro_batches);
  }
  if (distillation_)
    teacher_.emplace(*distillation_, train_data_, /*cache=*/!config_.augment.any(), config_.batch,
                     [this](const std::string& text) { message(text); });
  PlacementOptions placement{.default_device = options_.device,
                             .soft = !options_.strict_placement,
                             .colocate = {},
                             .device_threads = options_.device_threads};
  // Each variable stays with its gradient (and so with the optimizer's update of it).
  for (size_t i = 0; i < t_.model.parameters.size(); ++i)
    placement.colocate.emplace_back(t_.model.graph.node(t_.grads[i].node).name,
                                    t_.model.parameters[i].name);
  const PlacementReport report = place(t_.model.graph, devices, placement);
  if (callbacks_.on_placement && roles_.rank == 0) callbacks_.on_placement(t_.model.graph, report);
}

void TrainingLoop::create_session() {
  const Communicator* job = roles_.job;
  std::vector<Output> fetched_where_computed;
  for (size_t i = 0; i < t_.model.parameters.size(); ++i) {
    const std::string& device = t_.model.graph.node(t_.model.parameters[i].output.node).device;
    owners_.push_back(job ? DeviceName::parse(device, "train").task : 0);
    if (owners_.back() == roles_.rank || !job) owned_.push_back(i);
    fetched_where_computed.push_back(t_.grads[i]);
  }
  for (const MovingAverage& m : t_.model.moving_averages)
    fetched_where_computed.push_back(m.batch_value);
  if (job) links_.emplace(*roles_.job);
  // Dropout masks come from one generator, as on one device: the process whose device draws
  // them holds its true state (with draws on several, every process reseeds them alike).
  for (const Node& n : t_.model.graph.nodes())
    if (job && n.op == op_names::kDropout) {
      rng_owner_ = DeviceName::parse(n.device, "train").task;
      break;
    }
  precision_ = choose_precision(options_.precision, "--precision");
  const uint64_t replica = roles_.comm ? static_cast<uint64_t>(roles_.rank) : 0;
  session_.emplace(t_.model.graph,
                   SessionOptions{.threads = options_.threads,
                                  .kernel_impl = options_.kernel_impl,
                                  // Each replica draws its own dropout masks.
                                  .seed = config_.seed + 1 + 1000003ull * replica,
                                  .precision = precision_.precision,
                                  .device_threads = options_.device_threads,
                                  .processes = links_ ? &*links_ : nullptr,
                                  .local_fetches = job ? fetched_where_computed
                                                       : std::vector<Output>{}},
                   store_);
  if (precision_.precision != Precision::fp32)
    message(fmt::format("precision {} ({})", precision_name(precision_.precision),
                        precision_.reason));
  // One-bit's decoded gradients carry a chunk's mean magnitude for every float: Adam's second
  // moment comes from the ranks' own gradients instead (GradientBuckets shares it).
  shared_second_moment_ = roles_.comm && !roles_.async && config_.optimizer == "adam" &&
                          compression_.kind == GradCompression::Kind::onebit;
  optimizer_.emplace(OptimizerConfig{.kind = config_.optimizer,
                                     .momentum = config_.momentum,
                                     .weight_decay = config_.weight_decay,
                                     .second_moment_from_outside = shared_second_moment_});
  // A server reads no data; it follows the step count of shard 0.
  batches_.emplace(train_data_, config_.batch, config_.seed, roles_.serving ? 0 : roles_.shard,
                   roles_.shards, config_.augment);
  batches_per_epoch_ = batches_->steps_per_epoch();
}

// The variables, optimizer state, position and history of the run resumed or started from;
// new variables for a new run. Every replica starts from rank 0's.
void TrainingLoop::restore_or_initialize() {
  RunConfig& config = run_.config;
  if (run_.resumed) {
    TrainingRun& resumed = *run_.resumed;
    resumed.restore_variables(*store_, t_.model);
    optimizer_->restore(resumed.optimizer_state());
    const json& resumed_meta = resumed.metadata();
    const json& pos = resumed_meta.at("position");
    resume_.epoch = pos.at("epoch");
    resume_.batch = pos.at("batch");
    // Examples the job had consumed in the epoch (older runs: whole single-process batches).
    resume_.offset = pos.value("images", resume_.batch * config.batch);
    resume_.step = pos.at("step");
    if (roles_.rank == 0 || roles_.job)
      restore_rng(session_->rng(), resumed_meta.at("rng").get<std::string>());
    const json& stats = resumed_meta.at("epoch_stats");
    resume_.loss_sum = stats.at("loss_sum");
    resume_.correct = stats.at("correct");
    resume_.seen = stats.at("seen");
    resume_.seconds = stats.at("seconds");
    for (const json& r : resumed_meta.at("history"))
      history_.push_back(epoch_report_from_json(r, config.batch));
    if (options_.epochs) config.epochs = resume_.epoch + *options_.epochs;
    const int64_t saved_world = pos.value("world_size", int64_t{1});
    if (saved_world != roles_.shards || resume_.offset % batches_->global_batch() != 0)
      message(fmt::format("resuming {} at epoch {}, image {}/{} (step {}; saved by {} rank(s), "
                          "now {} x batch {})",
                          run_.out_dir, resume_.epoch + 1, resume_.offset, train_data_.size(),
                          resume_.step, saved_world, roles_.shards, config.batch));
    else
      message(fmt::format("resuming {} at epoch {}, batch {}/{} (step {})", run_.out_dir,
                          resume_.epoch + 1, resume_.batch, batches_per_epoch_, resume_.step));
  } else if (run_.initial) {
    run_.initial->restore_variables(*store_, t_.model, /*initialize_missing_state=*/true);
    if (roles_.rank == 0) std::filesystem::create_directories(run_.out_dir);
  } else {
    std::mt19937_64 init_rng(config.seed);
    for (const Parameter& p : t_.model.parameters) {
      Tensor value(DType::f32, t_.model.graph.type(p.output).shape);
      initialize(value, p.init, p.fan_in, p.fan_out, init_rng);
      store_->set(p.name, value);
    }
    for (const auto& [name, init] : t_.model.state) {
      Tensor value(DType::f32, t_.model.graph.node(t_.model.graph.id_of(name)).outputs[0].shape);
      initialize(value, init, 1, 1, init_rng);
      store_->set(name, value);
    }
    if (roles_.rank == 0) std::filesystem::create_directories(run_.out_dir);
  }
  epoch_ = resume_.epoch;
  step_ = resume_.step;
  if (roles_.comm) broadcast_variables(*roles_.comm, *store_);
  const double lr_factor = lr_scale_factor(config.lr_scaling, roles_.shards);
  schedule_.emplace(LrSchedule{config.lr_schedule, config.lr * lr_factor,
                               config.epochs * batches_per_epoch_});
}

// A dense layer's weight gradient, MatMul(x, dy) with x transposed, crosses between the ranks as
// x and dy when those are at most half as many floats as the gradient over all ranks (Deep-MNIST's
// fc1: 0.27 M floats per rank against 3.2 M), in fp32 (a bf16 run's products round their
// inputs). The step then fetches x in the gradient's place and dy after the statistics, and the
// session no longer computes the local gradient: each rank forms its share from every rank's
// factors instead (GradientBuckets::exchange_as_factors).
void TrainingLoop::exchange_dense_factors() {
  if (options_.factored_gradients != "auto" && options_.factored_gradients != "off")
    fail("train: --factored-gradients must be auto or off, got '{}'",
         options_.factored_gradients);
  if (options_.factored_gradients == "off" || precision_.precision != Precision::fp32) return;
  const Graph& g = t_.model.graph;
  for (size_t i = 0; i < t_.grads.size(); ++i) {
    const Node& n = g.node(t_.grads[i].node);
    if (n.op != op_names::kMatMul || !n.attrs.has("transpose_a") ||
        !n.attrs.get_bool("transpose_a") ||
        (n.attrs.has("transpose_b") && n.attrs.get_bool("transpose_b")))
      continue;
    const TensorType x = g.type(n.inputs[0]), dy = g.type(n.inputs[1]);
    if (x.dtype != DType::f32 || dy.dtype != DType::f32 || x.shape.size() != 2 ||
        dy.shape.size() != 2 || shapes_[i] != Shape{x.shape[1], dy.shape[1]})
      continue;
    const int64_t factors = roles_.world * x.shape[0] * (x.shape[1] + dy.shape[1]);
    if (2 * factors > num_elements(shapes_[i])) continue;
    buckets_->exchange_as_factors(i);
    fetches_[2 + i] = n.inputs[0];
    factored_.push_back(i);
  }
  for (size_t i : factored_) fetches_.push_back(g.node(t_.grads[i].node).inputs[1]);
}

// What a step fetches, and how gradients and statistics reach the other ranks: buckets
// averaged while the backward pass runs (sync), or parameter servers and workers (async).
void TrainingLoop::prepare_exchange() {
  for (const Parameter& p : t_.model.parameters) {
    parameter_names_.push_back(p.name);
    shapes_.push_back(t_.model.graph.type(p.output).shape);
  }
  for (const MovingAverage& m : t_.model.moving_averages) {
    statistics_names_.push_back(m.variable);
    const Node& n = t_.model.graph.node(t_.model.graph.id_of(m.variable));
    statistics_shapes_.push_back(n.outputs[0].shape);
    statistics_owners_.push_back(roles_.job ? DeviceName::parse(n.device, "train").task : 0);
  }
  fetches_ = {t_.loss, t_.step_probs};
  for (const Output& g : t_.grads) fetches_.push_back(g);
  for (const MovingAverage& m : t_.model.moving_averages) fetches_.push_back(m.batch_value);

  if (roles_.comm && !roles_.async) {
    buckets_.emplace(*roles_.comm, shapes_, options_.bucket_mb, compression_,
                     shared_second_moment_ ? std::optional<double>(optimizer_->config().beta2)
                                           : std::nullopt);
    if (compression_.kind == GradCompression::Kind::none && !roles_.job &&
        owned_.size() == t_.model.parameters.size()) {
      buckets_->update_in_shards();
      exchange_dense_factors();
    }
    const size_t num_params = t_.model.parameters.size();
    const size_t first_dy = 2 + num_params + t_.model.moving_averages.size();
    on_fetch_ready_ = [this, num_params, first_dy](size_t index, const Tensor& value) {
      if (index >= first_dy) {
        buckets_->factor_ready(factored_[index - first_dy], 1, value);
      } else if (index >= 2 && index < 2 + num_params) {
        const size_t i = index - 2;
        if (std::find(factored_.begin(), factored_.end(), i) != factored_.end())
          buckets_->factor_ready(i, 0, value);
        else
          buckets_->ready(i, value);
      }
    };
  }
  restore_compression_state();
  if (roles_.async) {
    Communicator& comm = *roles_.comm;
    ps_shards_.emplace(roles_.rank, roles_.world, static_cast<int>(roles_.servers),
                       parameter_names_, shapes_);
    if (roles_.serving)
      server_.emplace(comm, *ps_shards_, *store_,
                      [this](int64_t at_step, const std::vector<size_t>& parameters,
                             const std::vector<Tensor>& grads) {
                        apply_update(at_step, parameters, grads);
                      },
                      step_);
    else
      worker_.emplace(comm, *ps_shards_, *store_, roles_.max_staleness, step_);
  }
}

// Compression residuals continue where they were with the same ranks and scheme; otherwise
// the shards of the residuals no longer match the ranks' data, so they are dropped.
void TrainingLoop::restore_compression_state() {
  if (!run_.resumed) return;
  TrainingRun& resumed = *run_.resumed;
  bool own_second_moments_restored = false;
  if (resumed.metadata().contains("compression")) {
    std::string saved_scheme;
    int64_t saved_ranks = 0;
    resumed.read_metadata([&](const json& meta) {
      saved_scheme = meta.at("compression").at("scheme").get<std::string>();
      saved_ranks = meta.at("compression").at("ranks").get<int64_t>();
    });
    if (buckets_ && saved_scheme == compression_.name() && saved_ranks == roles_.world) {
      const auto& tensors = resumed.checkpoint().tensors;
      buckets_->restore_residuals(
          residuals_of_rank(tensors, roles_.rank, parameter_names_, shapes_));
      // One-bit's ranks go on with their own second moments, as if never stopped.
      if (shared_second_moment_) {
        std::vector<Tensor> own =
            own_second_moments_of_rank(tensors, roles_.rank, parameter_names_, shapes_);
        own_second_moments_restored = !own.empty();
        if (own_second_moments_restored)
          buckets_->restore_second_moments(std::move(own), optimizer_->steps(), false);
      }
    } else {
      message(fmt::format("note: the {} compression residuals of the {} rank(s) that saved {} "
                          "are dropped (this job: {} rank(s), compression {}); error feedback "
                          "starts from zero{}",
                          saved_scheme, saved_ranks, run_.out_dir, roles_.world,
                          buckets_ ? compression_.name() : "none",
                          shared_second_moment_ ? ", and each rank's second moment from the "
                                                  "last one the ranks shared"
                                                : ""));
    }
  }
  // Otherwise a resumed one-bit run's ranks start from the second moment its optimizer holds
  // (the last one shared, or its own before compression), shared at the first step.
  if (shared_second_moment_ && !own_second_moments_restored) {
    const std::map<std::string, Tensor> state = optimizer_->state();
    std::vector<Tensor> v;
    for (size_t i = 0; i < parameter_names_.size(); ++i) {
      auto it = state.find("adam/v/" + parameter_names_[i]);
      if (it != state.end()) {
        v.push_back(it->second);
      } else {  // resumed before its first step
        v.emplace_back(DType::f32, shapes_[i]);
        std::memset(v.back().raw(), 0, v.back().bytes());
      }
    }
    buckets_->restore_second_moments(std::move(v), optimizer_->steps(), true);
  }
}

// One optimizer step on these parameters (all of them, or a parameter server's shard).
void TrainingLoop::apply_update(int64_t at_step, const std::vector<size_t>& parameters,
                                const std::vector<Tensor>& grads) {
  const double step_lr = schedule_->at(at_step);
  optimizer_->begin_step();
  // Sharded data parallelism: each rank updates its own parts (where they are empty too, so that
  // the optimizer's slots exist on every rank) and passes them on to the others.
  const bool sharded = buckets_ && buckets_->updates_in_shards();
  std::vector<Tensor> updated(sharded ? t_.model.parameters.size() : 0);
  for (size_t k = 0; k < parameters.size(); ++k) {
    const Parameter& p = t_.model.parameters[parameters[k]];
    Tensor& value = store_->get(p.name);
    // The next step's bf16 products read the weights rounded; the update writes that copy as it
    // goes instead of that step reading them all again. Not where more than the update changes
    // them before then: clipping, pruning's masks (after_step), an asynchronous server's pull,
    // the other ranks' parts of a sharded update.
    uint16_t* rounded = precision_.precision == Precision::bf16 && !p.clip_to_unit &&
                                !callbacks_.after_step && !roles_.async && !sharded && session_
                            ? session_->bf16_for_next_run(value)
                            : nullptr;
    ElementRange part;
    if (sharded) {
      const auto [begin, end] = buckets_->owned_parts()[parameters[k]];
      part = {begin, end};
      updated[parameters[k]] = value;
    }
    optimizer_->apply(p.name, value, grads[k], step_lr, p.decay, rounded, part);
    // Sharded, only this rank's part is clipped as it should be, and only that part passes on.
    if (p.clip_to_unit) clip_to_unit(value);
  }
  if (sharded) buckets_->share_parts(updated, "parameters", /*per_step=*/true);
}

// With sharded updates each rank's optimizer slots are current only in its own parts: the
// ranks share them before a checkpoint.
void TrainingLoop::share_optimizer_slots() {
  if (!buckets_ || !buckets_->updates_in_shards() || buckets_->owned_parts().empty()) return;
  for (const std::string& slot : optimizer_->slot_names()) {
    std::vector<Tensor> tensors;
    for (const Parameter& p : t_.model.parameters)
      tensors.push_back(optimizer_->slot_value(slot, p.name));
    buckets_->share_parts(tensors, "optimizer slot " + slot, /*per_step=*/false);
  }
}

void TrainingLoop::save(int64_t at_epoch, int64_t at_batch, int64_t at_offset) {
  share_optimizer_slots();
  // Compression's residuals are each rank's own: rank 0 gathers them (every rank is here).
  std::map<std::string, Tensor> residuals;
  if (buckets_) residuals = gather_residuals(*roles_.comm, *buckets_, parameter_names_);
  // A job's processes each updated their own parameters: rank 0 gathers them.
  if (roles_.job) {
    share_rng(*roles_.job, session_->rng(), rng_owner_);
    share_parameters(*roles_.job, parameter_names_, shapes_, owners_, *store_, &*optimizer_);
    share_parameters(*roles_.job, statistics_names_, statistics_shapes_, statistics_owners_,
                     *store_, nullptr);
  }
  if (roles_.rank != 0) return;
  const bool with_residuals = !residuals.empty();
  Checkpoint ckpt;
  ckpt.tensors = std::move(residuals);
  for (const auto& [name, value] : store_->all()) ckpt.tensors[kVariablePrefix + name] = value;
  for (const auto& [name, value] : optimizer_->state())
    ckpt.tensors[kOptimizerPrefix + name] = value;
  json history_json = json::array();
  for (const EpochReport& r : history_) history_json.push_back(epoch_report_to_json(r));
  json meta = {{"format", "slimflow-run"},
               {"model_origin", run_.spec.origin},
               {"model_spec", run_.spec.text},
               {"options", config_.to_json()},
               {"position",
                {{"epoch", at_epoch},
                 {"batch", at_batch},
                 {"step", step_},
                 {"images", at_offset},
                 {"world_size", roles_.shards}}},
               {"rng", rng_state(session_->rng())},
               {"epoch_stats",
                {{"loss_sum", epoch_loss_sum_},
                 {"correct", epoch_correct_},
                 {"seen", epoch_seen_},
                 {"seconds", epoch_seconds_before_}}},
               {"history", history_json}};
  if (distillation_) meta["distill"] = distillation_->description;
  if (with_residuals)
    meta["compression"] = {{"scheme", compression_.name()}, {"ranks", roles_.world}};
  ckpt.metadata_json = meta.dump();
  save_checkpoint(checkpoint_path(run_.out_dir), ckpt);
}

// A mid-epoch checkpoint after the step just done (never after the epoch's last step).
void TrainingLoop::mid_epoch_checkpoint(int64_t at_offset) {
  if (!(options_.checkpoint_every > 0 && step_ % options_.checkpoint_every == 0 &&
        at_offset + batches_->global_batch() <= train_data_.size()))
    return;
  async_sync_point();
  double saved_seconds = epoch_seconds_before_, saved_loss = epoch_loss_sum_;
  int64_t saved_correct = epoch_correct_, saved_seen = epoch_seen_, fresh = 0;
  epoch_seconds_before_ += elapsed();
  global_epoch_stats(epoch_loss_sum_, epoch_correct_, epoch_seen_, fresh);
  save(epoch_, at_offset / batches_->global_batch(), at_offset);
  epoch_seconds_before_ = saved_seconds;
  epoch_loss_sum_ = saved_loss;
  epoch_correct_ = saved_correct;
  epoch_seen_ = saved_seen;
}

// At a sync point every rank holds the servers' whole state (rank 0 then writes it).
void TrainingLoop::async_sync_point() {
  if (!roles_.async) return;
  if (worker_) worker_->drain();
  gather_parameters(*roles_.comm, *ps_shards_, *store_, *optimizer_);
}

// Sums this epoch's loss, accuracy and image counts over the ranks (every rank calls it at the
// same step).
void TrainingLoop::global_epoch_stats(double& loss_sum, int64_t& correct, int64_t& seen,
                                      int64_t& fresh) {
  if (!roles_.comm) return;
  Communicator& comm = *roles_.comm;
  Tensor counts(DType::i64, {3});
  counts.data<int64_t>()[0] = correct;
  counts.data<int64_t>()[1] = seen;
  counts.data<int64_t>()[2] = fresh;
  Tensor loss(DType::f32, {1});
  loss.data<float>()[0] = static_cast<float>(loss_sum);
  comm.allreduce(counts, ReduceOp::sum, "epoch statistics");
  comm.allreduce(loss, ReduceOp::sum, "epoch loss");
  correct = counts.data<int64_t>()[0];
  seen = counts.data<int64_t>()[1];
  fresh = counts.data<int64_t>()[2];
  loss_sum = static_cast<double>(loss.data<float>()[0]);
}

// The epoch's async figures over the workers: staleness, the longest wait, bytes per worker.
void TrainingLoop::global_async_stats(CommStats& comm_stats, int64_t& staleness_max,
                                      double& staleness_mean) {
  Communicator& comm = *roles_.comm;
  const AsyncStats mine = worker_ ? worker_->take_stats() : AsyncStats{};
  Tensor sums(DType::i64, {2});
  sums.data<int64_t>()[0] = mine.staleness_sum;
  sums.data<int64_t>()[1] = mine.steps;
  Tensor most(DType::i64, {3});
  most.data<int64_t>()[0] = mine.staleness_max;
  most.data<int64_t>()[1] = mine.bytes;
  most.data<int64_t>()[2] = std::llround(mine.wait_seconds * 1e6);
  comm.allreduce(sums, ReduceOp::sum, "staleness");
  comm.allreduce(most, ReduceOp::max, "staleness");
  staleness_mean = static_cast<double>(sums.data<int64_t>()[0]) /
                   static_cast<double>(std::max<int64_t>(sums.data<int64_t>()[1], 1));
  staleness_max = most.data<int64_t>()[0];
  comm_stats.bytes = most.data<int64_t>()[1];
  comm_stats.steps = sums.data<int64_t>()[1] / std::max(roles_.shards, 1);
  comm_stats.comm_seconds = static_cast<double>(most.data<int64_t>()[2]) * 1e-6;
  comm_stats.exposed_seconds = comm_stats.comm_seconds;  // waiting hides nothing
}

std::vector<EpochReport> TrainingLoop::run() {
  Tensor images, labels;
  for (start_offset_ = resume_.offset; epoch_ < config_.epochs; ++epoch_, start_offset_ = 0) {
    const bool continuing = run_.resumed && start_offset_ > 0;
    // A resumed epoch's statistics so far are the job's (rank 0 saved them): rank 0 carries them.
    const bool carries = continuing && roles_.rank == 0;
    epoch_loss_sum_ = carries ? resume_.loss_sum : 0.0;
    epoch_correct_ = carries ? resume_.correct : 0;
    epoch_seen_ = carries ? resume_.seen : 0;
    epoch_seconds_before_ = continuing ? resume_.seconds : 0.0;
    resume_.seen = 0;
    seen_before_ = epoch_seen_;
    batches_->seek(epoch_, start_offset_);
    epoch_start_ = Clock::now();
    lr_ = schedule_->at(step_);
    if (server_) serve_epoch();
    while (!server_ && batches_->next(images, labels)) {
      train_step(images, labels);
      mid_epoch_checkpoint(batches_->offset());
    }
    const double train_seconds = elapsed();
    if (options_.profile && callbacks_.on_profile) callbacks_.on_profile(session_->profile());
    async_sync_point();
    int64_t fresh_seen = epoch_seen_ - seen_before_;
    global_epoch_stats(epoch_loss_sum_, epoch_correct_, epoch_seen_, fresh_seen);
    finish_epoch(train_seconds, fresh_seen);
  }
  return history_;
}

// A parameter server serves this epoch's steps (as many as shard 0 takes), stopping at each
// checkpoint.
void TrainingLoop::serve_epoch() {
  const int64_t global_batch = batches_->global_batch();
  const int64_t first_step = step_;
  const int64_t epoch_steps = (train_data_.size() - start_offset_) / global_batch;
  StepReport reported;
  server_->take_reports();
  auto on_update = [&](int64_t applied) {
    lr_ = schedule_->at(applied - 1);
    if (!callbacks_.on_progress) return;
    const StepReport r = server_->take_reports();
    reported.loss_sum += r.loss_sum;
    reported.correct += r.correct;
    reported.examples += r.examples;
    const double seen = static_cast<double>(std::max<int64_t>(reported.examples, 1));
    const int64_t done = start_offset_ / global_batch + applied - first_step;
    const double rate = static_cast<double>((applied - first_step) * global_batch) /
                        std::max(elapsed(), 1e-9);
    const int64_t left = (batches_per_epoch_ - done) * global_batch;
    callbacks_.on_progress(Progress{epoch_ + 1, config_.epochs, done, batches_per_epoch_,
                                    reported.loss_sum / seen,
                                    static_cast<double>(reported.correct) / seen, rate,
                                    static_cast<double>(left) / std::max(rate, 1e-9)});
  };
  while (step_ < first_step + epoch_steps) {
    int64_t target = first_step + epoch_steps;
    if (options_.checkpoint_every > 0)
      target = std::min(target, (step_ / options_.checkpoint_every + 1) * options_.checkpoint_every);
    server_->serve_until(target, on_update);
    step_ = target;
    mid_epoch_checkpoint(start_offset_ + (step_ - first_step) * global_batch);
  }
}

// One step of a worker, a sync replica or a single process: forward and backward, the
// gradients averaged or pushed, the update, the moving statistics, progress.
void TrainingLoop::train_step(const Tensor& images, const Tensor& labels) {
  const size_t num_params = t_.model.parameters.size();
  lr_ = schedule_->at(step_);
  if (worker_) worker_->await_weights(step_);
  Feeds feeds;
  if (t_.micro_batch_inputs.empty()) {
    feeds = {{t_.model.input, images}, {t_.labels, labels}};
  } else {
    // Copies, not views: a kernel may expect its input aligned as a new tensor is.
    const int64_t size = config_.batch / options_.micro_batches;
    for (size_t k = 0; k < t_.micro_batch_inputs.size(); ++k) {
      const int64_t begin = static_cast<int64_t>(k) * size;
      feeds.emplace_back(t_.micro_batch_inputs[k].first, images.rows(begin, begin + size).clone());
      feeds.emplace_back(t_.micro_batch_inputs[k].second, labels.rows(begin, begin + size).clone());
    }
  }
  if (teacher_)
    feeds.emplace_back(t_.teacher_logits, teacher_->for_batch(images, batches_->batch_indices()));
  std::vector<Tensor> out = session_->run(feeds, fetches_, true, on_fetch_ready_);
  const float loss = *out[0].data<float>();
  if (!std::isfinite(loss)) {
    const std::string checkpoint = checkpoint_path(run_.out_dir);
    const std::string where = std::filesystem::exists(checkpoint)
                                  ? "the last checkpoint is " + checkpoint
                                  : "no checkpoint was written yet";
    fail("step {}: loss is {} (epoch {}, batch {}); lower --lr (now {:g}) or check the data; {}",
         step_ + 1, loss, epoch_ + 1, batches_->step_in_epoch(), lr_, where);
  }
  const int64_t correct = count_correct(out[1], labels);
  std::vector<Tensor> local_grads(out.begin() + 2, out.begin() + 2 + static_cast<std::ptrdiff_t>(num_params));
  if (worker_) {
    worker_->push(local_grads,
                  StepReport{static_cast<double>(loss) * static_cast<double>(labels.numel()),
                             correct, labels.numel()});
  } else if (buckets_) {
    const std::vector<Tensor>& averaged = buckets_->finish(local_grads, step_ + 1);
    if (const std::vector<Tensor>* v = buckets_->shared_second_moments())
      for (size_t k : owned_)
        optimizer_->set_second_moment(t_.model.parameters[k].name, (*v)[k],
                                      buckets_->second_moment_steps());
    apply_update(step_, owned_, averaged);
  } else {
    std::vector<Tensor> owned_grads;
    for (size_t i : owned_) owned_grads.push_back(local_grads[i]);
    apply_update(step_, owned_, owned_grads);
  }
  for (size_t i = 0; i < t_.model.moving_averages.size(); ++i) {
    const MovingAverage& m = t_.model.moving_averages[i];
    const Tensor& observed = out[2 + num_params + i];
    if (!observed.defined()) continue;  // another process's statistic
    float* avg = store_->get(m.variable).data<float>();
    const float* obs = observed.data<float>();
    const float mom = static_cast<float>(m.momentum);
    // NaN: nothing observed yet (learned activation ranges), so the first batch is taken.
    for (int64_t k = 0; k < observed.numel(); ++k)
      avg[k] = std::isnan(avg[k]) ? obs[k] : mom * avg[k] + (1 - mom) * obs[k];
  }
  ++step_;
  if (roles_.comm && !roles_.async && options_.check_replicas_every > 0 &&
      step_ % options_.check_replicas_every == 0)
    check_replicas(*roles_.comm, *store_, parameter_names_, step_);
  if (callbacks_.after_step)
    callbacks_.after_step(
        StepState{step_, config_.epochs * batches_per_epoch_, *store_, *optimizer_});
  if (options_.profile && step_ == 5) session_->set_profiling(true);  // after warm-up
  epoch_loss_sum_ += static_cast<double>(loss) * static_cast<double>(labels.numel());
  epoch_correct_ += correct;
  epoch_seen_ += labels.numel();
  if (callbacks_.on_progress) {
    const double seconds = elapsed();
    // Rank 0's own rate, times the ranks that run in step with it.
    const double rate = static_cast<double>(roles_.world) *
                        static_cast<double>(epoch_seen_ - seen_before_) / std::max(seconds, 1e-9);
    const int64_t left =
        (batches_per_epoch_ - batches_->step_in_epoch()) * batches_->global_batch();
    const double seen = static_cast<double>(epoch_seen_);
    callbacks_.on_progress(Progress{epoch_ + 1, config_.epochs, batches_->step_in_epoch(),
                                    batches_per_epoch_, epoch_loss_sum_ / seen,
                                    static_cast<double>(epoch_correct_) / seen, rate,
                                    static_cast<double>(left) / std::max(rate, 1e-9)});
  }
}

// The epoch's end: statistics averaged, the test evaluation, the report, the checkpoint.
void TrainingLoop::finish_epoch(double train_seconds, int64_t fresh_seen) {
  // The moving statistics are the training ranks' (a server's never moved).
  if (roles_.comm)
    average_variables(*roles_.comm, *store_, statistics_names_, /*contribute=*/!roles_.serving,
                      roles_.shards);
  EvalResult eval = roles_.comm ? evaluate_sharded(*session_, t_, test_data_, *roles_.comm)
                                : evaluate(*session_, t_, test_data_);
  CommStats comm_stats = buckets_ ? buckets_->take_stats() : CommStats{};
  int64_t staleness_max = 0;
  double staleness_mean = 0.0;
  if (roles_.async) global_async_stats(comm_stats, staleness_max, staleness_mean);
  const double seen = static_cast<double>(std::max<int64_t>(epoch_seen_, 1));
  EpochReport report{epoch_ + 1,
                     config_.epochs,
                     step_,
                     epoch_loss_sum_ / seen,
                     static_cast<double>(epoch_correct_) / seen,
                     eval.accuracy,
                     eval.count,
                     static_cast<double>(fresh_seen) / std::max(train_seconds, 1e-9),
                     epoch_seconds_before_ + train_seconds,
                     peak_rss_mb(),
                     current_rss_mb(),
                     lr_,
                     roles_.world,
                     batches_->global_batch(),
                     comm_stats.comm_seconds,
                     comm_stats.bytes,
                     comm_stats.steps > 0 ? static_cast<double>(comm_stats.bytes) /
                                                static_cast<double>(comm_stats.steps)
                                          : 0.0,
                     comm_stats.overlap_fraction(),
                     roles_.servers,
                     roles_.async ? roles_.shards : 0,
                     staleness_max,
                     staleness_mean,
                     precision_name(precision_.precision),
                     precision_.reason,
                     options_.micro_batches,
                     static_cast<int64_t>(factored_.size())};
  history_.push_back(report);
  epoch_loss_sum_ = 0.0;
  epoch_correct_ = epoch_seen_ = 0;
  epoch_seconds_before_ = 0.0;
  save(epoch_ + 1, 0, 0);
  if (callbacks_.on_epoch) callbacks_.on_epoch(report);
}

}  // namespace

std::vector<EpochReport> train(const TrainOptions& options, const TrainCallbacks& callbacks) {
  TrainingLoop loop(options, callbacks);
  return loop.run();
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
