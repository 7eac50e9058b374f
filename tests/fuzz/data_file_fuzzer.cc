// libFuzzer target for the data-file readers: IDX (raw and gzip), .npy, images (stb_image and
// the conversion to a network input), the bottleneck cache of `retrain`, model specs and
// training checkpoints. The first byte picks the reader, the rest is the file. Any file must
// read or throw sf::Error, never crash or allocate what its header claims before the data is
// there to back it. A checkpoint ends in a CRC of the rest: the fuzzer appends the right one,
// so that mutations reach the parser behind the check.
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "fuzz/data_file_readers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The readers take paths; an in-memory file keeps the fuzzer off the disk.
  const int fd = memfd_create("data_file_fuzzer", 0);
  if (fd < 0) return 0;
  auto write_all = [fd](const uint8_t* bytes, size_t count) {
    while (count > 0) {
      const ssize_t n = write(fd, bytes, count);
      if (n <= 0) return;
      bytes += n;
      count -= static_cast<size_t>(n);
    }
  };
  write_all(data + 1, size - 1);
  if (sf::fuzz::kind_of(data[0]) == sf::fuzz::DataFileKind::checkpoint) {
    const uint32_t crc = static_cast<uint32_t>(crc32(0L, data + 1, static_cast<uInt>(size - 1)));
    const uint8_t le[4] = {static_cast<uint8_t>(crc), static_cast<uint8_t>(crc >> 8),
                           static_cast<uint8_t>(crc >> 16), static_cast<uint8_t>(crc >> 24)};
    write_all(le, sizeof(le));
  }
  try {
    sf::fuzz::read_as(sf::fuzz::kind_of(data[0]), "/proc/self/fd/" + std::to_string(fd));
  } catch (const sf::Error&) {
    // Rejecting bad input with a message is the expected outcome.
  }
  close(fd);
  return 0;
}
