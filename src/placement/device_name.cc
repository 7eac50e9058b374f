#include "placement/device_name.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <thread>

#include "core/error.h"

namespace sf {

namespace {

constexpr char kExpected[] = "/cpu:N, /gpu:N or /job:NAME/task:K/cpu:N";

// A non-negative decimal that fits an int, or -1.
int parse_index(std::string_view text) {
  if (text.empty() || text.size() > 6) return -1;
  int value = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0) return -1;
  return value;
}

bool valid_job_name(std::string_view job) {
  if (job.empty() || job.size() > 64) return false;
  for (char c : job)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

}  // namespace

DeviceName DeviceName::parse(const std::string& text, const std::string& where) {
  auto bad = [&]() -> DeviceName {
    fail("{}: device '{}' is not a device name (expected {})", where, text, kExpected);
  };
  DeviceName name;
  std::string_view rest = text;
  if (rest.starts_with("/job:")) {
    rest.remove_prefix(5);
    const size_t slash = rest.find('/');
    if (slash == std::string_view::npos) return bad();
    name.job = std::string(rest.substr(0, slash));
    if (!valid_job_name(name.job)) return bad();
    rest.remove_prefix(slash);
    if (!rest.starts_with("/task:")) return bad();
    rest.remove_prefix(6);
    const size_t next = rest.find('/');
    if (next == std::string_view::npos) return bad();
    name.task = parse_index(rest.substr(0, next));
    if (name.task < 0) return bad();
    rest.remove_prefix(next);
  }
  if (!rest.starts_with("/")) return bad();
  rest.remove_prefix(1);
  const size_t colon = rest.find(':');
  if (colon == std::string_view::npos) return bad();
  name.type = std::string(rest.substr(0, colon));
  if (name.type != "cpu" && name.type != "gpu") return bad();
  name.index = parse_index(rest.substr(colon + 1));
  if (name.index < 0) return bad();
  return name;
}

std::string DeviceName::str() const {
  if (job.empty()) return fmt::format("/{}:{}", type, index);
  return fmt::format("/job:{}/task:{}/{}:{}", job, task, type, index);
}

DeviceSet::DeviceSet(int cpu_devices, std::string job, int job_tasks, int task)
    : cpu_devices_(cpu_devices), job_(std::move(job)), job_tasks_(job_tasks), task_(task) {
  if (cpu_devices < 1 || cpu_devices > kMaxCpuDevices)
    fail("--cpu-devices: expected 1..{} CPU devices, got {}", kMaxCpuDevices, cpu_devices);
  SF_CHECK(job_tasks == 0 || (task >= 0 && task < job_tasks && valid_job_name(job_)),
           "job '{}' task {} of {}", job_, task, job_tasks);
  for (int i = 0; i < cpu_devices; ++i) names_.push_back(local_cpu(i));
  for (int k = 0; k < job_tasks_; ++k)
    if (k != task_)
      for (int i = 0; i < cpu_devices; ++i) names_.push_back(DeviceName{job_, k, "cpu", i}.str());
}

std::string DeviceSet::local_cpu(int index) const {
  return job_tasks_ > 0 ? DeviceName{job_, task_, "cpu", index}.str()
                        : DeviceName{"", -1, "cpu", index}.str();
}

std::string DeviceSet::resolve(const DeviceName& name, const std::string& where) const {
  DeviceName canonical = name;
  if (name.job.empty()) {
    if (job_tasks_ > 0) canonical.job = job_, canonical.task = task_;
  } else if (job_tasks_ == 0) {
    fail(
        "{}: device '{}' belongs to an MPI job, and this process is not one (start it with "
        "mpirun)",
        where, name.str());
  } else if (name.job != job_ || name.task >= job_tasks_) {
    fail("{}: unknown device '{}' (this job is /job:{} with tasks 0..{})", where, name.str(), job_,
         job_tasks_ - 1);
  }
  if (name.type == "gpu") return canonical.str();
  if (name.index >= cpu_devices_)
    fail(
        "{}: unknown device '{}' (this process has {} CPU device{}: /cpu:0../cpu:{}; "
        "--cpu-devices sets the count)",
        where, name.str(), cpu_devices_, cpu_devices_ == 1 ? "" : "s", cpu_devices_ - 1);
  return canonical.str();
}

bool DeviceSet::is_local(const std::string& device) const {
  if (job_tasks_ == 0) return true;
  return device.starts_with(fmt::format("/job:{}/task:{}/", job_, task_));
}

int default_cpu_devices() {
  const unsigned cores = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp(cores, 1u, static_cast<unsigned>(DeviceSet::kMaxCpuDevices)));
}

}  // namespace sf
