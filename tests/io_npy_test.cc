#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "io/npy.h"
#include "support/temp_files.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using testing::TempDir;
using testing::read_file_bytes;
using testing::write_file_bytes;

using namespace std::string_literals;

// A .npy file with the given header dict and data, padded like numpy pads.
std::string make_npy(const std::string& dict, const std::string& data, int major = 1) {
  size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::string out = "\x93NUMPY"s + static_cast<char>(major) + '\0';
  for (size_t i = 0; i < prefix - 8; ++i)
    out.push_back(static_cast<char>(header.size() >> (8 * i)));
  return out + header + data;
}

using testing::error_of;

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

bool have_numpy() { return std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0; }

TEST(IoNpy, RoundTripsEveryDtype) {
  TempDir dir;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<Tensor> tensors = {
      Tensor::from_vector<float>({2, 3}, {0.5f, -1.25f, 3e38f, -inf, 1e-45f, -0.0f}),
      Tensor::from_vector<int32_t>({4}, {0, -1, std::numeric_limits<int32_t>::min(), 7}),
      Tensor::from_vector<int64_t>({1, 2, 1}, {std::numeric_limits<int64_t>::max(), -3}),
      Tensor::from_vector<uint8_t>({3, 1}, {0, 128, 255}),
      Tensor::from_vector<int8_t>({2, 2}, {-128, -1, 0, 127}),
      Tensor::from_vector<float>({}, {42.0f}),  // a scalar: shape ()
      Tensor(DType::i32, {0, 5}),               // no elements
  };
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::string path = dir.file(fmt::format("t{}.npy", i));
    write_npy(path, tensors[i]);
    std::string bytes = read_file_bytes(path);
    ASSERT_EQ(bytes.substr(0, 8), "\x93NUMPY\x01\x00"s);
    size_t header_len =
        static_cast<unsigned char>(bytes[8]) | (size_t{static_cast<unsigned char>(bytes[9])} << 8);
    EXPECT_EQ((10 + header_len) % 64, 0u) << "data is not 64-byte aligned";
    EXPECT_EQ(bytes[10 + header_len - 1], '\n');
    Tensor back = read_npy(path);
    EXPECT_TRUE(same_bytes(back, tensors[i])) << "tensor " << i << " " << shape_str(back.shape());
  }
  EXPECT_NE(read_file_bytes(dir.file("t0.npy"))
                .find("{'descr': '<f4', 'fortran_order': False, "
                      "'shape': (2, 3), }"),
            std::string::npos);
  EXPECT_NE(read_file_bytes(dir.file("t1.npy")).find("'shape': (4,)"), std::string::npos);
  EXPECT_NE(read_file_bytes(dir.file("t5.npy")).find("'shape': ()"), std::string::npos);
}

TEST(IoNpy, ReadsVersion2AndLooseSyntax) {
  TempDir dir;
  std::string data(8, '\0');
  data[0] = 1;
  data[4] = 2;
  write_file_bytes(dir.file("v2.npy"),
              make_npy("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", data, 2));
  Tensor t = read_npy(dir.file("v2.npy"));
  EXPECT_EQ(t.shape(), (Shape{2}));
  EXPECT_EQ(t.data<int32_t>()[1], 2);

  // Any key order, double quotes, no trailing comma, Python 2 long literals.
  write_file_bytes(
      dir.file("loose.npy"),
      make_npy("{\"shape\": (1L, 2L), \"fortran_order\": False, \"descr\": \"|u1\"}", "\x05\x06"));
  Tensor u = read_npy(dir.file("loose.npy"));
  EXPECT_EQ(u.shape(), (Shape{1, 2}));
  EXPECT_EQ(u.data<uint8_t>()[1], 6);
}

