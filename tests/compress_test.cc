// Huffman coding and the sparse (Deep Compression) weight encoding: round trips, sizes, and
// corrupt input rejected with an error instead of a crash.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "codec/huffman.h"
#include "codec/sparse_codec.h"
#include "compress/size_report.h"
#include "graph/graph.h"
#include "modelfile/model_file.h"
#include "ops/ops.h"
#include "runtime/session.h"
#include "core/error.h"
#include "support/temp_files.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

std::vector<uint32_t> skewed_symbols(size_t n, uint32_t alphabet, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::geometric_distribution<uint32_t> geo(0.3);
  std::vector<uint32_t> out(n);
  for (auto& s : out) s = std::min(geo(rng), alphabet - 1);
  return out;
}

std::vector<uint64_t> counts_of(const std::vector<uint32_t>& s, size_t alphabet) {
  std::vector<uint64_t> c(alphabet, 0);
  for (uint32_t x : s) ++c[x];
  return c;
}

TEST(Huffman, RoundTripsAndBeatsFixedWidthOnSkewedData) {
  const std::vector<uint32_t> symbols = skewed_symbols(10000, 32, 1);
  const auto counts = counts_of(symbols, 32);
  const HuffmanCode code = huffman_code(counts);
  const std::vector<uint8_t> stream = huffman_encode(code, symbols);
  EXPECT_EQ(huffman_decode(code, stream, symbols.size(), "t"), symbols);
  EXPECT_EQ((huffman_bits(code, counts) + 7) / 8, stream.size());
  EXPECT_LT(stream.size() * 8, symbols.size() * 5);  // fixed width would need 5 bits
}

TEST(Huffman, SingleSymbolAndLengthLimit) {
  const std::vector<uint32_t> one(100, 7);
  const HuffmanCode code = huffman_code(counts_of(one, 8));
  EXPECT_EQ(code.lengths[7], 1);
  EXPECT_EQ(huffman_decode(code, huffman_encode(code, one), 100, "t"), one);
  // Fibonacci counts make the deepest possible tree; lengths stay within the limit.
  std::vector<uint64_t> fib = {1, 1};
  while (fib.size() < 40) fib.push_back(fib[fib.size() - 1] + fib[fib.size() - 2]);
  const HuffmanCode deep = huffman_code(fib);
  for (uint8_t l : deep.lengths) EXPECT_LE(l, kMaxCodeLength);
  std::vector<uint32_t> all(40);
  for (uint32_t i = 0; i < 40; ++i) all[i] = i;
  EXPECT_EQ(huffman_decode(deep, huffman_encode(deep, all), 40, "t"), all);
}

TEST(Huffman, CorruptStreamsAreErrors) {
  const std::vector<uint32_t> symbols = skewed_symbols(1000, 16, 2);
  const HuffmanCode code = huffman_code(counts_of(symbols, 16));
  std::vector<uint8_t> stream = huffman_encode(code, symbols);
  stream.resize(stream.size() / 2);
  EXPECT_THROW(huffman_decode(code, stream, symbols.size(), "t"), Error);
  EXPECT_THROW(huffman_decode(code, stream, uint64_t{1} << 60, "t"), Error);  // no huge alloc
  HuffmanCode overfull{{1, 1, 1}};
  EXPECT_THROW(huffman_decode(overfull, stream, 1, "t"), Error);
  HuffmanCode too_long{{30, 1}};
  EXPECT_THROW(huffman_decode(too_long, stream, 1, "t"), Error);
}

