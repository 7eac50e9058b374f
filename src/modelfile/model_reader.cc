// load_model: maps the file, validates the header, inflates deflated metadata (bounded),
// validates the JSON and every tensor, then rebuilds the graph through Graph::add_node. Nothing
// is allocated or indexed from a field before it is checked.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/limits.h"
#include "graph/op_registry.h"
#include "modelfile/format.h"
#include "modelfile/model_file.h"
#include "modelfile/verify.h"
#include "ops/op_names.h"

namespace sf {
namespace {

using json = nlohmann::json;
using modelfile::kAlign;
using modelfile::kHeaderBytes;

using limits::kMaxElements;
using limits::kMaxRank;

class Reader {
 public:
  Reader(const unsigned char* data, size_t size, std::shared_ptr<void> keep_alive,
         const std::string& name)
      : data_(data), size_(size), keep_alive_(std::move(keep_alive)), name_(name) {}

  ModelFile read() {
    const json meta = parse_metadata();
    return build(meta);
  }

  // The weight data's CRC-32 against the one save_model recorded (modelfile/verify.h).
  WeightsCheck verify() {
    const json meta = parse_metadata();
    WeightsCheck check;
    if (auto it = meta.find("data_crc32"); it != meta.end()) {
      if (!it->is_number_unsigned() || it->get<uint64_t>() > 0xffffffffu)
        error("'data_crc32' must be a 32-bit unsigned integer");
      check.recorded = static_cast<uint32_t>(it->get<uint64_t>());
    }
    uLong crc = crc32(0L, Z_NULL, 0);
    const unsigned char* at = data_ + data_offset_;
    for (uint64_t left = data_size_; left > 0;) {
      const auto n = static_cast<uInt>(std::min<uint64_t>(left, uint64_t{1} << 30));
      crc = crc32(crc, at, n);
      at += n;
      left -= n;
    }
    check.actual = static_cast<uint32_t>(crc);
    check.data_bytes = data_size_;
    return check;
  }

 private:
  json parse_metadata() {
    read_header();
    const std::string inflated = metadata_deflated_ ? inflate_metadata() : std::string();
    const auto* text = metadata_deflated_ ? reinterpret_cast<const unsigned char*>(inflated.data())
                                          : data_ + meta_offset_;
    const size_t text_size = metadata_deflated_ ? inflated.size() : meta_size_;
    json meta;
    // The inflate cap bounds the text, not the parsed tree: deep nesting or millions of tiny
    // values would build gigabytes of JSON nodes, so both are bounded while parsing.
    int64_t values = 0;
    bool too_deep = false, too_many = false;
    const json::parser_callback_t bound = [&](int depth, json::parse_event_t, json&) {
      if (depth > limits::kMaxJsonDepth) too_deep = true;
      if (++values > limits::kMaxJsonValues) too_many = true;
      if (too_deep || too_many) throw std::length_error("metadata bound");
      return true;
    };
    try {
      meta = json::parse(text, text + text_size, bound);
    } catch (const json::exception& e) {
      error("metadata is not valid JSON: {}", e.what());
    } catch (const std::length_error&) {
      if (too_deep) error("metadata nests deeper than {} levels", limits::kMaxJsonDepth);
      error("metadata has more than {} JSON values", limits::kMaxJsonValues);
    }
    if (!meta.is_object()) error("metadata is not a JSON object");
    return meta;
  }

