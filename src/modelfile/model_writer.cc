// save_model: builds the JSON metadata (deflated when that is smaller), lays tensors out 64-byte
// aligned, writes atomically.
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>

#include "graph/op_registry.h"
#include "io/atomic_file.h"
#include "modelfile/format.h"
#include "modelfile/model_file.h"
#include "ops/op_names.h"

namespace sf {
namespace {

using json = nlohmann::json;
using modelfile::align_up;
using modelfile::kAlign;
using modelfile::kHeaderBytes;

// JSON has no NaN or infinity; those are written as strings.
json float_json(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

struct Placed {
  const void* bytes;
  uint64_t size;
  uint64_t offset;  // in the data section
};

struct Layout {
  json tensors = json::array();
  std::vector<Placed> placed;
  uint64_t data_size = 0;

  // Appends `size` bytes at the next aligned offset and returns that offset.
  uint64_t place(const void* bytes, uint64_t size) {
    const uint64_t offset = align_up(data_size);
    placed.push_back({bytes, size, offset});
    data_size = offset + size;
    return offset;
  }
};

// The CRC-32 of the data section exactly as written below (zero padding included), for
// `inspect --verify` (modelfile/verify.h).
uint32_t data_crc32(const Layout& layout) {
  static const unsigned char zeros[kAlign] = {};
  uLong crc = crc32(0L, Z_NULL, 0);
  uint64_t at = 0;
  for (const Placed& p : layout.placed) {
    crc = crc32(crc, zeros, static_cast<uInt>(p.offset - at));
    for (uint64_t done = 0; done < p.size;) {
      const auto n = static_cast<uInt>(std::min<uint64_t>(p.size - done, uint64_t{1} << 30));
      crc = crc32(crc, static_cast<const unsigned char*>(p.bytes) + done, n);
      done += n;
    }
    at = p.offset + p.size;
  }
  return static_cast<uint32_t>(crc);
}

json floats_json(const std::vector<float>& values) {
  json out = json::array();
  for (float v : values) out.push_back(float_json(v));
  return out;
}

// An encoded tensor entry's parameter fields, as the codec writes them.
class EntryFields : public quant::EncodingFieldWriter {
 public:
  explicit EntryFields(json& entry) : entry_(entry) {}
  void integer(const char* key, int value) override { entry_[key] = value; }
  void integers(const char* key, const std::vector<int32_t>& values) override {
    entry_[key] = values;
  }
  void floats(const char* key, const std::vector<float>& values) override {
    entry_[key] = floats_json(values);
  }

 private:
  json& entry_;
};

// The tensor entry of encoded weights: the packed data goes to the data section, the
// parameters into the entry (docs/MODEL_FORMAT.md).
json encoded_entry(const quant::EncodedTensor& encoded, Layout& layout) {
  json entry = {{"dtype", dtype_name(encoded.dtype)},
                {"shape", encoded.shape},
                {"offset", layout.place(encoded.data.data(), encoded.data.size())},
                {"bytes", encoded.data.size()},
                {"encoding", quant::encoding_name(encoded.encoding.kind)}};
  EntryFields fields(entry);
  quant::write_fields(encoded.encoding, fields);
  return entry;
}

// The encoded form must stand for the node's own value: same dtype and shape, and valid.
void check_encoded(const std::string& path, const Node& node, const Tensor& value,
                   const quant::EncodedTensor& encoded) {
  if (value.dtype() != encoded.dtype || value.shape() != encoded.shape)
    fail("{}: cannot save model: encoded weights for node '{}' are {}{}, but its value is {}{}",
         path, node.name, dtype_name(encoded.dtype), shape_str(encoded.shape),
         dtype_name(value.dtype()), shape_str(value.shape()));
  if (encoded.dtype != DType::f32 && encoded.encoding.kind != quant::Encoding::sparse)
    fail("{}: cannot save model: node '{}': only sparse encodings hold {} values", path,
         node.name, dtype_name(encoded.dtype));
  try {
    quant::validate(encoded.shape, encoded.encoding, encoded.data.size());
  } catch (const Error& e) {
    fail("{}: cannot save model: encoded weights for node '{}': {}", path, node.name, e.what());
  }
}

// `encoded` replaces the node's "value" tensor when set.
json attr_json(const std::string& path, const Node& node, const std::string& name,
               const AttrValue& value, const quant::EncodedTensor* encoded, Layout& layout) {
  json out = {{"kind", attr_kind_name(attr_kind_of(value))}};
  if (const auto* i = std::get_if<int64_t>(&value)) {
    out["value"] = *i;
  } else if (const auto* f = std::get_if<double>(&value)) {
    out["value"] = float_json(*f);
  } else if (const auto* b = std::get_if<bool>(&value)) {
    out["value"] = *b;
  } else if (const auto* s = std::get_if<std::string>(&value)) {
    out["value"] = *s;
  } else if (const auto* is = std::get_if<std::vector<int64_t>>(&value)) {
    out["value"] = *is;
  } else if (const auto* fs = std::get_if<std::vector<double>>(&value)) {
    json arr = json::array();
    for (double v : *fs) arr.push_back(float_json(v));
    out["value"] = std::move(arr);
  } else {
    const Tensor& t = std::get<Tensor>(value);
    if (!t.defined())
      fail("{}: cannot save model: node '{}' attribute '{}' is an empty tensor", path, node.name,
           name);
    out["value"] = layout.tensors.size();
    if (encoded != nullptr && name == "value") {
      check_encoded(path, node, t, *encoded);
      layout.tensors.push_back(encoded_entry(*encoded, layout));
    } else {
      layout.tensors.push_back({{"dtype", dtype_name(t.dtype())},
                                {"shape", t.shape()},
                                {"offset", layout.place(t.raw(), t.bytes())},
                                {"bytes", t.bytes()},
                                {"encoding", modelfile::kDenseEncoding}});
    }
  }
  return out;
}

void check_model(const std::string& path, const ModelFile& model) {
  for (const std::string& name : model.inputs) {
    int id = model.graph.find(name);
    if (id < 0) fail("{}: cannot save model: input '{}' is not a node", path, name);
    if (model.graph.node(id).op != op_names::kPlaceholder)
      fail("{}: cannot save model: input '{}' is a {}, not a Placeholder", path, name,
           model.graph.node(id).op);
  }
  for (const std::string& name : model.outputs)
    if (model.graph.find(name) < 0)
      fail("{}: cannot save model: output '{}' is not a node", path, name);
  for (const auto& [name, encoded] : model.encoded_weights) {
    int id = model.graph.find(name);
    if (id < 0 || model.graph.node(id).op != op_names::kConst)
      fail("{}: cannot save model: encoded weights name '{}', which is not a Const node", path,
           name);
  }
}

// The zlib stream (level 9) of `text`, or nothing when it would not make the file smaller (the
// data section starts at a multiple of 64, so fewer metadata bytes may not move it) or the
// reader's inflate limit would reject it: plain JSON keeps the file readable by version 1 builds.
std::optional<std::string> deflated(const std::string& path, const std::string& text) {
  if (text.size() > kMaxInflatedMetadataBytes) return std::nullopt;
  uLongf size = compressBound(text.size());
  std::string out(size, '\0');
  const int status =
      compress2(reinterpret_cast<Bytef*>(out.data()), &size,
                reinterpret_cast<const Bytef*>(text.data()), text.size(), Z_BEST_COMPRESSION);
  if (status != Z_OK) fail("{}: cannot save model: zlib compress2 failed ({})", path, status);
  if (align_up(kHeaderBytes + size) >= align_up(kHeaderBytes + text.size())) return std::nullopt;
  out.resize(size);
  return out;
}

}  // namespace

uint64_t save_model(const std::string& path, const ModelFile& model, WrittenFileCheck check) {
  check_model(path, model);
  Layout layout;
  json nodes = json::array();
  for (const Node& n : model.graph.nodes()) {
    const OpDef* def = OpRegistry::global().find(n.op);
    if (def == nullptr)
      fail("{}: cannot save model: node '{}' has unknown op '{}'", path, n.name, n.op);
    json inputs = json::array();
    for (const Output& in : n.inputs) inputs.push_back({in.node, in.index});
    auto encoded = model.encoded_weights.find(n.name);
    const quant::EncodedTensor* encoded_value =
        encoded == model.encoded_weights.end() ? nullptr : &encoded->second;
    json attrs = json::object();
    for (const auto& [name, value] : n.attrs.all())
      attrs[name] = attr_json(path, n, name, value, encoded_value, layout);
    nodes.push_back({{"name", n.name},
                     {"op", n.op},
                     {"version", def->version},
                     {"device", n.device},
                     {"inputs", std::move(inputs)},
                     {"attrs", std::move(attrs)}});
  }
  json meta = {{"inputs", model.inputs},
               {"outputs", model.outputs},
               {"metadata", model.metadata},
               {"nodes", std::move(nodes)},
               {"tensors", std::move(layout.tensors)},
               {"data_crc32", data_crc32(layout)}};
  std::string text;
  try {
    text = meta.dump();  // strict UTF-8: a name that is not UTF-8 is an error, not a bad file
  } catch (const json::exception& e) {
    fail("{}: cannot save model: {}", path, e.what());
  }

  const std::optional<std::string> deflated_text = deflated(path, text);
  const std::string& meta_bytes = deflated_text ? *deflated_text : text;

  const uint64_t data_offset = align_up(kHeaderBytes + meta_bytes.size());
  unsigned char header[kHeaderBytes] = {};
  std::memcpy(header, modelfile::kMagic, sizeof(modelfile::kMagic));
  // The oldest version that describes the file, so that older builds still read what they can.
  uint32_t version = deflated_text ? modelfile::kFlagsVersion : modelfile::kPlainMetadataVersion;
  for (const auto& entry : model.encoded_weights)
    version = std::max(version, quant::first_format_version(entry.second.encoding.kind));
  modelfile::put_le<uint32_t>(header + modelfile::kVersionAt, version);
  modelfile::put_le<uint32_t>(header + modelfile::kFlagsAt,
                              deflated_text ? modelfile::kDeflatedMetadataFlag : 0);
  modelfile::put_le<uint64_t>(header + modelfile::kMetaOffsetAt, kHeaderBytes);
  modelfile::put_le<uint64_t>(header + modelfile::kMetaSizeAt, meta_bytes.size());
  modelfile::put_le<uint64_t>(header + modelfile::kDataOffsetAt, data_offset);
  modelfile::put_le<uint64_t>(header + modelfile::kDataSizeAt, layout.data_size);

  AtomicFile file(path, "model", std::move(check));
  file.write(header, sizeof(header));
  file.write(meta_bytes.data(), meta_bytes.size());
  file.pad_to(data_offset);
  for (const Placed& p : layout.placed) {
    file.pad_to(data_offset + p.offset);
    if (p.size > 0) file.write(p.bytes, p.size);
  }
  SF_CHECK(file.position() == data_offset + layout.data_size, "wrote {} bytes, expected {}",
           file.position(), data_offset + layout.data_size);
  file.commit();
  return file.position();
}

size_t weight_bytes(const ModelFile& model) {
  std::set<std::pair<const void*, size_t>> seen;
  size_t total = 0;
  for (const Node& n : model.graph.nodes())
    for (const auto& [name, value] : n.attrs.all())
      if (const auto* t = std::get_if<Tensor>(&value); t != nullptr && t->defined())
        if (seen.emplace(t->raw(), t->bytes()).second) total += t->bytes();
  return total;
}

}  // namespace sf