TEST(IoNpy, RejectsBadFiles) {
  TempDir dir;
  auto check = [&](const std::string& name, const std::string& bytes, const std::string& want) {
    std::string path = dir.file(name);
    write_file_bytes(path, bytes);
    std::string e = error_of([&] { read_npy(path); });
    EXPECT_NE(e.find(path + ": "), std::string::npos) << name << ": " << e;
    EXPECT_NE(e.find(want), std::string::npos) << name << ": " << e;
  };
  const std::string f4x2 = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  check("magic.npy", "\x93NUMPZ\x01\x00"s + std::string(100, ' '), "bad magic");
  check("short.npy", "\x93NU", "bad magic");
  check("empty.npy", "", "bad magic");
  check("v3.npy", "\x93NUMPY\x03\x00"s + std::string(100, ' '), "version 3.0 is not supported");
  check("f8.npy",
        make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", std::string(8, '\0')),
        ".npy dtype '<f8' is not supported (expected <f4, <i4, <i8, |u1 or |i1)");
  check("be.npy",
        make_npy("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", std::string(4, '\0')),
        "dtype '>f4' is not supported");
  check("struct.npy",
        make_npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }",
                 std::string(4, '\0')),
        "structured dtypes are not supported");
  check(
      "fortran.npy",
      make_npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", std::string(16, '\0')),
      "Fortran order");
  std::string whole = make_npy(f4x2, std::string(8, '\0'));
  check("truncated.npy", whole.substr(0, whole.size() - 1),
        "needs 8 bytes of data, the file has 7");
  check("trailing.npy", whole + "x", "1 bytes of unexpected data");
  check("header_cut.npy", whole.substr(0, 30), "truncated .npy file (header of");
  // A header claiming terabytes (or more than 2^64 bytes) in a tiny file.
  check("huge.npy",
        make_npy("{'descr': '<f4', 'fortran_order': False, "
                 "'shape': (1000000, 1000000), }",
                 "abcd"),
        "needs 4000000000000 bytes of data, the file has 4");
  check("huge2.npy",
        make_npy("{'descr': '<i8', 'fortran_order': False, "
                 "'shape': (4294967296, 4294967296, 4294967296), }",
                 "abcd"),
        "over 2^64");
  check("bigdim.npy",
        make_npy("{'descr': '<f4', 'fortran_order': False, "
                 "'shape': (99999999999999999999,), }",
                 "abcd"),
        "dimension too large");
  check("negative.npy",
        make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", "abcd"),
        "bad .npy header");
  check("nokey.npy", make_npy("{'descr': '<f4', 'shape': (1,), }", "abcd"), "missing one of");
  check("extra.npy",
        make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", "abcd"),
        "unexpected key 'x'");
  check("dup.npy",
        make_npy("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
                 "'shape': (1,)}",
                 "abcd"),
        "duplicate key 'descr'");
  check("unterminated.npy", make_npy("{'descr': '<f4", "abcd"), "unterminated string");
  check("garbage.npy", make_npy("hello", "abcd"), "expected '{'");
  check("notuple.npy", make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1)}", "abcd"),
        "trailing ','");
  check("after.npy", make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x", "abcd"),
        "text after the closing");
  // A header length beyond the limit is refused before anything is read into memory.
  check("long_header.npy", "\x93NUMPY\x02\x00\xff\xff\xff\x7f"s + std::string(64, ' '),
        "over the limit");

  std::string missing = dir.file("missing.npy");
  std::string e = error_of([&] { read_npy(missing); });
  EXPECT_NE(e.find(missing + ": cannot open"), std::string::npos) << e;
  e = error_of([&] { read_npy(dir.file("")); });
  EXPECT_NE(e.find("cannot open"), std::string::npos) << e;
  e = error_of([&] { write_npy(dir.file("no/such/dir/x.npy"), Tensor::scalar_f32(1.0f)); });
  EXPECT_NE(e.find("cannot create"), std::string::npos) << e;
}