Tensor sparse_tensor(const Shape& shape, double sparsity, uint64_t seed) {
  Tensor t = testing::random_tensor(shape, seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  for (int64_t i = 0; i < t.numel(); ++i)
    if (u(rng) < sparsity) t.data<float>()[i] = 0.0f;
  return t;
}

TEST(SparseCodec, F32ValuesRoundTripExactly) {
  for (double sparsity : {0.0, 0.5, 0.9, 0.999, 1.0})
    for (int index_bits : {2, 4, 8})
      for (bool huffman : {false, true}) {
        SCOPED_TRACE(::testing::Message() << sparsity << " " << index_bits << " " << huffman);
        const Tensor w = sparse_tensor({37, 61}, sparsity, 3);
        SparseSizes sizes;
        const std::vector<uint8_t> blob = encode_sparse(w, {index_bits, 0, huffman}, &sizes);
        EXPECT_EQ(sizes.bytes, blob.size());
        const Tensor back = decode_sparse(blob, w.shape(), "t");
        for (int64_t i = 0; i < w.numel(); ++i) ASSERT_EQ(back.data<float>()[i], w.data<float>()[i]);
      }
}

TEST(SparseCodec, CodebookValuesAreCentroidsAndZerosStayZero) {
  const Tensor w = sparse_tensor({300, 100}, 0.9, 4);
  for (bool huffman : {false, true}) {
    const std::vector<uint8_t> blob = encode_sparse(w, {5, 4, huffman});
    const Tensor back = decode_sparse(blob, w.shape(), "t");
    for (int64_t i = 0; i < w.numel(); ++i) {
      const float a = w.data<float>()[i], b = back.data<float>()[i];
      if (a == 0.0f) {
        ASSERT_EQ(b, 0.0f);
      } else {
        ASSERT_NE(b, 0.0f);
        ASSERT_NEAR(a, b, 0.2f);  // 16 centroids over [-1, 1]
      }
    }
    // 10% of 30000 values at ~4+5 bits each is far below their f32 bytes.
    EXPECT_LT(blob.size(), 30000 * 0.1 * 4 / 2.5);
  }
}

TEST(SparseCodec, CorruptBlobsAreErrors) {
  const Tensor w = sparse_tensor({20, 20}, 0.8, 5);
  const std::vector<uint8_t> blob = encode_sparse(w, {4, 3, true});
  EXPECT_THROW(decode_sparse(blob, {20, 21}, "t"), Error);  // element count
  for (size_t cut : {size_t{0}, size_t{3}, size_t{10}, blob.size() / 2, blob.size() - 1}) {
    std::vector<uint8_t> shorter(blob.begin(), blob.begin() + static_cast<std::ptrdiff_t>(cut));
    EXPECT_THROW(decode_sparse(shorter, w.shape(), "t"), Error) << cut;
  }
  // Flipping any byte either still decodes (a different value) or is an error, never a crash.
  for (size_t i = 0; i < blob.size(); ++i) {
    std::vector<uint8_t> flipped = blob;
    flipped[i] ^= 0x5a;
    try {
      decode_sparse(flipped, w.shape(), "t");
    } catch (const Error&) {
    }
  }
  std::vector<uint8_t> longer = blob;
  longer.push_back(0);
  EXPECT_THROW(decode_sparse(longer, w.shape(), "t"), Error);
}

// A one-layer model whose weights are 90% zeros.
ModelFile sparse_model() {
  ModelFile m;
  Graph& g = m.graph;
  Output x = ops::placeholder(g, DType::f32, {3, 64}, "x");
  Output w = ops::constant(g, sparse_tensor({64, 48}, 0.9, 7), "fc/weights");
  Output b = ops::constant(g, testing::random_tensor({48}, 8), "fc/bias");
  Output y = g.add("FusedMatMul", {x, w, b},
                   {{"transpose_a", false}, {"transpose_b", false}, {"activation", std::string("relu")}},
                   "fc");
  m.inputs = {"x"};
  m.outputs = {g.node(y.node).name};
  return m;
}

Tensor run_model(const ModelFile& m, const Tensor& x) {
  Session s(m.graph);
  return s.run({{Output{m.graph.id_of("x"), 0}, x}}, {Output{m.graph.id_of(m.outputs[0]), 0}})[0];
}

TEST(SizeReport, StagesShrinkAndTheWrittenFileRoundTrips) {
  const ModelFile m = sparse_model();
  const std::string dir = testing::make_temp_dir("sf-size");
  const Tensor x = testing::random_tensor({3, 64}, 9);
  for (int bits : {0, 5}) {
    SCOPED_TRACE(bits);
    const SizeReport r = size_report(m, {.bits = bits}, "m");
    ASSERT_EQ(r.rows.size(), 1u);  // the bias is not a weight
    EXPECT_EQ(r.total_weights(), 64 * 48);
    EXPECT_NEAR(static_cast<double>(r.nonzero_weights()) / (64 * 48), 0.1, 0.03);
    EXPECT_LT(r.pruned_bytes(), r.fp32_bytes() / 3);
    EXPECT_LE(r.final_bytes(), r.quantized_bytes());
    if (bits) {
      EXPECT_LT(r.quantized_bytes(), r.pruned_bytes());
    }
    const std::string path = dir + "/c" + std::to_string(bits) + ".sfm";
    write_compressed_model(m, r, path);
    const ModelFile loaded = load_model(path);
    EXPECT_EQ(loaded.stored_weights.count("fc/weights"), 1u);
    const Tensor& w = m.graph.node(m.graph.id_of("fc/weights")).attrs.get_tensor("value");
    const Tensor& back = loaded.graph.node(loaded.graph.id_of("fc/weights")).attrs.get_tensor("value");
    for (int64_t i = 0; i < w.numel(); ++i)
      ASSERT_EQ(back.data<float>()[i] == 0.0f, w.data<float>()[i] == 0.0f) << i;
    const Tensor want = run_model(m, x), got = run_model(loaded, x);
    for (int64_t i = 0; i < want.numel(); ++i) {
      if (bits == 0) {
        ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]);  // lossless
      } else {
        ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 0.3f);  // 5-bit centroids
      }
    }
  }
  EXPECT_THROW(size_report(m, {.bits = 9}, "m"), Error);
  EXPECT_THROW(size_report(m, {.bits = 4, .scheme = "lloyd"}, "m"), Error);
}