 public:
  ModelFile build(const json& meta) {
    if (auto nodes = meta.find("nodes"); nodes != meta.end()) nodes_json_ = &*nodes;
    read_tensors(field(meta, "tensors", "metadata"));
    ModelFile model;
    read_nodes(field(meta, "nodes", "metadata"), model);
    model.inputs = names(field(meta, "inputs", "metadata"), "inputs");
    model.outputs = names(field(meta, "outputs", "metadata"), "outputs");
    for (const std::string& in : model.inputs) {
      int id = model.graph.find(in);
      if (id < 0) error("input '{}' is not a node", in);
      if (model.graph.node(id).op != op_names::kPlaceholder)
        error("input '{}' is a {}, not a Placeholder", in, model.graph.node(id).op);
    }
    for (const std::string& out : model.outputs) {
      int id = model.graph.find(out);
      if (id < 0) error("output '{}' is not a node", out);
      if (model.graph.node(id).outputs.empty()) error("output '{}' has no outputs", out);
    }
    const json& metadata = field(meta, "metadata", "metadata");
    if (!metadata.is_object()) error("'metadata' must be an object of strings");
    for (const auto& [key, value] : metadata.items())
      model.metadata[key] = string(value, fmt::format("metadata '{}'", key));
    model.file_bytes = size_;
    return model;
  }

 private:
  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> format, Args&&... args) const {
    fail("{}: {}", name_, fmt::format(format, std::forward<Args>(args)...));
  }

  void read_header() {
    if (size_ == 0) error("empty file, not a slimflow model");
    const size_t magic_bytes = std::min<size_t>(size_, sizeof(modelfile::kMagic));
    if (std::memcmp(data_, modelfile::kMagic, magic_bytes) != 0)
      error("not a slimflow model (no SFMODEL magic)");
    if (size_ < kHeaderBytes)
      error("truncated: {} bytes, shorter than the {}-byte header", size_, kHeaderBytes);
    const uint32_t version = modelfile::get_le<uint32_t>(data_ + modelfile::kVersionAt);
    if (version > kModelFormatVersion)
      error("format version {} is newer than this build reads ({})", version, kModelFormatVersion);
    if (version == 0) error("format version 0 is not valid");
    version_ = version;
    if (version >= modelfile::kFlagsVersion) {
      const uint32_t flags = modelfile::get_le<uint32_t>(data_ + modelfile::kFlagsAt);
      if ((flags & ~modelfile::kKnownFlags) != 0)
        error("unknown flags 0x{:x} in format version {}", flags & ~modelfile::kKnownFlags,
              version);
      metadata_deflated_ = (flags & modelfile::kDeflatedMetadataFlag) != 0;
    }
    meta_offset_ = modelfile::get_le<uint64_t>(data_ + modelfile::kMetaOffsetAt);
    meta_size_ = modelfile::get_le<uint64_t>(data_ + modelfile::kMetaSizeAt);
    data_offset_ = modelfile::get_le<uint64_t>(data_ + modelfile::kDataOffsetAt);
    data_size_ = modelfile::get_le<uint64_t>(data_ + modelfile::kDataSizeAt);
    check_section("metadata", meta_offset_, meta_size_);
    check_section("data", data_offset_, data_size_);
    if (data_offset_ % kAlign != 0)
      error("data section offset {} is not a multiple of {}", data_offset_, kAlign);
    if (meta_offset_ < data_offset_ + data_size_ && data_offset_ < meta_offset_ + meta_size_)
      error("metadata section [{}, +{}) overlaps data section [{}, +{})", meta_offset_, meta_size_,
            data_offset_, data_size_);
  }

