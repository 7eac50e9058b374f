#include "comm/process_links.h"

#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "core/error.h"

namespace sf {

void ProcessLinks::post(const std::vector<Outgoing>& to, const std::string& key,
                        const Tensor& value) {
  {
    std::lock_guard lock(mutex_);
    outbox_.push_back(Posted{to, key, value});
  }
  changed_.notify_all();
}

void ProcessLinks::wake() {
  {
    std::lock_guard lock(mutex_);
    woken_ = true;
  }
  changed_.notify_all();
}

void ProcessLinks::exchange(const std::vector<Incoming>& incoming,
                            const std::function<void(size_t, Tensor)>& arrived,
                            const std::function<bool()>& finished,
                            const std::function<bool()>& stopped) {
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  const int me = comm_.rank();
  std::vector<Tensor> buffers(incoming.size());
  std::vector<CommRequest> receives(incoming.size());
  size_t pending_receives = incoming.size();
  for (size_t i = 0; i < incoming.size(); ++i) {
    buffers[i] = Tensor(incoming[i].dtype, incoming[i].shape);
    receives[i] = comm_.irecv(buffers[i], incoming[i].peer, incoming[i].tag);
  }
  struct Sending {
    std::string key;
    int peer;
    CommRequest request;
    Tensor value;  // kept alive until sent
  };
  std::vector<Sending> sends;
  // Poll for half a millisecond after any progress (the next message is usually microseconds
  // away: this took a 4 KB edge from 45 to 19 us one way, under load), then sleep in short
  // waits, so that a long kernel does not lose a core to this thread.
  auto last_progress = Clock::now();
  for (;;) {
    std::vector<Posted> posted;
    {
      std::lock_guard lock(mutex_);
      posted.swap(outbox_);
      woken_ = false;
    }
    bool progress = !posted.empty();
    for (Posted& p : posted)
      for (const Outgoing& out : p.to)
        sends.push_back(Sending{p.key, out.peer, comm_.isend(p.value, out.peer, out.tag), p.value});
    for (size_t i = 0; i < receives.size(); ++i) {
      if (!receives[i].active()) continue;
      bool done = false;
      try {
        done = comm_.test(receives[i]);
      } catch (const Error& e) {
        std::string why = e.what();  // "rank R: receive of tag T from rank P: expected ..."
        if (why.starts_with("rank ")) why = why.substr(why.find(": ") + 2);
        fail("rank {}: edge '{}' from {}: {}", me, incoming[i].key, incoming[i].from_device, why);
      }
      if (!done) continue;
      --pending_receives;
      progress = true;
      arrived(i, std::move(buffers[i]));
    }
    size_t pending_sends = 0;
    for (Sending& s : sends)
      if (s.request.active()) pending_sends += !comm_.test(s.request);
    if (stopped()) return;
    if (pending_receives == 0 && pending_sends == 0 && finished()) {
      std::lock_guard lock(mutex_);
      if (outbox_.empty()) return;
      continue;
    }
    const double waited = std::chrono::duration<double>(Clock::now() - started).count();
    if (waited > comm_.timeout_seconds()) {
      for (size_t i = 0; i < receives.size(); ++i)
        if (receives[i].active())
          fail("rank {}: edge '{}' from {} got no answer in {:g} s: task {} died or hangs "
               "(--comm-timeout)",
               me, incoming[i].key, incoming[i].from_device, comm_.timeout_seconds(),
               incoming[i].peer);
      for (const Sending& s : sends)
        if (s.request.active())
          fail("rank {}: edge '{}' to task {} was not taken in {:g} s: that task died or hangs "
               "(--comm-timeout)",
               me, s.key, s.peer, comm_.timeout_seconds());
    }
    if (progress) last_progress = Clock::now();
    if (Clock::now() - last_progress < std::chrono::microseconds(500)) {
      std::this_thread::yield();
      continue;
    }
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, std::chrono::microseconds(100),
                      [&] { return !outbox_.empty() || woken_; });
  }
}

}  // namespace sf
