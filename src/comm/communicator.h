// One communicator over MPI (OpenMPI from Debian) for everything that crosses processes:
// data-parallel training's collectives and the tagged point-to-point transfers of a graph
// partitioned across processes. MPI's errors come back as sf::Error naming the rank and the
// operation (MPI_ERRORS_RETURN, never MPI's default abort), and no wait is unbounded: a
// collective or receive that gets no answer within the timeout throws, and a watchdog thread
// ends the process if an MPI call itself never returns, so a dead or hung peer ends the job in
// seconds instead of hanging it.
//
// A build without MPI (CMake did not find it) keeps this interface: built_with_mpi() is false
// and constructing a Communicator throws, naming the missing library.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace sf {

bool built_with_mpi();

// How many processes the launcher (mpirun / mpiexec, PMIx, Slurm) started this job with, read
// from the environment it sets; 1 when the process was started on its own. Needs no MPI.
int launched_world_size();
// This process's rank according to the launcher's environment; 0 when started on its own.
int launched_rank();

enum class ReduceOp { sum, min, max };

struct CommOptions {
  // Longest wait for peers in a collective or a receive before the job is declared broken.
  double timeout_seconds = 30.0;
};

// An operation in flight (non-blocking collective, send or receive). Move-only; the tensors it
// was started on must stay alive and untouched until it completes.
class CommRequest {
 public:
  CommRequest();
  ~CommRequest();
  CommRequest(CommRequest&&) noexcept;
  CommRequest& operator=(CommRequest&&) noexcept;
  bool active() const;

  struct State;  // defined by the implementation

 private:
  friend class Communicator;
  std::unique_ptr<State> state_;
};

class Communicator {
 public:
  // Initializes MPI (once per process: MPI allows no second MPI_Init) and works on all the
  // processes of the job. Throws sf::Error when MPI is missing or fails to start.
  explicit Communicator(CommOptions options = {});
  ~Communicator();  // MPI_Finalize
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  double timeout_seconds() const;

  // Collectives: every rank calls them in the same order with tensors of the same dtype and
  // element count. `what` names the operation in errors ("gradients, step 12").
  void allreduce(Tensor& t, ReduceOp op, std::string_view what);
  CommRequest iallreduce(Tensor& t, ReduceOp op, std::string_view what);
  void broadcast(Tensor& t, int root, std::string_view what);
  // Each rank's `value`, by rank.
  std::vector<uint64_t> allgather(uint64_t value, std::string_view what);
  // Every rank's `mine` (the same byte count on every rank) into `all`, rank after rank;
  // `all` holds size() times mine's bytes.
  CommRequest iallgather(const Tensor& mine, Tensor& all, std::string_view what);
  void barrier(std::string_view what);

  // Point-to-point, non-blocking, matched by (peer, tag). The receiver passes a tensor of the
  // dtype and shape it expects; a message of another dtype or shape is an error naming the tag,
  // the peer and both types. 0 <= tag <= max_tag(). `what`, when given, names the transfer in
  // errors instead of its tag ("allreduce of gradients (step 12): receive from rank 1 ...").
  CommRequest isend(const Tensor& t, int dest, int tag, std::string_view what = {});
  CommRequest irecv(Tensor& t, int source, int tag, std::string_view what = {});
  int max_tag() const;

  // True once `request` is complete (and then it is no longer active); drives MPI's progress.
  bool test(CommRequest& request);
  // Waits for completion; throws sf::Error after timeout_seconds() (or `timeout_seconds`).
  void wait(CommRequest& request);
  void wait(CommRequest& request, double timeout_seconds);
  void wait_all(std::vector<CommRequest>& requests);

  // Prints "slimflow: error: rank R: <message>" on stderr and ends the whole job (MPI_Abort):
  // what a rank does when it cannot go on, so that the others do not wait for it.
  [[noreturn]] void abort(const std::string& message);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sf
