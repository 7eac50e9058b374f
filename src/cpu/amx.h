// AMX tiles: Linux hands their state to a process only when it asks (arch_prctl), and a thread
// loads the shapes of its tiles, a 64-byte configuration, before it uses them.
#pragma once

#include <cstdint>

namespace sf {

// Whether this process may use AMX tiles: asks Linux once. False where the CPU (see
// cpu/cpu_features.h) or the system has none.
bool amx_permitted();

// Palette 1: the rows and bytes per row of tiles 0-7 (unused ones 0), for _tile_loadconfig.
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
  uint8_t reserved_rows[16] = {};
};

}  // namespace sf