// Files written by numpy read back here, and files written here read back in numpy.
TEST(IoNpy, InteroperatesWithNumpy) {
  if (!have_numpy()) GTEST_SKIP() << "/usr/bin/python3 with numpy is not available";
  TempDir dir;
  std::string script = dir.file("gen.py");
  write_file_bytes(script, R"(import sys, numpy as np
d = sys.argv[1]
np.save(d + '/f4.npy', np.arange(6, dtype='<f4').reshape(2, 3) / 4)
np.save(d + '/i4.npy', np.array([-5, 7], dtype='<i4'))
np.save(d + '/i8.npy', np.array([[2**40], [-(2**40)]], dtype='<i8'))
np.save(d + '/u1.npy', np.arange(250, 256, dtype='u1').reshape(1, 2, 3))
np.save(d + '/i1.npy', np.array(-7, dtype='i1'))
np.save(d + '/f8.npy', np.zeros(3))
np.save(d + '/fortran.npy', np.asfortranarray(np.ones((2, 3), dtype='<f4')))
with open(d + '/v2.npy', 'wb') as f:
    np.lib.format.write_array(f, np.array([1.5, 2.5], dtype='<f4'), version=(2, 0))
)");
  ASSERT_EQ(std::system(("/usr/bin/python3 " + script + " " + dir.file("")).c_str()), 0);

  Tensor f4 = read_npy(dir.file("f4.npy"));
  EXPECT_EQ(f4.shape(), (Shape{2, 3}));
  EXPECT_FLOAT_EQ(f4.data<float>()[5], 1.25f);
  Tensor i4 = read_npy(dir.file("i4.npy"));
  EXPECT_EQ(i4.data<int32_t>()[0], -5);
  Tensor i8 = read_npy(dir.file("i8.npy"));
  EXPECT_EQ(i8.shape(), (Shape{2, 1}));
  EXPECT_EQ(i8.data<int64_t>()[1], -(int64_t{1} << 40));
  Tensor u1 = read_npy(dir.file("u1.npy"));
  EXPECT_EQ(u1.shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(u1.data<uint8_t>()[5], 255);
  Tensor i1 = read_npy(dir.file("i1.npy"));
  EXPECT_EQ(i1.rank(), 0);
  EXPECT_EQ(i1.data<int8_t>()[0], -7);
  Tensor v2 = read_npy(dir.file("v2.npy"));
  EXPECT_FLOAT_EQ(v2.data<float>()[1], 2.5f);
  std::string e = error_of([&] { read_npy(dir.file("f8.npy")); });
  EXPECT_NE(e.find(".npy dtype '<f8' is not supported (expected <f4, <i4, <i8, |u1 or |i1)"),
            std::string::npos)
      << e;
  e = error_of([&] { read_npy(dir.file("fortran.npy")); });
  EXPECT_NE(e.find("Fortran order"), std::string::npos) << e;

  // The other direction: numpy checks what we wrote.
  write_npy(dir.file("ours_f4.npy"), Tensor::from_vector<float>({2, 2}, {1.0f, -2.0f, 0.5f, 8.0f}));
  write_npy(dir.file("ours_i8.npy"), Tensor::from_vector<int64_t>({3}, {1, -2, int64_t{1} << 50}));
  write_npy(dir.file("ours_i1.npy"), Tensor::from_vector<int8_t>({}, {-9}));
  std::string check = dir.file("check.py");
  write_file_bytes(check, R"(import sys, numpy as np
d = sys.argv[1]
a = np.load(d + '/ours_f4.npy')
assert a.dtype == np.float32 and a.shape == (2, 2) and a.tolist() == [[1, -2], [0.5, 8]], a
b = np.load(d + '/ours_i8.npy')
assert b.dtype == np.int64 and b.tolist() == [1, -2, 2**50], b
c = np.load(d + '/ours_i1.npy')
assert c.dtype == np.int8 and c.shape == () and int(c) == -9, c
)");
  EXPECT_EQ(std::system(("/usr/bin/python3 " + check + " " + dir.file("")).c_str()), 0);
}

}  // namespace
}  // namespace sf