  // The metadata section as one complete zlib stream, inflated in chunks so that at most
  // kMaxInflatedMetadataBytes (plus one chunk) is ever allocated, whatever the file claims.
  std::string inflate_metadata() const {
    z_stream stream{};
    if (inflateInit(&stream) != Z_OK) error("cannot inflate metadata: zlib inflateInit failed");
    struct InflateEnd {
      z_stream* stream;
      ~InflateEnd() { inflateEnd(stream); }
    } frees_stream{&stream};
    const unsigned char* next_in = data_ + meta_offset_;
    uint64_t in_left = meta_size_;
    std::string text;
    std::vector<unsigned char> chunk(size_t{1} << 16);
    int status = Z_OK;
    while (status != Z_STREAM_END) {
      if (stream.avail_in == 0 && in_left > 0) {
        // avail_in is 32 bits wide; metadata in a file over 4 GiB is fed in pieces.
        const auto piece =
            static_cast<uInt>(std::min<uint64_t>(in_left, std::numeric_limits<uInt>::max()));
        stream.next_in = const_cast<Bytef*>(next_in);
        stream.avail_in = piece;
        next_in += piece;
        in_left -= piece;
      }
      stream.next_out = chunk.data();
      stream.avail_out = static_cast<uInt>(chunk.size());
      status = inflate(&stream, Z_NO_FLUSH);
      if (status == Z_BUF_ERROR)  // no progress possible: every input byte has been consumed
        error(
            "compressed metadata is truncated: the zlib stream ends after {} bytes without "
            "its end marker",
            meta_size_);
      if (status != Z_OK && status != Z_STREAM_END)
        error("compressed metadata is not a valid zlib stream: {}",
              stream.msg != nullptr ? stream.msg : zError(status));
      const size_t produced = chunk.size() - stream.avail_out;
      if (produced > kMaxInflatedMetadataBytes - text.size())
        error("compressed metadata inflates to more than the {}-byte limit",
              kMaxInflatedMetadataBytes);
      text.append(reinterpret_cast<const char*>(chunk.data()), produced);
    }
    const uint64_t trailing = stream.avail_in + in_left;
    if (trailing != 0)
      error("compressed metadata has {} bytes after the end of its zlib stream, expected none",
            trailing);
    return text;
  }

  // Subtraction instead of addition, so that huge fields cannot wrap around.
  void check_section(const char* what, uint64_t offset, uint64_t bytes) const {
    if (offset < kHeaderBytes || offset > size_ || bytes > size_ - offset)
      error(
          "truncated or corrupt: {} section at offset {} with {} bytes does not fit the "
          "{}-byte file (after the {}-byte header)",
          what, offset, bytes, size_, kHeaderBytes);
  }

