// The Communicator over MPI. Every call runs on the thread that constructed it (MPI is
// initialized with MPI_THREAD_FUNNELED); the watchdog thread makes no MPI call.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "comm/communicator.h"
#include "core/error.h"

// The sanitizer builds link OpenMPI, whose libraries keep some allocations until the process
// ends; they are not ours to fix.
#if defined(__SANITIZE_ADDRESS__)
extern "C" const char* __lsan_default_suppressions() {
  return "leak:libmpi.so\nleak:libopen-pal.so\nleak:libopen-rte.so\nleak:libhwloc.so\n"
         "leak:libevent\nleak:libpmix.so\nleak:mca_\n";
}
#endif

namespace sf {

bool built_with_mpi() { return true; }

namespace {

using Clock = std::chrono::steady_clock;

// A tensor message's header: dtype, rank, then up to kMaxHeaderDims dims.
constexpr int kMaxHeaderDims = 8;
constexpr int kHeaderWords = 2 + kMaxHeaderDims;

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::i8: return MPI_INT8_T;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return MPI_SUM;
    case ReduceOp::min: return MPI_MIN;
    case ReduceOp::max: return MPI_MAX;
  }
  return MPI_SUM;
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return fmt::format("MPI error {}", code);
  return std::string(text, static_cast<size_t>(length));
}

std::string type_text(DType dtype, const Shape& shape) {
  return std::string(dtype_name(dtype)) + shape_str(shape);
}

}  // namespace

struct CommRequest::State {
  std::vector<MPI_Request> requests;
  std::string what;
  // A receive checks the header that came with the data against what it expected.
  bool is_receive = false;
  int peer = -1;
  int tag = -1;
  DType expected_dtype = DType::f32;
  Shape expected_shape;
  std::vector<int64_t> header;
  std::vector<MPI_Status> statuses;
  Clock::time_point started = Clock::now();
};

CommRequest::CommRequest() = default;
CommRequest::~CommRequest() = default;
CommRequest::CommRequest(CommRequest&&) noexcept = default;
CommRequest& CommRequest::operator=(CommRequest&&) noexcept = default;
bool CommRequest::active() const { return state_ != nullptr; }

struct Communicator::Impl {
  CommOptions options;
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  int max_tag = 0;

  // The watchdog: while the communicating thread waits, `deadline_ns` holds the time by which
  // its wait must have ended; if an MPI call never returns to let it check, this thread ends
  // the process after a grace period.
  std::atomic<int64_t> deadline_ns{0};
  std::string waiting_for;  // guarded by mutex
  std::mutex mutex;
  std::condition_variable stop_signal;
  bool stopping = false;
  std::thread watchdog;

  void check(int code, std::string_view call, std::string_view what) const {
    if (code != MPI_SUCCESS)
      fail("rank {}: {} ({}) failed: {}", rank, call, what, mpi_error_text(code));
  }

  void arm(double timeout_seconds, std::string_view what) {
    {
      std::lock_guard lock(mutex);
      waiting_for = what;
    }
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(timeout_seconds));
    deadline_ns.store(deadline.time_since_epoch().count());
  }
  void disarm() { deadline_ns.store(0); }

  void watch() {
    // Long enough for the waiting thread to notice its own timeout and report it properly.
    constexpr auto kGrace = std::chrono::seconds(5);
    std::unique_lock lock(mutex);
    while (!stopping) {
      stop_signal.wait_for(lock, std::chrono::milliseconds(250));
      const int64_t deadline = deadline_ns.load();
      if (stopping || deadline == 0) continue;
      if (Clock::now() > Clock::time_point(Clock::duration(deadline)) + kGrace) {
        std::fprintf(stderr,
                     "\nslimflow: error: rank %d: %s is stuck in MPI %.0f s past its timeout "
                     "(a peer died or the network is gone); ending this process\n",
                     rank, waiting_for.c_str(),
                     std::chrono::duration<double>(kGrace).count());
        std::fflush(stderr);
        _exit(1);  // without MPI_Finalize, so mpirun ends the other ranks too
      }
    }
  }
};

