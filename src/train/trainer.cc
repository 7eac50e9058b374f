#include "train/trainer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "autodiff/gradients.h"
#include "core/error.h"
#include "ops/ops.h"
#include "runtime/process_stats.h"
#include "runtime/session.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"
#include "train/training_run.h"

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

  json to_json() const {
    return {{"epochs", epochs},       {"batch", batch},
            {"lr", lr},               {"optimizer", optimizer},
            {"weight_decay", weight_decay}, {"momentum", momentum},
            {"lr_schedule", lr_schedule}, {"seed", seed},
            {"data", data},           {"train_limit", train_limit},
            {"test_limit", test_limit}};
  }
};

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
  Output loss;
  Output probs;
  std::vector<Output> grads;
};

TrainingGraph build_training_graph(const ModelSpec& spec, int64_t batch) {
  TrainingGraph t{build_model(spec, batch), {}, {}, {}, {}};
  Graph& g = t.model.graph;
  t.labels = ops::placeholder(g, DType::i32, {batch}, "labels");
  t.loss = ops::softmax_cross_entropy(g, t.model.logits, t.labels, "loss");
  t.probs = Output{t.loss.node, 1};
  std::vector<Output> wrt;
  for (const Parameter& p : t.model.parameters) wrt.push_back(p.output);
  t.grads = gradients(g, t.loss, wrt);
  for (size_t i = 0; i < wrt.size(); ++i)
    if (!t.grads[i].valid())
      fail("{}: parameter '{}' does not affect the loss", spec.origin,
           t.model.parameters[i].name);
  return t;
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
    auto out = session.run({{t.model.input, images}, {t.labels, labels}}, {t.loss, t.probs}, false);
    loss_sum += static_cast<double>(*out[0].data<float>()) * static_cast<double>(labels.numel());
    correct += count_correct(out[1], labels);
    result.count += labels.numel();
  }
  result.accuracy = result.count ? static_cast<double>(correct) / static_cast<double>(result.count) : 0.0;
  result.loss = result.count ? loss_sum / static_cast<double>(result.count) : 0.0;
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

json report_json(const EpochReport& r) {
  return {{"epoch", r.epoch},
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
          {"lr", r.lr}};
}

}  // namespace

std::string epoch_report_json(const EpochReport& report) { return report_json(report).dump(); }

