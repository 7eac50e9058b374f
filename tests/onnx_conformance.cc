// Runs the ONNX backend node tests (Debian's libonnx-testdata) through import_onnx and
// sf::Session, comparing against the stored outputs.
//
//   onnx_conformance [data_dir] [name_filter]
//
// A test whose model the importer rejects as unsupported (OnnxUnsupported) is skipped with the
// reason; when the rejection is a non-constant parameter input (weights, scales, axes fed as
// graph inputs), the test is retried with every input but the first bound as a constant.
// Prints one line per failure, skipped tests with reasons on stderr, and finally
// "N passed, M failed". Exits non-zero when any supported test fails.
#include <onnx/onnx_pb.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "onnx/importer.h"
#include "runtime/session.h"

namespace fs = std::filesystem;

namespace {

struct Outcome {
  enum Kind { kPass, kFail, kSkip } kind;
  std::string reason;
};

std::vector<sf::Tensor> read_tensors(const fs::path& dir, const char* prefix) {
  std::vector<sf::Tensor> out;
  for (int i = 0;; ++i) {
    fs::path p = dir / (std::string(prefix) + std::to_string(i) + ".pb");
    if (!fs::exists(p)) break;
    out.push_back(sf::read_onnx_tensor(p.string()));
  }
  return out;
}

std::vector<double> as_doubles(const sf::Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    switch (t.dtype()) {
      case sf::DType::f32:
        v[i] = static_cast<const float*>(t.raw())[i];
        break;
      case sf::DType::i32:
        v[i] = static_cast<const int32_t*>(t.raw())[i];
        break;
      case sf::DType::i64:
        v[i] = static_cast<double>(static_cast<const int64_t*>(t.raw())[i]);
        break;
      case sf::DType::u8:
        v[i] = static_cast<const uint8_t*>(t.raw())[i];
        break;
      case sf::DType::i8:
        v[i] = static_cast<const int8_t*>(t.raw())[i];
        break;
    }
  }
  return v;
}

// Empty when equal within tolerance.
std::string compare(const sf::Tensor& got, const sf::Tensor& want, double tol) {
  if (got.shape() != want.shape())
    return fmt::format("shape {} vs expected {}", sf::shape_str(got.shape()),
                       sf::shape_str(want.shape()));
  const std::vector<double> a = as_doubles(got), b = as_doubles(want);
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    const double err = std::abs(a[i] - b[i]) / (1.0 + std::abs(b[i]));
    if (!(err <= worst)) {
      worst = std::isnan(err) ? INFINITY : err;
      at = i;
    }
  }
  if (worst <= tol) return "";
  return fmt::format("max error {:.3g} at element {}: got {} expected {}", worst, at, a[at], b[at]);
}

bool needs_constant(const std::string& reason) {
  return reason.find("must be a constant") != std::string::npos ||
         reason.find("must be constant") != std::string::npos;
}