Communicator::Communicator(CommOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  if (!(options.timeout_seconds > 0.0))
    fail("communicator: the timeout must be positive, got {} s", options.timeout_seconds);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) fail("communicator: MPI is already initialized in this process");
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
    fail("communicator: MPI_Init_thread failed (is this process started by mpirun?)");
  // A copy of the world communicator, so our error handler and our tags are our own.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  impl_->check(MPI_Comm_dup(MPI_COMM_WORLD, &impl_->comm), "MPI_Comm_dup", "setup");
  MPI_Comm_set_errhandler(impl_->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(impl_->comm, &impl_->rank);
  MPI_Comm_size(impl_->comm, &impl_->size);
  int* tag_ub = nullptr;
  int has_tag_ub = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &has_tag_ub);
  // Each tensor message uses two MPI tags: its header's and its data's.
  impl_->max_tag = (has_tag_ub && tag_ub ? *tag_ub : 32767) / 2 - 1;
  impl_->watchdog = std::thread([impl = impl_.get()] { impl->watch(); });
}

Communicator::~Communicator() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->stop_signal.notify_all();
  if (impl_->watchdog.joinable()) impl_->watchdog.join();
  if (impl_->comm != MPI_COMM_NULL) MPI_Comm_free(&impl_->comm);
  MPI_Finalize();
}

int Communicator::rank() const { return impl_->rank; }
int Communicator::size() const { return impl_->size; }
double Communicator::timeout_seconds() const { return impl_->options.timeout_seconds; }
int Communicator::max_tag() const { return impl_->max_tag; }

CommRequest Communicator::iallreduce(Tensor& t, ReduceOp op, std::string_view what) {
  CommRequest request;
  request.state_ = std::make_unique<CommRequest::State>();
  auto& s = *request.state_;
  s.what = fmt::format("allreduce of {}", what);
  s.requests.resize(1);
  if (t.numel() > std::numeric_limits<int>::max())
    fail("rank {}: {}: {} elements is more than MPI can count in one call", impl_->rank, s.what,
         t.numel());
  impl_->check(MPI_Iallreduce(MPI_IN_PLACE, t.raw(), static_cast<int>(t.numel()),
                              mpi_type(t.dtype()), mpi_op(op), impl_->comm, &s.requests[0]),
               "MPI_Iallreduce", what);
  return request;
}

void Communicator::allreduce(Tensor& t, ReduceOp op, std::string_view what) {
  CommRequest request = iallreduce(t, op, what);
  wait(request);
}

void Communicator::broadcast(Tensor& t, int root, std::string_view what) {
  if (root < 0 || root >= impl_->size)
    fail("rank {}: broadcast of {}: root {} is not a rank of this {}-rank job", impl_->rank, what,
         root, impl_->size);
  CommRequest request;
  request.state_ = std::make_unique<CommRequest::State>();
  request.state_->what = fmt::format("broadcast of {}", what);
  request.state_->requests.resize(1);
  impl_->check(MPI_Ibcast(t.raw(), static_cast<int>(t.bytes()), MPI_BYTE, root, impl_->comm,
                          &request.state_->requests[0]),
               "MPI_Ibcast", what);
  wait(request);
}

std::vector<uint64_t> Communicator::allgather(uint64_t value, std::string_view what) {
  std::vector<uint64_t> values(static_cast<size_t>(impl_->size));
  CommRequest request;
  request.state_ = std::make_unique<CommRequest::State>();
  request.state_->what = fmt::format("allgather of {}", what);
  request.state_->requests.resize(1);
  impl_->check(MPI_Iallgather(&value, 1, MPI_UINT64_T, values.data(), 1, MPI_UINT64_T,
                              impl_->comm, &request.state_->requests[0]),
               "MPI_Iallgather", what);
  wait(request);
  return values;
}

