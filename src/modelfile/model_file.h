// Frozen model files (.sfm): one file holding an inference graph, its weights and free-form
// metadata. Loading memory-maps the file and the weights are used in place, never copied.
//
// Layout (all integers little-endian; full description in docs/MODEL_FORMAT.md):
//
//   offset  size  field
//        0     8  magic "SFMODEL\0"
//        8     4  u32 format_version (this build reads 1 to 4)
//       12     4  u32 flags (version 2; reserved in version 1: written as 0, ignored when read)
//       16     8  u64 meta_offset   \ the metadata section: JSON, zlib-deflated when flagged
//       24     8  u64 meta_size     /
//       32     8  u64 data_offset   \ the tensor data section; data_offset is a multiple of 64
//       40     8  u64 data_size     /
//
// Flag bit 0 (version 2 only): the metadata section is a zlib stream that inflates to the JSON,
// at most kMaxInflatedMetadataBytes. save_model deflates it when that makes the file smaller and
// then writes version 2; otherwise it writes version 1 with plain JSON, as older builds did.
//
// The metadata is one UTF-8 JSON object:
//   {"inputs": [names], "outputs": [names], "metadata": {string: string},
//    "nodes": [{"name", "op", "version", "device", "inputs": [[node_index, output_index], ...],
//               "attrs": {"<name>": {"kind": "int|float|bool|string|ints|floats|tensor",
//                                    "value": ...}}}],
//    "tensors": [{"dtype", "shape", "offset", "bytes", "encoding": "dense", ...}]}
// A tensor attribute's value is an index into "tensors"; a tensor's offset is relative to
// data_offset and a multiple of 64, so with a page-aligned mapping every tensor is 64-byte
// aligned. Non-finite floats are written as the strings "nan", "inf" and "-inf".
//
// Besides "dense", f32 weights may be stored "linear", "kmeans" (quantized), "f16" or "bf16", with
// their parameters (bits, axis, scales, zero_points, codebook) as further entry fields; see
// codec/weight_codec.h. The loader validates and decodes them once into plain f32 tensors,
// so everything after loading sees dense weights.
//
// Ops are stored by name and OpDef::version; a file whose op version is newer than this build's
// is rejected. Node output types are not stored: the loader rebuilds the graph with
// Graph::add_node, which checks attributes (filling defaults for ones an older writer did not
// know) and re-runs each op's shape function, so a file cannot lie about shapes.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "codec/weight_codec.h"
#include "graph/graph.h"
#include "io/atomic_file.h"

namespace sf {

// The newest format version this build reads.
inline constexpr uint32_t kModelFormatVersion = 4;
// Deflated metadata that inflates to more is rejected (a bound on what a file can make the
// loader allocate); save_model writes larger metadata as plain JSON.
inline constexpr size_t kMaxInflatedMetadataBytes = size_t{64} << 20;

// How a node's weights were stored in the file when not dense (what `inspect` reports).
struct StoredWeights {
  quant::WeightEncoding encoding;  // as stored: bits, axis, scales, zero points, codebook
  uint64_t data_bytes = 0;         // bytes in the data section

  uint64_t stored_bytes() const { return data_bytes + encoding.parameter_bytes(); }
};

struct ModelFile {
  Graph graph;                                  // inference graph; Const nodes hold the weights
  std::vector<std::string> inputs;              // Placeholder node names, in order
  std::vector<std::string> outputs;             // output node names (output 0 of each)
  std::map<std::string, std::string> metadata;  // free-form: "producer", "source", "labels", ...
  size_t file_bytes = 0;                        // set by load_model
  // save_model: Const node name -> the encoded form written instead of its dense value.
  std::map<std::string, quant::EncodedTensor> encoded_weights;
  // load_model: node name -> how its tensor attribute was stored, for every encoded tensor.
  // The graph itself holds the decoded f32 tensors, so saving a loaded model writes them dense.
  std::map<std::string, StoredWeights> stored_weights;
};

// Writes atomically: a temporary file in the same folder, fsync, rename, fsync of the folder.
// Throws sf::Error "<path>: ..." when the model is inconsistent or the write fails. Returns the
// bytes written (what a file's size would say; `path` may be a device or pipe). `check` reads the
// complete file back before it replaces anything (AtomicFile).
uint64_t save_model(const std::string& path, const ModelFile& model, WrittenFileCheck check = {});

// Memory-maps the file (private, copy-on-write, so writing to a weight never changes the file).
// Dense tensor-valued attributes (Const "value") borrow the mapping, which is unmapped when the
// last tensor referring to it goes; encoded ones are decoded into their own f32 storage.
// Everything is validated before use; problems throw sf::Error "<path>: ..." naming what is
// wrong. The file must not be truncated while it is mapped.
ModelFile load_model(const std::string& path);

// The parser behind load_model, for fuzzers and in-memory models. `keep_alive` keeps `data`
// valid; tensors borrow it when `data` is 64-byte aligned, otherwise the bytes are copied into
// one aligned buffer first. `name` prefixes error messages.
ModelFile load_model_from_memory(const void* data, size_t size, std::shared_ptr<void> keep_alive,
                                 const std::string& name);

// Bytes of tensor data (weights) in the model; a tensor shared by several nodes counts once.
size_t weight_bytes(const ModelFile& model);

}  // namespace sf
