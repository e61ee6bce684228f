/// make_encoder / make_sampler / make_decoder: the backend a config entry names.

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
    return sim::make_sim_sampler(p);
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
