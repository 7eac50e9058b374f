#include "cpu/thread_wait_policy.h"

#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace sf {

bool should_wait_passively(const char* omp_wait_policy, const char* gomp_spincount,
                           int others_running, int cores) {
  if (omp_wait_policy != nullptr || gomp_spincount != nullptr) return false;
  return cores > 0 && others_running >= 1;
}

namespace {

// Tasks ready to run or running now on the machine (/proc/loadavg's "R/T" field); -1 when
// unreadable.
int runnable_tasks() {
  std::ifstream in("/proc/loadavg");
  double one = 0.0, five = 0.0, fifteen = 0.0;
  std::string runnable_of_total;
  if (!(in >> one >> five >> fifteen >> runnable_of_total)) return -1;
  const int runnable = std::atoi(runnable_of_total.c_str());
  return runnable >= 1 ? runnable : -1;
}

// The threads of process `proc` ("/proc/self", "/proc/1234") that are running or ready to run
// (state R in its task/*/stat).
int runnable_threads(const std::filesystem::path& proc) {
  int running = 0;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(proc / "task", ec)) {
    std::ifstream in(task.path() / "stat");
    std::string line;
    if (!std::getline(in, line)) continue;
    const size_t name_end = line.rfind(')');  // the name may hold spaces and parentheses
    if (name_end != std::string::npos && name_end + 2 < line.size() && line[name_end + 2] == 'R')
      ++running;
  }
  return running;
}

// A pipe as every process that has it open sees it.
struct PipeId {
  dev_t device;
  ino_t inode;
  bool operator==(const PipeId&) const = default;
};

std::optional<PipeId> pipe_at(const std::filesystem::path& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISFIFO(st.st_mode)) return std::nullopt;
  return PipeId{st.st_dev, st.st_ino};
}

int sample_other_tasks_running() {
  constexpr int kSamples = 5;
  std::vector<int> others;
  for (int i = 0; i < kSamples; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const int runnable = runnable_tasks();
    if (runnable < 0) return -1;
    int mine = std::max(runnable_threads("/proc/self"), 1);  // at least the thread reading
    // What reads this process's output waits for it rather than competing with it. Found at
    // each sample: the shell may still be setting up a later stage of the pipeline.
    for (int pid : pipeline_readers(STDOUT_FILENO))
      mine += runnable_threads(std::filesystem::path("/proc") / std::to_string(pid));
    others.push_back(std::max(runnable - mine, 0));
  }
  std::sort(others.begin(), others.end());
  return others[kSamples / 2];
}

}  // namespace

std::vector<int> pipeline_readers(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode)) return {};
  // Every other process's standard input and output, where its input is a pipe.
  struct Ends {
    int pid;
    PipeId in;
    std::optional<PipeId> out;
  };
  std::vector<Ends> processes;
  const int self = static_cast<int>(getpid());
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const int pid = std::atoi(name.c_str());
    if (pid == self) continue;
    const std::optional<PipeId> in = pipe_at(entry.path() / "fd" / "0");
    if (in) processes.push_back({pid, *in, pipe_at(entry.path() / "fd" / "1")});
  }
  std::vector<int> readers;
  std::vector<bool> taken(processes.size(), false);
  std::vector<PipeId> pipes = {PipeId{st.st_dev, st.st_ino}};
  while (!pipes.empty()) {
    std::vector<PipeId> next;
    for (size_t i = 0; i < processes.size(); ++i) {
      if (taken[i] || std::find(pipes.begin(), pipes.end(), processes[i].in) == pipes.end())
        continue;
      taken[i] = true;
      readers.push_back(processes[i].pid);
      if (processes[i].out) next.push_back(*processes[i].out);
    }
    pipes = std::move(next);
  }
  return readers;
}

int other_tasks_running() {
  // Start-up asks up to three times (wait policy, placement log, device pinning); one reading
  // serves them all, so a run pays the ~4 ms of sampling once, not per question.
  using Clock = std::chrono::steady_clock;
  constexpr auto kReadingLifetime = std::chrono::seconds(1);
  static std::mutex mutex;
  static std::optional<std::pair<Clock::time_point, int>> reading;
  const std::lock_guard<std::mutex> lock(mutex);
  const Clock::time_point now = Clock::now();
  if (!reading || now - reading->first > kReadingLifetime)
    reading = std::make_pair(now, sample_other_tasks_running());
  return reading->second;
}

std::string reason_to_wait_passively() {
  const int others = other_tasks_running();
  if (others < 0) return "";
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
  if (!should_wait_passively(std::getenv("OMP_WAIT_POLICY"), std::getenv("GOMP_SPINCOUNT"), others,
                             cores))
    return "";
  return fmt::format("{} other task{} running on {} cores", others, others == 1 ? "" : "s", cores);
}

std::string thread_wait_policy() {
  if (const char* policy = std::getenv("OMP_WAIT_POLICY")) {
    const char* reason = std::getenv(kWaitPolicyReasonVariable);
    if (reason != nullptr && *reason != '\0') return std::string(policy) + " (" + reason + ")";
    return std::string(policy) + " (OMP_WAIT_POLICY)";
  }
  if (const char* spins = std::getenv("GOMP_SPINCOUNT"))
    return "spin " + std::string(spins) + " times, then sleep (GOMP_SPINCOUNT)";
  return "spin, then sleep (libgomp's default)";
}

}  // namespace sf
