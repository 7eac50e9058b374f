# Cross-compiles for aarch64 with Debian's g++-aarch64-linux-gnu against the arm64 packages that
# scripts/sysroot-arm64.sh extracts into build/sysroot-arm64; ctest runs the results under
# qemu-aarch64. The C library comes from the cross toolchain, the rest from the sysroot.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

get_filename_component(SLIMFLOW_ARM64_SYSROOT "${CMAKE_CURRENT_LIST_DIR}/../build/sysroot-arm64"
                       ABSOLUTE)
if(NOT EXISTS "${SLIMFLOW_ARM64_SYSROOT}/.packages")
  message(FATAL_ERROR "no arm64 sysroot in ${SLIMFLOW_ARM64_SYSROOT}: run scripts/sysroot-arm64.sh "
                      "(scripts/build.sh aarch64 runs it)")
endif()
set(CMAKE_SYSROOT "${SLIMFLOW_ARM64_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)  # programs the build runs are the host's
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# -L makes qemu's loader read /lib/ld-linux-aarch64.so.1 and the libraries from the sysroot.
# The suite runs on a core without SVE, like the boards we deploy to (Cortex-A53/A72/A76: NEON,
# dot products). qemu's default core has 512-bit SVE, the only aarch64 ISA oneDNN 2.6 JITs for,
# and on some hosts qemu runs that code 10-100x slower than the NEON builds (one 3x3 convolution
# of 16x64x14x14: 9-19 s on a Xeon). tests/CMakeLists.txt runs the oneDNN kernel tests on it.
set(SLIMFLOW_QEMU_AARCH64 qemu-aarch64 -L "${SLIMFLOW_ARM64_SYSROOT}")
set(CMAKE_CROSSCOMPILING_EMULATOR ${SLIMFLOW_QEMU_AARCH64} -cpu max,sve=off)
