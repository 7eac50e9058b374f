// The C API (include/slimflow/slimflow.h) over ModelFile and Session, or, for a file that
// `import` kept symbolic, over the ShapeSpecializer that plans it per input shape. Every entry
// point catches all exceptions: C callers get -1 or NULL and the message from sf_last_error().
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/limits.h"
#include "cpu/thread_count.h"
#include "onnx/shape_specializer.h"
#include "runtime/model_to_run.h"
#include "runtime/session.h"
#include "slimflow/slimflow.h"

struct sf_model {
  std::string path;
  // Inputs as the file declares them (-1 marks a dimension a symbolic model leaves free), and
  // the output names.
  std::vector<sf::DeclaredInput> declared;
  std::vector<std::string> output_names;
  // A fixed graph and its session (which re-plans for another batch size) ...
  std::optional<sf::ModelToRun> fixed;
  std::unique_ptr<sf::Session> session;
  // ... or a symbolic model, planned per input shape.
  std::unique_ptr<sf::ShapeSpecializer> symbolic;
  std::vector<sf::Tensor> inputs;   // as last set; undefined until then
  std::vector<sf::Tensor> outputs;  // f32; empty until a run succeeds
};

namespace {

thread_local std::string last_error;
// -1: never set, so the host's own OpenMP setting is left alone.
std::atomic<int> requested_threads{-1};

void set_error(const std::string& message) { last_error = message; }

// Runs `body`, turning any exception into `on_error` and a message for sf_last_error().
template <typename R, typename Fn>
R guarded(R on_error, Fn&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    set_error(e.what());
  } catch (...) {
    set_error("unknown error");
  }
  return on_error;
}

const sf_model& checked(const sf_model* model) {
  if (model == nullptr) sf::fail("model is NULL");
  return *model;
}

void check_index(int i, size_t count, const char* what) {
  if (i < 0 || static_cast<size_t>(i) >= count)
    sf::fail("{} index {} is out of range (the model has {})", what, i, count);
}

// The C API hands out floats only; other fetched dtypes are converted.
sf::Tensor to_f32(const sf::Tensor& t) {
  if (t.dtype() == sf::DType::f32) return t;
  sf::Tensor out(sf::DType::f32, t.shape());
  float* dst = out.data<float>();
  const int64_t n = t.numel();
  auto convert = [&](const auto* src) {
    for (int64_t k = 0; k < n; ++k) dst[k] = static_cast<float>(src[k]);
  };
  switch (t.dtype()) {
    case sf::DType::i32:
      convert(t.data<int32_t>());
      break;
    case sf::DType::i64:
      convert(t.data<int64_t>());
      break;
    case sf::DType::u8:
      convert(t.data<uint8_t>());
      break;
    case sf::DType::i8:
      convert(t.data<int8_t>());
      break;
    case sf::DType::f32:
      break;
  }
  return out;
}

}  // namespace