CommRequest Communicator::iallgather(const Tensor& mine, Tensor& all, std::string_view what) {
  if (all.bytes() != mine.bytes() * static_cast<size_t>(impl_->size))
    fail("rank {}: allgather of {}: {} bytes cannot hold {} ranks x {} bytes", impl_->rank, what,
         all.bytes(), impl_->size, mine.bytes());
  CommRequest request;
  request.state_ = std::make_unique<CommRequest::State>();
  request.state_->what = fmt::format("allgather of {}", what);
  request.state_->requests.resize(1);
  impl_->check(MPI_Iallgather(mine.raw(), static_cast<int>(mine.bytes()), MPI_BYTE, all.raw(),
                              static_cast<int>(mine.bytes()), MPI_BYTE, impl_->comm,
                              &request.state_->requests[0]),
               "MPI_Iallgather", what);
  return request;
}

void Communicator::barrier(std::string_view what) {
  CommRequest request;
  request.state_ = std::make_unique<CommRequest::State>();
  request.state_->what = fmt::format("barrier ({})", what);
  request.state_->requests.resize(1);
  impl_->check(MPI_Ibarrier(impl_->comm, &request.state_->requests[0]), "MPI_Ibarrier", what);
  wait(request);
}

CommRequest Communicator::isend(const Tensor& t, int dest, int tag, std::string_view what) {
  if (dest < 0 || dest >= impl_->size || dest == impl_->rank)
    fail("rank {}: send with tag {}: {} is not another rank of this {}-rank job", impl_->rank, tag,
         dest, impl_->size);
  if (tag < 0 || tag > impl_->max_tag)
    fail("rank {}: send to rank {}: tag {} is outside 0..{}", impl_->rank, dest, tag,
         impl_->max_tag);
  if (t.rank() > kMaxHeaderDims)
    fail("rank {}: send to rank {} (tag {}): a tensor of rank {} (at most {})", impl_->rank, dest,
         tag, t.rank(), kMaxHeaderDims);
  CommRequest request;
  request.state_ = std::make_unique<CommRequest::State>();
  auto& s = *request.state_;
  s.what = what.empty() ? fmt::format("send of tag {} to rank {}", tag, dest)
                        : fmt::format("{}: send to rank {}", what, dest);
  s.header.assign(kHeaderWords, 0);
  s.header[0] = static_cast<int64_t>(t.dtype());
  s.header[1] = t.rank();
  for (int i = 0; i < t.rank(); ++i) s.header[2 + i] = t.dim(i);
  s.requests.resize(2);
  impl_->check(MPI_Isend(s.header.data(), kHeaderWords, MPI_INT64_T, dest, 2 * tag, impl_->comm,
                         &s.requests[0]),
               "MPI_Isend", s.what);
  impl_->check(MPI_Isend(t.numel() ? t.raw() : nullptr, static_cast<int>(t.bytes()), MPI_BYTE,
                         dest, 2 * tag + 1, impl_->comm, &s.requests[1]),
               "MPI_Isend", s.what);
  return request;
}

CommRequest Communicator::irecv(Tensor& t, int source, int tag, std::string_view what) {
  if (source < 0 || source >= impl_->size || source == impl_->rank)
    fail("rank {}: receive with tag {}: {} is not another rank of this {}-rank job", impl_->rank,
         tag, source, impl_->size);
  if (tag < 0 || tag > impl_->max_tag)
    fail("rank {}: receive from rank {}: tag {} is outside 0..{}", impl_->rank, source, tag,
         impl_->max_tag);
  CommRequest request;
  request.state_ = std::make_unique<CommRequest::State>();
  auto& s = *request.state_;
  s.what = what.empty() ? fmt::format("receive of tag {} from rank {}", tag, source)
                        : fmt::format("{}: receive from rank {}", what, source);
  s.is_receive = true;
  s.peer = source;
  s.tag = tag;
  s.expected_dtype = t.dtype();
  s.expected_shape = t.shape();
  s.header.assign(kHeaderWords, 0);
  s.requests.resize(2);
  impl_->check(MPI_Irecv(s.header.data(), kHeaderWords, MPI_INT64_T, source, 2 * tag, impl_->comm,
                         &s.requests[0]),
               "MPI_Irecv", s.what);
  impl_->check(MPI_Irecv(t.numel() ? t.raw() : nullptr, static_cast<int>(t.bytes()), MPI_BYTE,
                         source, 2 * tag + 1, impl_->comm, &s.requests[1]),
               "MPI_Irecv", s.what);
  return request;
}

