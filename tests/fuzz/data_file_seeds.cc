// Writes the data-file fuzzer's starting corpus into the folder argv[1]: small valid files of
// each kind the fuzzer reads, each behind the byte that selects its reader, so that mutations
// start from headers the readers accept (IDX of each element type, raw and gzip; .npy versions
// 1.0 and 2.0 of each dtype; PNG, PPM and BMP images; a bottleneck cache; the model specs of
// the folder argv[2], the repository's models/; a checkpoint, without its CRC, which the fuzzer
// appends).
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/error.h"
#include "fuzz/data_file_readers.h"

namespace {

using Bytes = std::vector<uint8_t>;

std::string folder;

int failures = 0;

// Writes `seed` behind its kind's byte, after checking that the reader accepts `file` (the
// seed as the fuzzer hands it to the reader).
void write_seed_checked(const std::string& name, sf::fuzz::DataFileKind kind, const Bytes& file,
                        const Bytes& seed) {
  const std::string body = folder + "/.tmp.check";
  {
    std::ofstream out(body, std::ios::binary);
    out.write(reinterpret_cast<const char*>(file.data()), static_cast<std::streamsize>(file.size()));
  }
  try {
    sf::fuzz::read_as(kind, body);
  } catch (const sf::Error& e) {
    std::fprintf(stderr, "seed %s does not read: %s\n", name.c_str(), e.what());
    ++failures;
  }
  std::remove(body.c_str());
  std::ofstream out(folder + "/" + name, std::ios::binary);
  out.put(static_cast<char>(kind));
  out.write(reinterpret_cast<const char*>(seed.data()), static_cast<std::streamsize>(seed.size()));
}

void write_seed(const std::string& name, sf::fuzz::DataFileKind kind, const Bytes& file) {
  write_seed_checked(name, kind, file, file);
}

Bytes read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

Bytes idx(uint8_t type, std::vector<uint32_t> dims, size_t element_bytes) {
  Bytes b = {0, 0, type, static_cast<uint8_t>(dims.size())};
  size_t count = 1;
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<uint8_t>(d >> shift));
    count *= d;
  }
  for (size_t i = 0; i < count * element_bytes; ++i) b.push_back(static_cast<uint8_t>(i * 37));
  return b;
}

