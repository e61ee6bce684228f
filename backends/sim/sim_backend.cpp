/// The sim encoder, the factories of the sim backend, and the contract's file texts.

#include "backends/sim/sim_backend.hpp"

#include <cmath>
#include <sstream>

#include "backends/sim/checkpoint.hpp"
#include "backends/sim/outcome.hpp"
#include "common/files.hpp"
#include "common/sha256.hpp"

namespace vidline::backends::sim {
namespace {

constexpr std::string_view conditioning_magic = "vidline-sim-conditioning 1\n";
constexpr std::string_view prompt_field = "prompt_sha256 ";

/// An encoder instance. The reference line unloads the text encoder after every prompt,
/// so every call is cold and takes the profile's conditioning time.
class sim_encoder final : public encoder_backend {
public:
  sim_encoder(profile prof, sim_settings settings)
      : profile_(std::move(prof)), settings_(std::move(settings)) {}

  stage_result encode(const std::string& prompt, const stage_env& env) override {
    if (!(env.timeout_s >= 0))
      return failed(msg::outcome::fatal, "sim encoder: timeout_s must be >= 0", 0);
    if (env.output_path.empty())
      return failed(msg::outcome::fatal, "sim encoder: no output path", 0);
    stage_clock clock(settings_.time_scale, env.timeout_s, env.cancel);
    double duration = profile_.conditioning(settings_.profile_key).s;
    if (auto why = clock.wait_until(duration); why != stage_clock::stop::reached)
      return stopped(why, "conditioning", clock, true);
    std::string text = conditioning_file_text(prompt);
    try {
      files::write_atomic(env.output_path, text);
    } catch (const std::runtime_error& e) {
      return failed(msg::outcome::transient, std::string("sim encoder: ") + e.what(),
                    clock.elapsed_or(duration), true);
    }
    stage_result r;
    r.outcome = msg::outcome::ok;
    r.sha256 = to_hex(sha256_of(text));
    r.bytes = text.size();
    r.elapsed_s = clock.elapsed_or(duration);
    r.cold = true;
    return r;
  }

private:
  const profile profile_;
  const sim_settings settings_;
};

/// The profile and settings a config entry asks for; throws naming the backend.
std::pair<profile, sim_settings> from_params(const backend_params& p) {
  const config::backend& b = p.backend;
  auto bad = [&](const std::string& what) {
    return std::runtime_error("backend '" + b.name + "' (sim, for " + p.owner + "): " + what);
  };
  if (b.type != "sim")
    throw bad("type is '" + b.type + "', not 'sim'");
  uint32_t steps = sim_steps;
  if (b.options.is_object())
    for (auto& [key, value] : b.options.items()) {
      if (key != "steps")
        throw bad("unknown option '" + key + "' (the sim backend takes: steps)");
      if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > 10000)
        throw bad("option steps must be a whole number from 1 to 10000");
      steps = value.get<uint32_t>();
    }
  else if (!b.options.is_null())
    throw bad("options must be an object");
  if (!(b.time_scale >= 0) || !std::isfinite(b.time_scale))
    throw bad("time_scale must be a finite number >= 0");
  try {
    profile prof = b.profile.empty() ? profile::reference() : profile::load(b.profile);
    return {std::move(prof), sim_settings{b.time_scale, p.profile_key, p.owner, p.host, p.gpus, steps}};
  } catch (const profile_error& e) {
    throw bad(std::string("profile: ") + e.what());
  }
}

template <class Make>
auto make_checked(const backend_params& p, Make make) {
  auto [prof, settings] = from_params(p);
  try {
    return make(std::move(prof), std::move(settings));
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error("backend '" + p.backend.name + "' (sim, for " + p.owner +
                             "): " + e.what());
  }
}

} // namespace

std::unique_ptr<encoder_backend> make_sim_encoder(profile prof, sim_settings settings) {
  if (!prof.has_encoder(settings.profile_key))
    throw std::invalid_argument("sim encoder: encoder kind '" + settings.profile_key +
                                "' is not in profile '" + prof.name() + "'");
  if (!(settings.time_scale >= 0) || !std::isfinite(settings.time_scale))
    throw std::invalid_argument("sim encoder: time_scale must be finite and >= 0");
  return std::make_unique<sim_encoder>(std::move(prof), std::move(settings));
}

std::unique_ptr<encoder_backend> make_sim_encoder(const backend_params& p) {
  return make_checked(p, [](profile prof, sim_settings s) {
    return make_sim_encoder(std::move(prof), std::move(s));
  });
}

std::unique_ptr<sampler_backend> make_sim_sampler(const backend_params& p) {
  return make_checked(p, [](profile prof, sim_settings s) {
    return make_sim_sampler(std::move(prof), std::move(s));
  });
}

std::unique_ptr<decoder_backend> make_sim_decoder(const backend_params& p) {
  return make_checked(p, [](profile prof, sim_settings s) {
    return make_sim_decoder(std::move(prof), std::move(s));
  });
}

std::string video_file_text(const msg::job_spec& job, const std::string& latent_sha256) {
  std::ostringstream t;
  t << "vidline-sim-video 1\n"
    << "latent_sha256 " << latent_sha256 << "\n"
    << "seed " << job.seed << "\n"
    << "size " << job.width << "x" << job.height << "\n"
    << "seconds " << job.seconds << "\n";
  return t.str();
}

std::string conditioning_file_text(const std::string& prompt) {
  std::string t(conditioning_magic);
  t.append(prompt_field).append(to_hex(sha256_of(prompt))).append("\n");
  t.append("prompt_bytes ").append(std::to_string(prompt.size())).append("\n");
  return t;
}

std::string conditioning_prompt_sha256(const std::string& text) {
  std::string_view v(text);
  if (v.substr(0, conditioning_magic.size()) != conditioning_magic)
    return {};
  v.remove_prefix(conditioning_magic.size());
  if (v.substr(0, prompt_field.size()) != prompt_field)
    return {};
  v.remove_prefix(prompt_field.size());
  std::string_view hex = v.substr(0, 64);
  if (!is_sha256_hex(hex) || v.substr(64, 1) != "\n")
    return {};
  return std::string(hex);
}

} // namespace vidline::backends::sim
