// NumPy .npy files: one array, as written by numpy.save.
//
// Layout: the magic "\x93NUMPY", a major and a minor version byte, the header length (u16
// little-endian in version 1.0, u32 in 2.0), then an ASCII Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// padded with spaces and ending in '\n', then the elements in C (row-major) order.
//
// Reading accepts versions 1.0 and 2.0, C order only, and the little-endian dtypes '<f4',
// '<i4', '<i8', '|u1' and '|i1' (slimflow's f32, i32, i64, u8, i8). The header is parsed
// strictly and the shape is checked against the file's size before anything is allocated, so
// a corrupt or hostile file gives a one-line sf::Error naming the file. Writing produces
// version 1.0 with the header padded so the data starts at a multiple of 64 bytes.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace sf {

// Largest header accepted (numpy itself refuses headers over 10,000 bytes by default).
inline constexpr uint32_t kMaxNpyHeaderBytes = 1u << 16;

// Throws sf::Error "<path>: ..." on any problem: cannot open, bad magic, unsupported version,
// bad header syntax, unsupported dtype, Fortran order, or a shape that does not match the data
// present (truncated or trailing bytes).
Tensor read_npy(const std::string& path);

// Writes `t` as a version 1.0 .npy file. Throws sf::Error "<path>: ..." when the write fails.
void write_npy(const std::string& path, const Tensor& t);

}  // namespace sf