Bytes gzipped(const Bytes& raw) {
  z_stream z{};
  deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  Bytes out(deflateBound(&z, raw.size()) + 32);
  z.next_in = const_cast<Bytes::value_type*>(raw.data());
  z.avail_in = static_cast<uInt>(raw.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

Bytes npy_of(const sf::Tensor& t) {
  const std::string path = folder + "/.tmp.npy";
  sf::write_npy(path, t);
  Bytes b = read_file(path);
  std::remove(path.c_str());
  return b;
}

// The same array in version 2.0: a u32 header length.
Bytes npy_v2(const Bytes& v1) {
  const size_t header = v1[8] | (v1[9] << 8);
  Bytes b(v1.begin(), v1.begin() + 8);
  b[6] = 2;
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>((header + 2) >> (8 * i)));
  b.insert(b.end(), v1.begin() + 10, v1.begin() + 10 + static_cast<std::ptrdiff_t>(header) - 1);
  b.insert(b.end(), {' ', ' ', '\n'});
  b.insert(b.end(), v1.begin() + 10 + static_cast<std::ptrdiff_t>(header), v1.end());
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s CORPUS_FOLDER MODEL_SPECS_FOLDER\n", argv[0]);
    return 2;
  }
  folder = argv[1];
  const std::string specs = argv[2];
  using sf::fuzz::DataFileKind;

  write_seed("u8.idx", DataFileKind::idx, idx(0x08, {3, 4, 4}, 1));
  write_seed("i8.idx", DataFileKind::idx, idx(0x09, {5}, 1));
  write_seed("i32.idx", DataFileKind::idx, idx(0x0C, {2, 3}, 4));
  write_seed("f32.idx", DataFileKind::idx, idx(0x0D, {2, 2, 2}, 4));
  write_seed("u8.idx.gz", DataFileKind::idx, gzipped(idx(0x08, {2, 28, 28}, 1)));

  for (sf::DType dtype : {sf::DType::f32, sf::DType::i32, sf::DType::i64, sf::DType::u8,
                          sf::DType::i8}) {
    sf::Tensor t(dtype, {2, 3});
    for (size_t i = 0; i < t.bytes(); ++i) static_cast<uint8_t*>(t.raw())[i] = static_cast<uint8_t>(i);
    const Bytes v1 = npy_of(t);
    write_seed(std::string(sf::dtype_name(dtype)) + ".npy", DataFileKind::npy, v1);
    write_seed(std::string(sf::dtype_name(dtype)) + "-v2.npy", DataFileKind::npy, npy_v2(v1));
  }
  write_seed("scalar.npy", DataFileKind::npy, npy_of(sf::Tensor::scalar_f32(1.5f)));

  uint8_t gray[6 * 5];
  for (size_t i = 0; i < sizeof(gray); ++i) gray[i] = static_cast<uint8_t>(i * 9);
  const std::string png = folder + "/.tmp.png";
  sf::write_png(png, gray, 6, 5);
  write_seed("gray.png", DataFileKind::image, read_file(png));
  std::remove(png.c_str());
  const std::string ppm = "P6\n3 2\n255\n";
  Bytes rgb(ppm.begin(), ppm.end());
  for (int i = 0; i < 18; ++i) rgb.push_back(static_cast<uint8_t>(i * 14));
  write_seed("rgb.ppm", DataFileKind::image, rgb);
  // A 2x2 24-bit BMP: 14-byte file header, 40-byte info header, rows padded to 4 bytes.
  Bytes bmp = {'B', 'M', 70, 0, 0, 0, 0, 0, 0, 0, 54, 0, 0, 0, 40, 0, 0, 0, 2, 0, 0, 0, 2, 0,
               0, 0, 1, 0, 24, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
               0, 0, 0, 0};
  for (int i = 0; i < 16; ++i) bmp.push_back(static_cast<uint8_t>(i * 15));
  write_seed("rgb.bmp", DataFileKind::image, bmp);

  const sf::BottleneckKey key = sf::fuzz::bottleneck_key();
  const std::vector<uint64_t> hashes = {1, 2, 0x1234};
  const std::vector<float> rows = {0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f, 7.5f, 8.5f};
  const std::string cache = folder + "/.tmp.cache";
  sf::write_bottleneck_cache(cache, key, hashes,
                             [&](size_t i) { return rows.data() + i * static_cast<size_t>(key.dim); });
  write_seed("bottleneck.cache", DataFileKind::bottleneck_cache, read_file(cache));
  std::remove(cache.c_str());

  for (const auto& entry : std::filesystem::directory_iterator(specs))
    if (entry.path().extension() == ".yaml")
      write_seed(entry.path().filename().string(), DataFileKind::model_spec,
                 read_file(entry.path().string()));

  sf::Checkpoint checkpoint;
  checkpoint.metadata_json = R"({"step": 3})";
  checkpoint.tensors.emplace("conv1/weights", sf::Tensor(sf::DType::f32, {3, 3, 1, 2}));
  checkpoint.tensors.emplace("step", sf::Tensor(sf::DType::i64, {}));
  checkpoint.tensors.emplace("mask", sf::Tensor(sf::DType::u8, {5}));
  const std::string sfck = folder + "/.tmp.sfck";
  sf::save_checkpoint(sfck, checkpoint);
  Bytes with_crc = read_file(sfck);
  std::remove(sfck.c_str());
  write_seed_checked("checkpoint.sfck", DataFileKind::checkpoint, with_crc,
                     Bytes(with_crc.begin(), with_crc.end() - 4));
  return failures == 0 ? 0 : 1;
}
