// Runs the ONNX backend node tests (Debian's libonnx-testdata) through import_onnx and
// sf::Session, comparing against the stored outputs.
//
//   onnx_conformance [data_dir] [name_filter]
//
// Every test input is fed at run time, as ONNX Runtime runs these tests: the model goes through
// ShapeSpecializer (onnx/shape_specializer.h), which plans it for the fed shapes and reads
// shape-like inputs (a Reshape's shape, Pad's pads, ...) at plan time; nothing is bound as a
// constant by this runner. A test whose model the importer rejects as unsupported
// (OnnxUnsupported) is skipped with the reason. Prints one line per failure, skipped tests with
// reasons on stderr, then "claimed families: P of N passed (R)" — N counts the tests whose ops
// all have a converter (supported_onnx_ops) and whose inputs and outputs are f32, u8, i8, i32,
// i64 or bool tensors, so a skip for a missing feature of a claimed op
// counts against the rate — and "N passed, M failed". Exits non-zero when a supported test
// fails.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "onnx/importer.h"
#include "onnx/shape_specializer.h"
#include "runtime/session.h"

namespace fs = std::filesystem;

namespace {

struct Outcome {
  enum Kind { kPass, kFail, kSkip } kind;
  std::string reason;
  bool claimed = false;  // every op of the model has a converter
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

Outcome check_model(const fs::path& dir) {
  const std::string model_path = (dir / "model.onnx").string();
  const fs::path data = dir / "test_data_set_0";
  std::vector<sf::Tensor> inputs, expected;
  std::string bytes;
  {
    std::ifstream in(model_path, std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    bytes = buffer.str();
  }
  onnx::ModelProto proto;
  if (!proto.ParseFromString(bytes)) return {Outcome::kFail, "model does not parse"};
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
  const double tol = dir.filename().string().find("resize") != std::string::npos ? 1e-3 : 1e-4;
  try {
    sf::ShapeSpecializer model(bytes, model_path);
    if (model.inputs().size() != inputs.size())
      return {Outcome::kSkip, fmt::format("{} inputs but {} input files (optional inputs)",
                                          model.inputs().size(), inputs.size())};
    std::vector<sf::Tensor> got = model.run(inputs);
    if (got.size() != expected.size())
      return {Outcome::kFail, fmt::format("{} outputs, expected {}", got.size(), expected.size())};
    for (size_t i = 0; i < got.size(); ++i) {
      std::string diff = compare(got[i], expected[i], tol);
      if (!diff.empty()) return {Outcome::kFail, fmt::format("output {}: {}", i, diff)};
    }
  } catch (const sf::OnnxUnsupported& e) {
    return {Outcome::kSkip, e.what()};
  } catch (const std::exception& e) {
    return {Outcome::kFail, std::string("run: ") + e.what()};
  }
  return {Outcome::kPass, ""};
}

Outcome run_test(const fs::path& dir) {
  static const std::vector<std::string> ops = sf::supported_onnx_ops();
  onnx::ModelProto proto;
  {
    std::ifstream in((dir / "model.onnx").string(), std::ios::binary);
    if (!proto.ParseFromIstream(&in)) return {Outcome::kFail, "model does not parse", true};
  }
  // Claimed: tensors of the element types slimflow has (and bool, which comparisons make) in
  // and out, and a converter for every op.
  static const std::set<int> types = {onnx::TensorProto::FLOAT, onnx::TensorProto::UINT8,
                                      onnx::TensorProto::INT8,  onnx::TensorProto::INT32,
                                      onnx::TensorProto::INT64, onnx::TensorProto::BOOL};
  bool claimed = true;
  for (const auto* list : {&proto.graph().input(), &proto.graph().output()})
    for (const auto& v : *list)
      claimed = claimed && v.type().has_tensor_type() &&
                types.count(v.type().tensor_type().elem_type()) > 0;
  for (const onnx::NodeProto& n : proto.graph().node())
    claimed = claimed && (n.domain().empty() || n.domain() == "ai.onnx") &&
              std::binary_search(ops.begin(), ops.end(), n.op_type());
  Outcome o = check_model(dir);
  o.claimed = claimed;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--supported-ops") {
    std::cout << sf::supported_onnx_ops_markdown() << "\n";  // README's list
    return 0;
  }
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
  int passed = 0, failed = 0, claimed = 0, claimed_passed = 0;
  std::vector<std::string> skipped;
  for (const fs::path& dir : dirs) {
    const std::string name = dir.filename().string();
    Outcome o = run_test(dir);
    if (o.kind == Outcome::kPass) ++passed;
    if (o.claimed) {
      ++claimed;
      claimed_passed += o.kind == Outcome::kPass;
      if (o.kind != Outcome::kPass) std::cout << "CLAIMED-NOT-PASSED " << name << "\n";
    }
    if (o.kind == Outcome::kFail) {
      ++failed;
      std::cout << "FAIL " << name << ": " << o.reason << "\n";
    }
    if (o.kind == Outcome::kSkip) skipped.push_back(name + ": " + o.reason);
  }
  for (const std::string& s : skipped) std::cerr << "SKIP " << s << "\n";
  std::cerr << skipped.size() << " skipped\n";
  std::cout << fmt::format("claimed families: {} of {} passed ({:.3f})\n", claimed_passed, claimed,
                           claimed ? static_cast<double>(claimed_passed) / claimed : 0.0);
  std::cout << passed << " passed, " << failed << " failed\n";
  return failed == 0 ? 0 : 1;
}