Outcome run_test(const fs::path& dir) {
  const std::string model_path = (dir / "model.onnx").string();
  const fs::path data = dir / "test_data_set_0";
  std::vector<sf::Tensor> inputs, expected;
  onnx::ModelProto proto;
  {
    std::ifstream in(model_path, std::ios::binary);
    if (!proto.ParseFromIstream(&in)) return {Outcome::kFail, "model does not parse"};
  }
  for (const auto* list : {&proto.graph().input(), &proto.graph().output()})
    for (const auto& v : *list)
      if (!v.type().has_tensor_type())
        return {Outcome::kSkip,
                fmt::format("'{}' is not a tensor (sequence, optional, map)", v.name())};
  try {
    inputs = read_tensors(data, "input_");
    expected = read_tensors(data, "output_");
  } catch (const sf::OnnxUnsupported& e) {
    return {Outcome::kSkip, e.what()};
  } catch (const std::exception& e) {
    return {Outcome::kFail, std::string("reading test data: ") + e.what()};
  }
  std::vector<std::string> input_names;
  std::set<std::string> initializers;
  for (const auto& t : proto.graph().initializer()) initializers.insert(t.name());
  for (const auto& i : proto.graph().input())
    if (!initializers.count(i.name())) input_names.push_back(i.name());
  if (input_names.size() != inputs.size())
    return {Outcome::kSkip, fmt::format("{} inputs but {} input files (optional inputs)",
                                        input_names.size(), inputs.size())};
  sf::ImportOptions options;
  for (size_t i = 0; i < inputs.size(); ++i)
    options.input_shapes[input_names[i]] = inputs[i].shape();
  sf::ModelFile model;
  try {
    try {
      model = sf::import_onnx(model_path, options);
    } catch (const sf::OnnxUnsupported& e) {
      if (!needs_constant(e.what())) throw;
      // Binds the parameters (every input but the data, or the only input) as constants.
      for (size_t i = inputs.size() > 1 ? 1 : 0; i < inputs.size(); ++i)
        options.constant_inputs[input_names[i]] = inputs[i];
      model = sf::import_onnx(model_path, options);
    }
  } catch (const sf::OnnxUnsupported& e) {
    return {Outcome::kSkip, e.what()};
  } catch (const std::exception& e) {
    return {Outcome::kFail, std::string("import: ") + e.what()};
  }
  const double tol = dir.filename().string().find("resize") != std::string::npos ? 1e-3 : 1e-4;
  try {
    sf::Session session(model.graph);
    sf::Feeds feeds;
    for (size_t i = 0; i < input_names.size(); ++i) {
      if (options.constant_inputs.count(input_names[i])) continue;
      feeds.emplace_back(sf::Output{model.graph.id_of(input_names[i]), 0}, inputs[i]);
    }
    std::vector<sf::Output> fetches;
    for (const std::string& name : model.outputs)
      fetches.push_back(sf::Output{model.graph.id_of(name), 0});
    std::vector<sf::Tensor> got = session.run(feeds, fetches);
    if (got.size() != expected.size())
      return {Outcome::kFail, fmt::format("{} outputs, expected {}", got.size(), expected.size())};
    for (size_t i = 0; i < got.size(); ++i) {
      std::string diff = compare(got[i], expected[i], tol);
      if (!diff.empty()) return {Outcome::kFail, fmt::format("output {}: {}", i, diff)};
    }
  } catch (const std::exception& e) {
    return {Outcome::kFail, std::string("run: ") + e.what()};
  }
  return {Outcome::kPass, ""};
}

}  // namespace

int main(int argc, char** argv) {
  const fs::path root = argc > 1 ? argv[1] : "/usr/include/onnx/backend/test/data/node";
  const std::string filter = argc > 2 ? argv[2] : "";
  if (!fs::is_directory(root)) {
    std::cerr << root << ": no ONNX backend test data (install libonnx-testdata)\n";
    return 1;
  }
  std::vector<fs::path> dirs;
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.is_directory() && entry.path().filename().string().find(filter) != std::string::npos)
      dirs.push_back(entry.path());
  std::sort(dirs.begin(), dirs.end());
  int passed = 0, failed = 0;
  std::vector<std::string> skipped;
  for (const fs::path& dir : dirs) {
    const std::string name = dir.filename().string();
    Outcome o = run_test(dir);
    if (o.kind == Outcome::kPass) ++passed;
    if (o.kind == Outcome::kFail) {
      ++failed;
      std::cout << "FAIL " << name << ": " << o.reason << "\n";
    }
    if (o.kind == Outcome::kSkip) skipped.push_back(name + ": " + o.reason);
  }
  for (const std::string& s : skipped) std::cerr << "SKIP " << s << "\n";
  std::cerr << skipped.size() << " skipped\n";
  std::cout << passed << " passed, " << failed << " failed\n";
  return failed == 0 ? 0 : 1;
}