  // --- typed JSON access; every failure names the field ---
  const json& field(const json& object, const char* key, const std::string& where) const {
    if (!object.is_object()) error("{} must be a JSON object", where);
    auto it = object.find(key);
    if (it == object.end()) error("{} has no '{}'", where, key);
    return *it;
  }
  std::string string(const json& j, const std::string& what) const {
    if (!j.is_string()) error("{} must be a string", what);
    return j.get<std::string>();
  }
  int64_t integer(const json& j, const std::string& what) const {
    if (j.is_number_unsigned() &&
        j.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      error("{} is out of range", what);
    if (!j.is_number_integer()) error("{} must be an integer", what);
    return j.get<int64_t>();
  }
  // An integer in [0, limit).
  size_t index(const json& j, uint64_t limit, const std::string& what) const {
    int64_t v = integer(j, what);
    if (v < 0 || static_cast<uint64_t>(v) >= limit)
      error("{} is {}, outside [0, {})", what, v, limit);
    return static_cast<size_t>(v);
  }
  double number(const json& j, const std::string& what) const {
    if (j.is_number()) return j.get<double>();
    if (j.is_string()) {
      const auto& s = j.get_ref<const std::string&>();
      if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
      if (s == "inf") return std::numeric_limits<double>::infinity();
      if (s == "-inf") return -std::numeric_limits<double>::infinity();
    }
    error("{} must be a number (or \"nan\", \"inf\", \"-inf\")", what);
  }
  const json& array(const json& j, const std::string& what) const {
    if (!j.is_array()) error("{} must be an array", what);
    return j;
  }
  // Out-of-range doubles become infinities explicitly (a plain cast would be undefined), for
  // the validation to reject.
  static float to_float(double v) {
    if (std::isfinite(v) && std::abs(v) > std::numeric_limits<float>::max())
      return v > 0 ? std::numeric_limits<float>::infinity()
                   : -std::numeric_limits<float>::infinity();
    return static_cast<float>(v);
  }
  // An integer that fits an int, so that narrowing it cannot wrap.
  int small_integer(const json& j, const std::string& what) const {
    int64_t v = integer(j, what);
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
      error("{} is {}, out of range", what, v);
    return static_cast<int>(v);
  }
  std::vector<std::string> names(const json& j, const char* what) const {
    std::vector<std::string> out;
    for (const json& e : array(j, fmt::format("'{}'", what)))
      out.push_back(string(e, fmt::format("an entry of '{}'", what)));
    return out;
  }

  // Checks that no dimension is negative and the element count stays sane, without overflow.
  // Zero dimensions count as 1 in the bound, so that no partial product (Flatten's outer and
  // inner sizes, say) can overflow either.
  int64_t checked_numel(const Shape& shape, const std::string& what) const {
    if (shape.size() > kMaxRank)
      error("{} has rank {}, more than {}", what, shape.size(), kMaxRank);
    int64_t bound = 1, n = 1;
    for (int64_t d : shape) {
      if (d < 0) error("{} has a negative dimension in {}", what, shape_str(shape));
      if (d > 1 && bound > kMaxElements / d)
        error("{} {} has more than {} elements", what, shape_str(shape), kMaxElements);
      bound *= std::max<int64_t>(d, 1);
      n *= d;
    }
    return n;
  }

  // For error messages only: " (node 'name')" of the first node whose tensor attribute refers
  // to tensor `index`, or "" when the (not yet validated) node list does not say.
  std::string owner(size_t index) const {
    if (nodes_json_ == nullptr || !nodes_json_->is_array()) return "";
    for (const json& n : *nodes_json_) {
      if (!n.is_object()) continue;
      auto name = n.find("name");
      auto attrs = n.find("attrs");
      if (name == n.end() || !name->is_string() || attrs == n.end() || !attrs->is_object())
        continue;
      for (const auto& [key, a] : attrs->items()) {
        if (!a.is_object()) continue;
        auto kind = a.find("kind");
        auto value = a.find("value");
        if (kind != a.end() && *kind == "tensor" && value != a.end() &&
            value->is_number_unsigned() && value->get<uint64_t>() == index)
          return fmt::format(" (node '{}')", name->get<std::string>());
      }
    }
    return "";
  }

  // An encoded tensor entry's parameter fields, for the codec to read; errors name the entry.
  class EntryFields : public quant::EncodingFieldReader {
   public:
    EntryFields(const Reader& reader, const json& entry, const std::string& where)
        : reader_(reader), entry_(entry), where_(where) {}
    bool has(const char* key) const override { return entry_.contains(key); }
    int integer(const char* key) const override {
      return reader_.small_integer(reader_.field(entry_, key, where_), named(key));
    }
    std::vector<int> integers(const char* key) const override {
      std::vector<int> out;
      for (const json& v : reader_.array(reader_.field(entry_, key, where_), named(key)))
        out.push_back(reader_.small_integer(v, named(key) + " entry"));
      return out;
    }
    std::vector<float> floats(const char* key) const override {
      std::vector<float> out;
      for (const json& v : reader_.array(reader_.field(entry_, key, where_), named(key)))
        out.push_back(to_float(reader_.number(v, named(key) + " entry")));
      return out;
    }
    [[noreturn]] void reject(const char* key, const std::string& why) const override {
      reader_.error("{} {}", named(key), why);
    }

   private:
    std::string named(const char* key) const { return fmt::format("{} '{}'", where_, key); }
    const Reader& reader_;
    const json& entry_;
    const std::string& where_;
  };

  void read_tensors(const json& list) {
    array(list, "'tensors'");
    std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [offset, end) of non-empty tensors
    // Encoded tensors are decoded only once every entry has passed every check.
    struct Pending {
      size_t index;
      Shape shape;
      DType dtype;
      quant::WeightEncoding params;
    };
    std::vector<Pending> to_decode;
    for (size_t i = 0; i < list.size(); ++i) {
      const json& t = list[i];
      const std::string where = fmt::format("tensor {}", i);
      const std::string encoding = string(field(t, "encoding", where), where + " 'encoding'");
      quant::Encoding kind = quant::Encoding::linear;
      const bool dense = encoding == modelfile::kDenseEncoding;
      if (!dense && !quant::parse_encoding(encoding, &kind))
        error("tensor {} has encoding '{}', which this build does not read", i, encoding);
      if (!dense && quant::first_format_version(kind) > version_)
        error("tensor {}{} has encoding '{}', which format version {} does not have (from {})", i,
              owner(i), encoding, version_, quant::first_format_version(kind));
      const std::string dtype_text = string(field(t, "dtype", where), where + " 'dtype'");
      DType dtype;
      try {
        dtype = parse_dtype(dtype_text);
      } catch (const Error& e) {
        error("tensor {}: {}", i, e.what());
      }
      if (!dense && dtype != DType::f32 && !(kind == quant::Encoding::sparse && dtype == DType::i8))
        error("tensor {}{} has encoding '{}' with dtype {}; encoded tensors are f32 (sparse ones "
              "f32 or i8)",
              i, owner(i), encoding, dtype_name(dtype));
      Shape shape;
      for (const json& d : array(field(t, "shape", where), where + " 'shape'"))
        shape.push_back(integer(d, where + " dimension"));
      const int64_t numel = checked_numel(shape, where);
      const int64_t offset = integer(field(t, "offset", where), where + " 'offset'");
      const int64_t bytes = integer(field(t, "bytes", where), where + " 'bytes'");
      uint64_t expected = static_cast<uint64_t>(numel) * dtype_size(dtype);
      if (dense && (bytes < 0 || static_cast<uint64_t>(bytes) != expected))
        error("tensor {} has {} bytes, but {} {} needs {}", i, bytes, dtype_name(dtype),
              shape_str(shape), expected);
      if (!dense) {
        if (bytes < 0) error("tensor {}{} has {} bytes", i, owner(i), bytes);
        quant::WeightEncoding params = quant::read_fields(kind, EntryFields(*this, t, where));
        try {
          quant::validate(shape, params, static_cast<uint64_t>(bytes));
        } catch (const Error& e) {
          error("tensor {}{}: {}", i, owner(i), e.what());
        }
        expected = static_cast<uint64_t>(bytes);
        to_decode.push_back({i, shape, dtype, std::move(params)});
      }
      if (offset < 0 || static_cast<uint64_t>(offset) % kAlign != 0)
        error("tensor {} offset {} is not a non-negative multiple of {}", i, offset, kAlign);
      const auto begin = static_cast<uint64_t>(offset);
      if (begin > data_size_ || expected > data_size_ - begin)
        error("tensor {} [{}, +{}) runs past the end of the {}-byte data section", i, begin,
              expected, data_size_);
      if (expected > 0) ranges.emplace_back(begin, begin + expected);
      const unsigned char* at = data_ + data_offset_ + begin;
      // Storage is non-const by design; the mapping is private, so writes never reach the file.
      // An encoded tensor is a byte view until it is decoded below.
      auto storage = Storage::borrow(const_cast<unsigned char*>(at), expected, keep_alive_);
      if (dense)
        tensors_.emplace_back(dtype, std::move(shape), std::move(storage));
      else
        tensors_.emplace_back(DType::u8, Shape{static_cast<int64_t>(expected)}, std::move(storage));
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i)
      if (ranges[i].first < ranges[i - 1].second)
        error("tensors overlap in the data section: [{}, {}) and [{}, {})", ranges[i - 1].first,
              ranges[i - 1].second, ranges[i].first, ranges[i].second);
    for (Pending& p : to_decode) {
      const Tensor stored = tensors_[p.index];
      try {
        tensors_[p.index] = quant::decode(
            p.shape, p.params, static_cast<const uint8_t*>(stored.raw()), stored.bytes(), p.dtype);
      } catch (const Error& e) {
        error("tensor {}{}: {}", p.index, owner(p.index), e.what());
      }
      stored_[tensors_[p.index].storage().get()] =
          StoredWeights{std::move(p.params), stored.bytes()};
    }
  }

  AttrValue attr(const json& a, const std::string& where) const {
    const std::string kind = string(field(a, "kind", where), where + " 'kind'");
    const json& v = field(a, "value", where);
    const std::string what = where + " value";
    if (kind == "int") return integer(v, what);
    if (kind == "float") return number(v, what);
    if (kind == "bool") {
      if (!v.is_boolean()) error("{} must be true or false", what);
      return v.get<bool>();
    }
    if (kind == "string") return string(v, what);
    if (kind == "ints") {
      std::vector<int64_t> out;
      for (const json& e : array(v, what)) out.push_back(integer(e, what));
      return out;
    }
    if (kind == "floats") {
      std::vector<double> out;
      for (const json& e : array(v, what)) out.push_back(number(e, what));
      return out;
    }
    if (kind == "tensor") return tensors_[index(v, tensors_.size(), what)];
    error("{} has unknown kind '{}' (expected int, float, bool, string, ints, floats or tensor)",
          where, kind);
  }

  // Shape-valued attributes ("shape", "input_shape", ...) feed products in shape functions; one
  // -1 ("infer this dimension") is allowed, the rest must be a sane shape.
  void check_shape_attr(const std::string& name, const AttrValue& value,
                        const std::string& where) const {
    const auto* dims = std::get_if<std::vector<int64_t>>(&value);
    if (dims == nullptr || (name != "shape" && !name.ends_with("_shape"))) return;
    Shape known;
    for (int64_t d : *dims)
      if (d != -1) known.push_back(d);
    checked_numel(known, where);
  }

  void read_nodes(const json& list, ModelFile& model) {
    Graph& graph = model.graph;
    array(list, "'nodes'");
    for (size_t i = 0; i < list.size(); ++i) {
      const json& n = list[i];
      const std::string where = fmt::format("node {}", i);
      const std::string name = string(field(n, "name", where), where + " 'name'");
      if (name.empty()) error("node {} has an empty name", i);
      const std::string node_where = fmt::format("node '{}'", name);
      const std::string op = string(field(n, "op", where), node_where + " 'op'");
      const int64_t version = integer(field(n, "version", where), node_where + " 'version'");
      if (version < 1) error("node '{}' ({}) has invalid op version {}", name, op, version);
      if (const OpDef* def = OpRegistry::global().find(op); def && version > def->version)
        error("node '{}': op {} version {} is newer than this build supports ({})", name, op,
              version, def->version);
      const std::string device = string(field(n, "device", where), node_where + " 'device'");
      // Kernels exist for the CPU only; a node placed elsewhere would load and fail at run time.
      if (device.rfind("/cpu:", 0) != 0 || device.size() == 5 ||
          device.find_first_not_of("0123456789", 5) != std::string::npos)
        error("node '{}' ({}) is placed on device '{}'; this build runs nodes on /cpu:N only",
              name, op, device);
      std::vector<Output> inputs;
      const json& ins = array(field(n, "inputs", where), node_where + " 'inputs'");
      for (size_t k = 0; k < ins.size(); ++k) {
        const std::string in_where = fmt::format("node '{}' input {}", name, k);
        const json& pair = array(ins[k], in_where);
        if (pair.size() != 2) error("{} must be [node_index, output_index]", in_where);
        const size_t src = index(pair[0], i, in_where + " node index (must be an earlier node)");
        const size_t out = index(pair[1], graph.node(static_cast<int>(src)).outputs.size(),
                                 in_where + " output index");
        inputs.push_back(Output{static_cast<int>(src), static_cast<int>(out)});
      }
      Attrs attrs;
      const json& as = field(n, "attrs", where);
      if (!as.is_object()) error("{} 'attrs' must be an object", node_where);
      for (const auto& [key, value] : as.items()) {
        const std::string attr_where = fmt::format("node '{}' attribute '{}'", name, key);
        AttrValue v = attr(value, attr_where);
        check_shape_attr(key, v, attr_where);
        attrs.set(key, std::move(v));
      }
      int id;
      try {
        id = graph.add_node(op, std::move(inputs), std::move(attrs), name);
      } catch (const Error& e) {
        error("{}", e.what());
      }
      Node& added = graph.mutable_node(id);
      added.device = device;
      for (const auto& [key, value] : added.attrs.all())
        if (const auto* t = std::get_if<Tensor>(&value); t != nullptr && t->defined())
          if (auto it = stored_.find(t->storage().get()); it != stored_.end())
            model.stored_weights[name] = it->second;
      for (size_t k = 0; k < added.outputs.size(); ++k)
        checked_numel(added.outputs[k].shape, fmt::format("node '{}' output {}", name, k));
    }
  }

  const unsigned char* data_;
  size_t size_;
  std::shared_ptr<void> keep_alive_;
  const std::string& name_;
  uint64_t meta_offset_ = 0, meta_size_ = 0, data_offset_ = 0, data_size_ = 0;
  bool metadata_deflated_ = false;
  uint32_t version_ = 0;
  std::vector<Tensor> tensors_;
  std::map<const Storage*, StoredWeights> stored_;  // decoded tensor -> how it was stored
  const json* nodes_json_ = nullptr;
};

// Closes the descriptor on every path out of load_model.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

ModelFile load_model_from_memory(const void* data, size_t size, std::shared_ptr<void> keep_alive,
                                 const std::string& name) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  if (reinterpret_cast<uintptr_t>(data) % kAlign != 0 && size > 0) {
    // Tensors promise 64-byte alignment, so an unaligned buffer is copied once.
    std::shared_ptr<Storage> copy = Storage::allocate(size);
    std::memcpy(copy->data(), data, size);
    bytes = static_cast<const unsigned char*>(copy->data());
    keep_alive = std::move(copy);
  }
  try {
    return Reader(bytes, size, std::move(keep_alive), name).read();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    // A library exception (json, std::out_of_range, ...) is still a bad file, not a crash.
    fail("{}: corrupt model: {}", name, e.what());
  }
}

namespace {

// The file mapped privately (see load_model), or an error naming it.
std::pair<std::shared_ptr<void>, size_t> map_model(const std::string& path) {
  Fd file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) fail("{}: cannot open model: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) fail("{}: cannot stat model: {}", path, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail("{}: is a directory, not a slimflow model", path);
  if (!S_ISREG(st.st_mode)) fail("{}: not a regular file, not a slimflow model", path);
  const auto size = static_cast<size_t>(st.st_size);
  if (size == 0) fail("{}: empty file, not a slimflow model", path);
  // Private and writable: pages stay shared with the page cache until someone writes to one.
  void* map = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, file.fd, 0);
  if (map == MAP_FAILED) fail("{}: cannot map model: {}", path, std::strerror(errno));
  std::shared_ptr<void> mapping(map, [size](void* p) { ::munmap(p, size); });
  return {std::move(mapping), size};
}

}  // namespace

ModelFile load_model(const std::string& path) {
  auto [mapping, size] = map_model(path);
  void* map = mapping.get();
  return load_model_from_memory(map, size, std::move(mapping), path);
}

WeightsCheck verify_weights(const std::string& path) {
  auto [mapping, size] = map_model(path);
  try {
    return Reader(static_cast<const unsigned char*>(mapping.get()), size, mapping, path).verify();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("{}: corrupt model: {}", path, e.what());
  }
}

}  // namespace sf