std::vector<EpochReport> train(const TrainOptions& options, const TrainCallbacks& callbacks) {
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
    resumed->read_metadata([&](const json& meta) {
      const json& o = meta.at("options");
      config.epochs = o.at("epochs");
      config.batch = o.at("batch");
      config.lr = o.at("lr");
      config.optimizer = o.at("optimizer");
      config.weight_decay = o.at("weight_decay");
      config.momentum = o.at("momentum");
      config.lr_schedule = o.at("lr_schedule");
      config.seed = o.at("seed");
      config.data = o.at("data");
      config.train_limit = o.at("train_limit");
      config.test_limit = o.at("test_limit");
    });
  } else if (!options.init_from.empty()) {
    if (options.out_dir.empty()) fail("train: --out DIR is required");
    initial.emplace(options.init_from);
    spec = initial->spec();
    initial->read_metadata([&](const json& meta) {
      const json& o = meta.at("options");
      config.batch = o.at("batch");
      config.lr = o.at("lr");
      config.optimizer = o.at("optimizer");
      config.weight_decay = o.at("weight_decay");
      config.momentum = o.at("momentum");
      config.lr_schedule = o.at("lr_schedule");
      config.seed = o.at("seed");
      config.data = o.at("data");
    });
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
    config.data = options.data;
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

  // Data.
  DataSplit split = load_dataset(config.data);
  Dataset train_data = limited(split.train, config.train_limit);
  Dataset test_data = limited(split.test, config.test_limit);
  const Shape example = {train_data.images.dim(1), train_data.images.dim(2), train_data.images.dim(3)};
  if (example != spec.input)
    fail("{}: model input is {} but {} examples are {}", spec.origin, shape_str(spec.input),
         config.data, shape_str(example));
  if (train_data.size() < config.batch)
    fail("train: batch {} is larger than the {} training examples", config.batch, train_data.size());

  // Graph, session, variables.
  TrainingGraph t = build_training_graph(spec, config.batch);
  auto store = std::make_shared<VariableStore>();
  Session session(t.model.graph,
                  SessionOptions{.threads = options.threads,
                                 .kernel_impl = options.kernel_impl,
                                 .seed = config.seed + 1},
                  store);
  Optimizer optimizer(OptimizerConfig{.kind = config.optimizer,
                                      .momentum = config.momentum,
                                      .weight_decay = config.weight_decay});
  BatchIterator batches(train_data, BatchOptions{.batch_size = config.batch,
                                                 .seed = config.seed,
                                                 .shuffle = true,
                                                 .drop_last = true});
  const int64_t batches_per_epoch = batches.batches_per_epoch();
  int64_t epoch = 0, start_batch = 0, step = 0;
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
    step = pos.at("step");
    restore_rng(session.rng(), resumed_meta.at("rng").get<std::string>());
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
                                    r.at("current_rss_mb"), r.at("lr")});
    if (options.epochs) config.epochs = epoch + *options.epochs;
    message(fmt::format("resuming {} at epoch {}, batch {}/{} (step {})", out_dir, epoch + 1,
                        start_batch, batches_per_epoch, step));
  } else if (initial) {
    initial->restore_variables(*store, t.model, /*initialize_missing_state=*/true);
    std::filesystem::create_directories(out_dir);
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
    std::filesystem::create_directories(out_dir);
  }
  LrSchedule schedule{config.lr_schedule, config.lr, config.epochs * batches_per_epoch};

  // Checkpointing.
  double epoch_loss_sum = 0.0, epoch_seconds_before = 0.0;
  int64_t epoch_correct = 0, epoch_seen = 0;
  auto save = [&](int64_t at_epoch, int64_t at_batch) {
    Checkpoint ckpt;
    for (const auto& [name, value] : store->all()) ckpt.tensors[kVariablePrefix + name] = value;
    for (const auto& [name, value] : optimizer.state()) ckpt.tensors[kOptimizerPrefix + name] = value;
    json history_json = json::array();
    for (const EpochReport& r : history) history_json.push_back(report_json(r));
    json meta = {{"format", "slimflow-run"},
                 {"model_origin", spec.origin},
                 {"model_spec", spec.text},
                 {"options", config.to_json()},
                 {"position", {{"epoch", at_epoch}, {"batch", at_batch}, {"step", step}}},
                 {"rng", rng_state(session.rng())},
                 {"epoch_stats",
                  {{"loss_sum", epoch_loss_sum},
                   {"correct", epoch_correct},
                   {"seen", epoch_seen},
                   {"seconds", epoch_seconds_before}}},
                 {"history", history_json}};
    ckpt.metadata_json = meta.dump();
    save_checkpoint(checkpoint_path(out_dir), ckpt);
  };

  std::vector<Output> fetches = {t.loss, t.probs};
  for (const Output& g : t.grads) fetches.push_back(g);
  for (const MovingAverage& m : t.model.moving_averages) fetches.push_back(m.batch_value);
  Tensor images, labels;
  using Clock = std::chrono::steady_clock;

  for (; epoch < config.epochs; ++epoch, start_batch = 0) {
    const bool continuing = resuming && start_batch > 0;
    epoch_loss_sum = continuing ? resumed_loss_sum : 0.0;
    epoch_correct = continuing ? resumed_correct : 0;
    epoch_seen = continuing ? resumed_seen : 0;
    epoch_seconds_before = continuing ? resumed_seconds : 0.0;
    resumed_seen = 0;
    const int64_t seen_before = epoch_seen;
    batches.seek(epoch, start_batch);
    const auto epoch_start = Clock::now();
    auto elapsed = [&] {
      return std::chrono::duration<double>(Clock::now() - epoch_start).count();
    };
    double lr = schedule.at(step);
    while (batches.next(images, labels)) {
      lr = schedule.at(step);
      std::vector<Tensor> out =
          session.run({{t.model.input, images}, {t.labels, labels}}, fetches, true);
      const float loss = *out[0].data<float>();
      if (!std::isfinite(loss))
        fail("step {}: loss is {} (epoch {}, batch {}); lower --lr (now {:g}) or check the data; "
             "the last checkpoint is {}",
             step + 1, loss, epoch + 1, batches.batch_index(), lr, checkpoint_path(out_dir));
      optimizer.begin_step();
      for (size_t i = 0; i < t.model.parameters.size(); ++i) {
        const Parameter& p = t.model.parameters[i];
        optimizer.apply(p.name, store->get(p.name), out[2 + i], lr, p.decay);
        if (p.clip_to_unit) clip_to_unit(store->get(p.name));
      }
      for (size_t i = 0; i < t.model.moving_averages.size(); ++i) {
        const MovingAverage& m = t.model.moving_averages[i];
        const Tensor& observed = out[2 + t.model.parameters.size() + i];
        float* avg = store->get(m.variable).data<float>();
        const float* obs = observed.data<float>();
        const float mom = static_cast<float>(m.momentum);
        // NaN: nothing observed yet (learned activation ranges), so the first batch is taken.
        for (int64_t k = 0; k < observed.numel(); ++k)
          avg[k] = std::isnan(avg[k]) ? obs[k] : mom * avg[k] + (1 - mom) * obs[k];
      }
      ++step;
      if (callbacks.after_step)
        callbacks.after_step(StepState{step, config.epochs * batches_per_epoch, *store, optimizer});
      if (options.profile && step == 5) session.set_profiling(true);  // after warm-up
      epoch_loss_sum += static_cast<double>(loss) * static_cast<double>(labels.numel());
      epoch_correct += count_correct(out[1], labels);
      epoch_seen += labels.numel();
      if (callbacks.on_progress) {
        double seconds = elapsed();
        double rate = static_cast<double>(epoch_seen - seen_before) / std::max(seconds, 1e-9);
        int64_t left = (batches_per_epoch - batches.batch_index()) * config.batch;
        callbacks.on_progress(Progress{epoch + 1, config.epochs, batches.batch_index(),
                                       batches_per_epoch,
                                       epoch_loss_sum / static_cast<double>(epoch_seen),
                                       static_cast<double>(epoch_correct) / static_cast<double>(epoch_seen),
                                       rate, static_cast<double>(left) / std::max(rate, 1e-9)});
      }
      if (options.checkpoint_every > 0 && step % options.checkpoint_every == 0 &&
          batches.batch_index() < batches_per_epoch) {
        double saved = epoch_seconds_before;
        epoch_seconds_before += elapsed();
        save(epoch, batches.batch_index());
        epoch_seconds_before = saved;
      }
    }
    const double train_seconds = elapsed();
    if (options.profile && callbacks.on_profile) callbacks.on_profile(session.profile());
    EvalResult eval = evaluate(session, t, test_data);
    EpochReport report{epoch + 1,
                       config.epochs,
                       step,
                       epoch_loss_sum / static_cast<double>(std::max<int64_t>(epoch_seen, 1)),
                       static_cast<double>(epoch_correct) / static_cast<double>(std::max<int64_t>(epoch_seen, 1)),
                       eval.accuracy,
                       eval.count,
                       static_cast<double>(epoch_seen - seen_before) / std::max(train_seconds, 1e-9),
                       epoch_seconds_before + train_seconds,
                       peak_rss_mb(),
                       current_rss_mb(),
                       lr};
    history.push_back(report);
    epoch_loss_sum = 0.0;
    epoch_correct = epoch_seen = 0;
    epoch_seconds_before = 0.0;
    save(epoch + 1, 0);
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
  DataSplit split = load_dataset(data);
  impl_->test = limited(split.test, limit);
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