namespace {

// Checks a completed receive's header against what the receiver expected.
void check_received(const CommRequest::State& s, int rank, int data_error) {
  const int64_t rank_sent = s.header[1];
  Shape shape;
  bool valid = s.header[0] >= 0 && s.header[0] <= static_cast<int64_t>(DType::i8) &&
               rank_sent >= 0 && rank_sent <= kMaxHeaderDims;
  if (valid)
    for (int64_t i = 0; i < rank_sent; ++i) shape.push_back(s.header[static_cast<size_t>(2 + i)]);
  const std::string expected = type_text(s.expected_dtype, s.expected_shape);
  if (!valid)
    fail("rank {}: {}: the message is not a tensor (expected {})", rank, s.what, expected);
  const auto dtype = static_cast<DType>(s.header[0]);
  if (dtype != s.expected_dtype || shape != s.expected_shape)
    fail("rank {}: {}: expected {}, got {}", rank, s.what, expected, type_text(dtype, shape));
  if (data_error != MPI_SUCCESS)
    fail("rank {}: {} ({}) failed: {}", rank, s.what, expected, mpi_error_text(data_error));
}

}  // namespace

bool Communicator::test(CommRequest& request) {
  if (!request.active()) return true;
  auto& s = *request.state_;
  int done = 0;
  s.statuses.resize(s.requests.size());
  const int code = MPI_Testall(static_cast<int>(s.requests.size()), s.requests.data(), &done,
                               s.statuses.data());
  if (code == MPI_ERR_IN_STATUS) {
    // A receive whose data was larger than expected fails with MPI_ERR_TRUNCATE; its header says
    // what was sent, which makes the better message.
    if (s.is_receive && s.statuses[0].MPI_ERROR == MPI_SUCCESS) {
      // The header arrived; report the mismatch it shows.
      check_received(s, impl_->rank, s.statuses[1].MPI_ERROR);
    }
    for (const MPI_Status& status : s.statuses)
      if (status.MPI_ERROR != MPI_SUCCESS && status.MPI_ERROR != MPI_ERR_PENDING)
        impl_->check(status.MPI_ERROR, "MPI_Testall", s.what);
  }
  impl_->check(code, "MPI_Testall", s.what);
  if (!done) return false;
  if (s.is_receive) check_received(s, impl_->rank, MPI_SUCCESS);
  request.state_.reset();
  return true;
}

void Communicator::wait(CommRequest& request) { wait(request, impl_->options.timeout_seconds); }

void Communicator::wait(CommRequest& request, double timeout_seconds) {
  if (!request.active()) return;
  const std::string what = request.state_->what;
  const auto started = Clock::now();
  impl_->arm(timeout_seconds, what);
  try {
    int polls = 0;
    while (!test(request)) {
      if (std::chrono::duration<double>(Clock::now() - started).count() > timeout_seconds)
        fail("rank {}: {} got no answer in {:g} s: another rank died or hangs (--comm-timeout)",
             impl_->rank, what, timeout_seconds);
      // Spin briefly (an answer is usually microseconds away), then let other work run.
      if (++polls > 1000) std::this_thread::yield();
    }
  } catch (...) {
    impl_->disarm();
    throw;
  }
  impl_->disarm();
}

void Communicator::wait_all(std::vector<CommRequest>& requests) {
  for (CommRequest& r : requests) wait(r);
}

void Communicator::abort(const std::string& message) {
  std::fprintf(stderr, "\nslimflow: error: %s%s\n",
               message.rfind("rank ", 0) == 0 ? "" : fmt::format("rank {}: ", impl_->rank).c_str(),
               message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  _exit(1);
}

}  // namespace sf
