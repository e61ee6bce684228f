#pragma once
/// The warm start of a pool, an encoder or a decoder (config backend `warm_start`,
/// docs/worker.md): its backend loads its model on a thread of its own when the node
/// starts, each beside the others, so the line's first sample, conditioning and decode
/// find their models loaded. A stage ordered meanwhile waits for the load in its backend
/// call. The answer comes back to the actor as a msg::stage_done of `warm_attempt`, which
/// no stage has.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "actors/worker.hpp"
#include "backends/backend.hpp"
#include "config/config.hpp"
#include "config/workflows.hpp"
#include "messages/actor_types.hpp"

namespace vidline::actors {

/// The attempt (or encoder job) number of a warm start's answer: orders start at 1.
inline constexpr uint64_t warm_attempt = 0;

/// The model key a decoder loads at its warm start: that of the workflow a job gets when
/// its shot names none (the cluster's default), the key its first decode most likely names.
inline std::string default_model_key(const config::cluster& c) {
  auto cat = config::catalog_for(c);
  if (auto* w = cat.find(cat.default_name))
    return w->model;
  return "";
}

/// Whether decoder `d` loads its model at start: its backend has warm_start and no pool
/// uses its GPU (a decoder on a pool's GPU runs only once that pool is done sampling, and
/// a decode there unloads the pool's model: loading it at start would take the memory the
/// pool's model needs).
inline bool decoder_warms_at_start(const config::cluster& c, const config::decoder& d) {
  auto* b = c.find_backend(d.backend);
  if (b == nullptr || !config::warm_start_of(*b))
    return false;
  for (auto& p : c.pools)
    if (p.host == d.host)
      for (auto& g : p.gpus)
        if (g == d.gpu) {
          spdlog::info("decoder {}: no warm start: pool {} uses its GPU {}", d.name, p.name, g);
          return false;
        }
  return true;
}

/// Has `backend` (a sampler, encoder or decoder backend) load `req.model` now on a thread
/// of its own; `who` ("pool p0", "encoder enc") names it in the log. `stopping` set (the
/// actor ended) keeps a failed load's warning out of the log.
template <class Self, class Backend>
void warm_in_background(Self* self, std::shared_ptr<Backend> backend,
                        backends::warm_request req, std::string who,
                        std::shared_ptr<std::atomic<bool>> stopping) {
  spdlog::info("{}: warm start: loading its model{}", who,
               req.model.empty() ? std::string() : " " + req.model);
  run_on_worker(
    self,
    [backend, req, stopping, who] {
      auto r = backend->warm(req);
      if (r.warmed)
        spdlog::info("{}: warm start: model {} loaded in {:.1f} s{}", who,
                     r.model.empty() ? "(unnamed)" : r.model, r.load_s,
                     r.model_identity.empty() ? "" : " (" + r.model_identity + ")");
      else if (!stopping->load())
        spdlog::warn("{}: warm start: not warmed, its first stage loads the model: {}", who,
                     r.error.empty() ? "the backend cannot load before a stage" : r.error);
      msg::stage_done d;
      d.attempt = warm_attempt;
      d.outcome = r.warmed ? msg::outcome::ok : msg::outcome::transient;
      d.error = r.error;
      d.model = r.model;
      d.model_identity = r.model_identity;
      return d;
    },
    [](const std::string& what) {
      msg::stage_done d;
      d.attempt = warm_attempt;
      d.outcome = msg::outcome::transient;
      d.error = what;
      return d;
    });
}

} // namespace vidline::actors
