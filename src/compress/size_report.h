// Deep Compression's size accounting for a model file: per weight tensor and in total, the
// bytes as dense fp32 -> pruned (sparse, relative indices) -> + quantized values (k-means or
// linear codebook) -> + Huffman coding of values and indices. The same encodings write the
// compressed model (compress_model), so the figures are the file's, not estimates.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "codec/sparse_codec.h"
#include "modelfile/model_file.h"

namespace sf {

struct SizeReportOptions {
  int bits = 0;                     // 0: no quantization stage
  std::string scheme = "kmeans";    // kmeans | linear
};

struct SizeReportRow {
  std::string node;  // the Const holding the weights
  std::string layer; // the conv/matmul node reading it
  int64_t total_weights = 0;
  int64_t nonzero_weights = 0;
  uint64_t fp32_bytes = 0;
  uint64_t pruned_bytes = 0;     // sparse f32 (or dense, when smaller)
  uint64_t quantized_bytes = 0;  // + codebook indices
  uint64_t final_bytes = 0;      // + Huffman
  SparseOptions final_options;   // the encoding final_bytes uses (index bits chosen by size)
  bool final_dense = false;      // final stage stores this tensor dense (sparse was larger)
};

struct SizeReport {
  std::vector<SizeReportRow> rows;
  uint64_t other_bytes = 0;  // biases and other tensors, kept fp32
  uint64_t fp32_bytes() const;
  uint64_t pruned_bytes() const;
  uint64_t quantized_bytes() const;
  uint64_t final_bytes() const;
  int64_t total_weights() const;
  int64_t nonzero_weights() const;
};

// Weight tensors: f32 Consts a layer reads as its weights (the weight inputs its op declares,
// OpDef::weights). Throws when the model has none.
SizeReport size_report(const ModelFile& model, const SizeReportOptions& options,
                       const std::string& what);

// Writes `model` with each reported weight in its final encoding (sparse, codebook, Huffman);
// loading the file decodes them back to dense f32 tensors.
void write_compressed_model(const ModelFile& model, const SizeReport& report,
                            const std::string& path);

}  // namespace sf