TEST(SizeReport, SparseStorageOnlyWhenSmaller) {
  EXPECT_TRUE(sparse_if_smaller(sparse_tensor({64, 64}, 0.9, 1)).has_value());
  EXPECT_FALSE(sparse_if_smaller(sparse_tensor({64, 64}, 0.0, 1)).has_value());
  EXPECT_FALSE(sparse_if_smaller(sparse_tensor({64, 64}, 0.02, 1)).has_value());
}

// i8 weights with about `sparsity` of them zero, the others in [-127, 127] and nonzero.
Tensor sparse_int8(const Shape& shape, double sparsity, uint64_t seed) {
  const Tensor f = sparse_tensor(shape, sparsity, seed);
  Tensor q(DType::i8, shape);
  for (int64_t i = 0; i < f.numel(); ++i) {
    const float v = f.data<float>()[i];
    const int level = static_cast<int>(std::lround(v * 127.0f)) % 128;
    q.data<int8_t>()[i] = static_cast<int8_t>(v == 0.0f ? 0 : (level == 0 ? 1 : level));
  }
  return q;
}

TEST(SparseCodec, Int8ValuesRoundTripExactly) {
  for (double sparsity : {0.0, 0.5, 0.97})
    for (bool huffman : {false, true}) {
      const Tensor w = sparse_int8({37, 61}, sparsity, 5);
      const std::vector<uint8_t> blob = encode_sparse(w, {6, 0, huffman});
      const Tensor back = decode_sparse(blob, w.shape(), "t");
      ASSERT_EQ(back.dtype(), DType::i8);
      EXPECT_EQ(testing::values<int8_t>(back), testing::values<int8_t>(w)) << sparsity;
      // As stored in a model file, the entry's dtype must agree with the blob's values.
      const quant::WeightEncoding sparse{.kind = quant::Encoding::sparse, .bits = 0};
      EXPECT_EQ(testing::values<int8_t>(
                    quant::decode(w.shape(), sparse, blob.data(), blob.size(), DType::i8)),
                testing::values<int8_t>(w));
      testing::expect_error(
          [&] { quant::decode(w.shape(), sparse, blob.data(), blob.size(), DType::f32); },
          "sparse data holds i8 values, but the tensor is f32");
    }
  // Codebooks are of f32 centroids; an i8 tensor is stored as it is.
  EXPECT_THROW(encode_sparse(sparse_int8({8, 8}, 0.5, 1), {4, 3, false}), Error);
}

TEST(SparseCodec, RejectsAnUnknownValueTypeAndI8WithACodebook) {
  std::vector<uint8_t> blob = encode_sparse(sparse_int8({16, 16}, 0.8, 2), {5, 0, false});
  std::vector<uint8_t> bad = blob;
  bad[7] = 2;  // value type
  testing::expect_error([&] { decode_sparse(bad, {16, 16}, "t"); }, "value type 2");
  bad = blob;
  bad[5] = 4;  // value bits with i8 values
  testing::expect_error([&] { decode_sparse(bad, {16, 16}, "t"); }, "cannot have a codebook");
}

TEST(SizeReport, Int8SparseStorageOnlyWhenSmaller) {
  const auto stored = sparse_if_smaller(sparse_int8({64, 64}, 0.9, 1));
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->dtype, DType::i8);
  EXPECT_LT(stored->data.size(), 64u * 64u / 4);
  EXPECT_FALSE(sparse_if_smaller(sparse_int8({64, 64}, 0.1, 1)).has_value());
}

}  // namespace
}  // namespace sf
