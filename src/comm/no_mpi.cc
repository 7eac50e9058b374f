// The Communicator of a build without MPI (CMake found no libopenmpi-dev): the interface
// stays, constructing one says what is missing, so single-process training is unchanged and an
// mpirun job is refused with a clear message instead of running N unrelated copies.
#include <cstdio>
#include <cstdlib>

#include "comm/communicator.h"
#include "core/error.h"

namespace sf {

bool built_with_mpi() { return false; }

struct CommRequest::State {};
CommRequest::CommRequest() = default;
CommRequest::~CommRequest() = default;
CommRequest::CommRequest(CommRequest&&) noexcept = default;
CommRequest& CommRequest::operator=(CommRequest&&) noexcept = default;
bool CommRequest::active() const { return false; }

struct Communicator::Impl {};

Communicator::Communicator(CommOptions) {
  fail("this slimflow was built without MPI (no libopenmpi-dev at configure time, or "
       "SLIMFLOW_MPI=OFF), so it cannot join a job of {} processes; rebuild with OpenMPI or run "
       "it without mpirun",
       launched_world_size());
}
Communicator::~Communicator() = default;

// Unreachable: no Communicator can be constructed in this build.
int Communicator::rank() const { return 0; }
int Communicator::size() const { return 1; }
double Communicator::timeout_seconds() const { return 0.0; }
int Communicator::max_tag() const { return 0; }
void Communicator::allreduce(Tensor&, ReduceOp, std::string_view) {}
CommRequest Communicator::iallreduce(Tensor&, ReduceOp, std::string_view) { return {}; }
void Communicator::broadcast(Tensor&, int, std::string_view) {}
std::vector<uint64_t> Communicator::allgather(uint64_t value, std::string_view) { return {value}; }
CommRequest Communicator::iallgather(const Tensor&, Tensor&, std::string_view) { return {}; }
void Communicator::barrier(std::string_view) {}
CommRequest Communicator::isend(const Tensor&, int, int, std::string_view) { return {}; }
CommRequest Communicator::irecv(Tensor&, int, int, std::string_view) { return {}; }
bool Communicator::test(CommRequest&) { return true; }
void Communicator::wait(CommRequest&) {}
void Communicator::wait(CommRequest&, double) {}
void Communicator::wait_all(std::vector<CommRequest>&) {}
void Communicator::abort(const std::string& message) {
  std::fprintf(stderr, "\nslimflow: error: %s\n", message.c_str());
  std::exit(1);
}

}  // namespace sf
