// What the launcher tells a process about its job, read without MPI: the single-process build
// uses it to refuse an mpirun job it cannot join, and the MPI build to decide whether to start
// MPI at all (a plain run never pays for MPI_Init).
#include <algorithm>
#include <cstdlib>
#include <string>

#include "comm/communicator.h"

namespace sf {
namespace {

int env_int(const char* const* names, int fallback) {
  for (const char* const* name = names; *name; ++name)
    if (const char* value = std::getenv(*name)) {
      char* end = nullptr;
      long parsed = std::strtol(value, &end, 10);
      if (end != value && *end == '\0' && parsed >= 0 && parsed < (1 << 24))
        return static_cast<int>(parsed);
    }
  return fallback;
}

}  // namespace

int launched_world_size() {
  // OpenMPI's mpirun, and MPICH/Hydra or srun with PMI. (Slurm's own SLURM_NTASKS is also set
  // in a batch script that runs a plain process, so it proves nothing.)
  static const char* const kNames[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", nullptr};
  return std::max(env_int(kNames, 1), 1);
}

int launched_rank() {
  static const char* const kNames[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", nullptr};
  return env_int(kNames, 0);
}

}  // namespace sf
