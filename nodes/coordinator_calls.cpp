/// The coordinator asked inside its own process (coordinator_calls.hpp).

#include "nodes/coordinator_calls.hpp"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include <caf/all.hpp>

#include "messages/actor_types.hpp"
#include "messages/gpu_actor_types.hpp"
#include "messages/review_actor_types.hpp"
#include "nodes/router.hpp"

namespace vidline::nodes {

in_process_calls::in_process_calls(std::shared_ptr<const router> rt) : rt_(std::move(rt)) {}

in_process_calls::~in_process_calls() = default;

void in_process_calls::attach(caf::actor_system* sys) {
  std::unique_lock<std::shared_mutex> lock(m_);
  stopped_ = stopped_ || (sys_ != nullptr && sys == nullptr);
  sys_ = stopped_ ? nullptr : sys;
}

template <class Reply, class Request>
std::optional<Reply> in_process_calls::get(const Request& req, int timeout_ms) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::milliseconds(std::max(1, timeout_ms));
  for (;;) {
    {
      std::shared_lock<std::shared_mutex> lock(m_);
      if (stopped_)
        return std::nullopt;
      if (sys_ != nullptr)
        if (auto coordinator = rt_->local("coordinator")) {
          const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
          std::optional<Reply> out;
          caf::scoped_actor self{*sys_};
          self->request(coordinator, std::max(left, std::chrono::milliseconds(1)), req)
            .receive([&](Reply& r) { out = std::move(r); },
                     [&](const caf::error&) {});  // timed out, or the coordinator stopped
          return out;
        }
    }
    // The node is starting, or its coordinator is between a crash and its restart: asked
    // again until the request's time is up, as a request over the bus waits for its answer.
    const auto now = clock::now();
    if (now >= deadline)
      return std::nullopt;
    std::this_thread::sleep_for(std::min<clock::duration>(std::chrono::milliseconds(50), deadline - now));
  }
}

} // namespace vidline::nodes