extern "C" {

sf_model* sf_model_load(const char* path) {
  return guarded<sf_model*>(nullptr, [&]() -> sf_model* {
    if (path == nullptr) sf::fail("sf_model_load: path is NULL");
    auto model = std::make_unique<sf_model>();
    model->path = path;
    sf::ModelFile file = sf::load_model(path);
    if (std::optional<std::string> bytes = sf::symbolic_onnx_bytes(file)) {
      model->symbolic = std::make_unique<sf::ShapeSpecializer>(std::move(*bytes), path);
      model->declared = model->symbolic->inputs();
      model->output_names = model->symbolic->outputs();
    } else {
      model->fixed = sf::prepare_for_run(std::move(file));
      const sf::ModelToRun& run = *model->fixed;
      for (size_t i = 0; i < run.input_ports.size(); ++i) {
        const sf::TensorType& type = run.input_type(i);
        model->declared.push_back({.name = run.file.inputs[i], .dtype = type.dtype,
                                   .dims = type.shape,
                                   .dim_names = std::vector<std::string>(type.shape.size())});
      }
      model->output_names = run.file.outputs;
      // A `quantize --mode bf16` file computes in bf16, as the command runs it by default.
      sf::SessionOptions options;
      sf::choose_model_precision(run.file, path, "", options);
      model->session = std::make_unique<sf::Session>(run.file.graph, options);
    }
    model->inputs.resize(model->declared.size());
    return model.release();
  });
}

void sf_model_free(sf_model* model) { delete model; }

int sf_model_num_inputs(const sf_model* model) {
  return guarded(-1, [&] { return static_cast<int>(checked(model).declared.size()); });
}

int sf_model_num_outputs(const sf_model* model) {
  return guarded(-1, [&] { return static_cast<int>(checked(model).output_names.size()); });
}

const char* sf_model_input_name(const sf_model* model, int i) {
  return guarded<const char*>(nullptr, [&] {
    const sf_model& m = checked(model);
    check_index(i, m.declared.size(), "input");
    return m.declared[static_cast<size_t>(i)].name.c_str();
  });
}

const char* sf_model_output_name(const sf_model* model, int i) {
  return guarded<const char*>(nullptr, [&] {
    const sf_model& m = checked(model);
    check_index(i, m.output_names.size(), "output");
    return m.output_names[static_cast<size_t>(i)].c_str();
  });
}

int sf_model_input_shape(const sf_model* model, int i, int64_t* dims, int max_dims) {
  return guarded(-1, [&] {
    const sf_model& m = checked(model);
    check_index(i, m.declared.size(), "input");
    if (max_dims < 0 || (max_dims > 0 && dims == nullptr))
      sf::fail("sf_model_input_shape: dims is NULL or max_dims ({}) is negative", max_dims);
    const sf::Shape& shape = m.declared[static_cast<size_t>(i)].dims;
    for (size_t k = 0; k < shape.size() && k < static_cast<size_t>(max_dims); ++k)
      dims[k] = shape[k];
    return static_cast<int>(shape.size());
  });
}

int sf_model_set_input(sf_model* model, int i, const float* data, const int64_t* dims, int rank) {
  return guarded(-1, [&] {
    const sf_model& m = checked(model);
    check_index(i, m.declared.size(), "input");
    const sf::DeclaredInput& declared = m.declared[static_cast<size_t>(i)];
    const std::string& name = declared.name;
    if (declared.dtype != sf::DType::f32)
      sf::fail("input '{}' is {}; the C API feeds f32 inputs only", name,
               sf::dtype_name(declared.dtype));
    if (rank != static_cast<int>(declared.dims.size()))
      sf::fail("input '{}': rank {} given, the model expects rank {} {}", name, rank,
               declared.dims.size(), declared.dims_str());
    if (rank > 0 && dims == nullptr) sf::fail("input '{}': dims is NULL", name);
    sf::Shape shape(dims, dims + rank);
    int64_t count = 1;
    for (int64_t d : shape)
      if (d < 0 || __builtin_mul_overflow(count, d, &count))
        sf::fail("input '{}': bad dimensions {}", name, sf::shape_str(shape));
    if (count > 0 && data == nullptr) sf::fail("input '{}': data is NULL", name);
    sf::Tensor t(sf::DType::f32, shape);
    if (count > 0) std::copy(data, data + count, t.data<float>());
    model->inputs[static_cast<size_t>(i)] = std::move(t);
    return 0;
  });
}

int sf_model_run(sf_model* model) {
  return guarded(-1, [&] {
    if (model == nullptr) sf::fail("model is NULL");
    model->outputs.clear();
    for (size_t k = 0; k < model->inputs.size(); ++k)
      if (!model->inputs[k].defined())
        sf::fail("input '{}' was not set (call sf_model_set_input first)",
                 model->declared[k].name);
    // OpenMP's thread count is a per-thread setting, so it is applied on the running thread.
    static const int default_threads = omp_get_max_threads();
    const int threads = requested_threads.load();
    if (threads >= 0) sf::use_threads(threads > 0 ? threads : default_threads);
    std::vector<sf::Tensor> fetched;
    if (model->symbolic) {
      try {
        fetched = model->symbolic->run(model->inputs);
      } catch (const sf::InputMismatch& e) {
        sf::fail("{}: {}", model->path, e.what());
      }
    } else {
      sf::Feeds feeds;
      for (size_t k = 0; k < model->inputs.size(); ++k)
        feeds.emplace_back(model->fixed->input_ports[k], model->inputs[k]);
      fetched = model->session->run(feeds, model->fixed->output_ports);
    }
    std::vector<sf::Tensor> outputs;
    outputs.reserve(fetched.size());
    for (const sf::Tensor& t : fetched) outputs.push_back(to_f32(t));
    model->outputs = std::move(outputs);
    return 0;
  });
}

int sf_model_output(const sf_model* model, int i, const float** data, const int64_t** dims,
                    int* rank) {
  return guarded(-1, [&] {
    const sf_model& m = checked(model);
    if (data == nullptr || dims == nullptr || rank == nullptr)
      sf::fail("sf_model_output: data, dims and rank must not be NULL");
    if (m.outputs.empty() && !m.output_names.empty())
      sf::fail("no outputs yet: sf_model_run has not succeeded");
    check_index(i, m.outputs.size(), "output");
    const sf::Tensor& t = m.outputs[static_cast<size_t>(i)];
    *data = t.numel() > 0 ? t.data<float>() : nullptr;
    *dims = t.shape().data();
    *rank = t.rank();
    return 0;
  });
}

const char* sf_last_error(void) { return last_error.c_str(); }

int sf_set_num_threads(int n) {
  return guarded(-1, [&] {
    sf::limits::check_threads(n, "sf_set_num_threads");
    requested_threads.store(n);
    return 0;
  });
}

}  // extern "C"
