/// make_encoder / make_sampler / make_decoder: the backend a config entry names.

#include <mutex>
#include <stdexcept>

#include "backends/backend.hpp"
#include "backends/comfyui/comfyui_backend.hpp"
#include "backends/exec/exec_backend.hpp"
#include "backends/sim/sim_backend.hpp"
#include "backends/worker/worker_backend.hpp"

namespace vidline::backends {
namespace {

/// Throws for a type that has no implementation in this build.
[[noreturn]] void unavailable(const backend_params& p) {
  const std::string& type = p.backend.type;
  throw std::runtime_error("backend '" + p.backend.name + "': unknown type '" + type +
                           "' (known: sim, exec, worker, comfyui)");
}

/// The sim sampler, naming the model of each job it samples: its key, and the
/// deterministic identity "sim:<key>" (simulated weights never change).
class sim_model_sampler final : public sampler_backend {
public:
  explicit sim_model_sampler(std::unique_ptr<sampler_backend> inner) : inner_(std::move(inner)) {}
  stage_result sample(const msg::job_spec& job, const std::string& conditioning_path,
                      const stage_env& env) override {
    auto r = inner_->sample(job, conditioning_path, env);
    if (r.outcome == msg::outcome::ok && !job.model.empty()) {
      r.model = job.model;
      r.model_identity = "sim:" + job.model;
      std::lock_guard<std::mutex> l(m_);
      loaded_ = {r.model, r.model_identity};
    }
    return r;
  }
  std::optional<std::pair<std::string, std::string>> loaded_model() const override {
    std::lock_guard<std::mutex> l(m_);
    return loaded_;
  }
  bool reports_steps() const override { return inner_->reports_steps(); }

private:
  std::unique_ptr<sampler_backend> inner_;
  mutable std::mutex m_;
  std::pair<std::string, std::string> loaded_;
};

} // namespace

std::unique_ptr<encoder_backend> make_encoder(const backend_params& p) {
  if (p.backend.type == "sim")
    return sim::make_sim_encoder(p);
  if (p.backend.type == "exec")
    return exec::make_exec_encoder(p);
  if (p.backend.type == "worker")
    return worker::make_worker_encoder(p);
  if (p.backend.type == "comfyui")
    return comfyui::make_comfyui_encoder(p);
  unavailable(p);
}

std::unique_ptr<sampler_backend> make_sampler(const backend_params& p) {
  if (p.backend.type == "sim")
    return std::make_unique<sim_model_sampler>(sim::make_sim_sampler(p));
  if (p.backend.type == "exec")
    return exec::make_exec_sampler(p);
  if (p.backend.type == "worker")
    return worker::make_worker_sampler(p);
  if (p.backend.type == "comfyui")
    return comfyui::make_comfyui_sampler(p);
  unavailable(p);
}

std::unique_ptr<decoder_backend> make_decoder(const backend_params& p) {
  if (p.backend.type == "sim")
    return sim::make_sim_decoder(p);
  if (p.backend.type == "exec")
    return exec::make_exec_decoder(p);
  if (p.backend.type == "worker")
    return worker::make_worker_decoder(p);
  if (p.backend.type == "comfyui")
    return comfyui::make_comfyui_decoder(p);
  unavailable(p);
}

} // namespace vidline::backends
