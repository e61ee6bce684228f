/// The sim decoder: verifies the latent, takes the profile's decode time, then writes the
/// contract's video file atomically.

#include <cmath>
#include <cstdio>
#include <optional>
#include <vector>

#include "backends/sim/faults.hpp"
#include "backends/sim/gpu_models.hpp"
#include "backends/sim/outcome.hpp"
#include "backends/sim/sim_backend.hpp"
#include "common/files.hpp"
#include "common/sha256.hpp"

namespace vidline::backends::sim {
namespace {

/// Hex SHA-256 of a file, looking at the clock between 1 MiB reads. nullopt when the
/// clock stopped it; throws std::runtime_error when the file cannot be read.
std::optional<std::string> hash_file(const std::string& path, const stage_clock& clock) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr)
    throw std::runtime_error("cannot read latent " + path);
  sha256 h;
  std::vector<char> buf(std::size_t{1} << 20);
  bool stopped = false;
  for (;;) {
    if (clock.check() != stage_clock::stop::reached) {
      stopped = true;
      break;
    }
    std::size_t n = std::fread(buf.data(), 1, buf.size(), f);
    if (n == 0)
      break;
    h.update(buf.data(), n);
  }
  bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed)
    throw std::runtime_error("cannot read latent " + path);
  if (stopped)
    return std::nullopt;
  return to_hex(h.finish());
}

/// A decoder instance: one GPU's decode + mux.
class sim_decoder final : public decoder_backend {
public:
  sim_decoder(profile prof, sim_settings settings)
      : profile_(std::move(prof)), settings_(std::move(settings)) {}

  stage_result decode(const msg::job_spec& job, const std::string& latent_path,
                      const std::string& latent_sha256, const stage_env& env) override {
    if (!(env.timeout_s >= 0))
      return failed(msg::outcome::fatal, "sim decoder: timeout_s must be >= 0", 0);
    stage_clock clock(settings_.time_scale, env.timeout_s, env.cancel);
    try {
      return run(job, latent_path, latent_sha256, env, clock);
    } catch (const std::runtime_error& e) {  // I/O: retried
      return failed(msg::outcome::transient, std::string("sim decoder: ") + e.what(),
                    clock.elapsed_or(0));
    } catch (const std::exception& e) {
      return failed(msg::outcome::fatal, std::string("sim decoder: ") + e.what(),
                    clock.elapsed_or(0));
    }
  }

private:
  stage_result run(const msg::job_spec& job, const std::string& latent_path,
                   const std::string& expected, const stage_env& env, const stage_clock& clock) {
    job_size size{job.width, job.height, job.seconds};
    if (size.load() == 0)
      return failed(msg::outcome::fatal, "sim decoder: job size " + size.str() + " is empty", 0);
    load_on_gpus(id_, settings_.host, settings_.gpus);  // a pool's model on this GPU goes
    if (!is_sha256_hex(expected))
      return failed(msg::outcome::fatal,
                    "sim decoder: expected latent digest is not 64 lowercase hex digits", 0);
    if (env.output_path.empty())
      return failed(msg::outcome::fatal, "sim decoder: no output path", 0);
    double duration = profile_.decode(settings_.profile_key, size).s;

    auto digest = hash_file(latent_path, clock);
    if (!digest)
      return stopped(clock.check(), "decoding", clock);
    if (*digest != expected)
      return failed(msg::outcome::corrupt,
                    "sim decoder: latent " + latent_path + " hashed to " + *digest +
                        ", expected " + expected + "; nothing decoded",
                    clock.elapsed_or(0));
    switch (next_fault()) {
      case injected::hang:
        return stopped(clock.wait_until(1e18), "decoding", clock);
      case injected::crash:
        if (auto why = clock.wait_until(duration / 2); why != stage_clock::stop::reached)
          return stopped(why, "decoding", clock);
        return failed(msg::outcome::transient, "sim decoder: backend crashed (injected fault)",
                      clock.elapsed_or(duration / 2));
      case injected::none:
        break;
    }
    // The video file appears at the end of the decode time, as a real decoder's would.
    if (auto why = clock.wait_until(duration); why != stage_clock::stop::reached)
      return stopped(why, "decoding", clock);
    std::string text = video_file_text(job, *digest);
    files::write_atomic(env.output_path, text, "output.during_rename");

    stage_result r;
    r.outcome = msg::outcome::ok;
    r.sha256 = to_hex(sha256_of(text));
    r.bytes = text.size();
    r.elapsed_s = clock.elapsed_or(duration);
    return r;
  }

  const profile profile_;
  const sim_settings settings_;
  const uint64_t id_ = new_gpu_holder();
};

} // namespace

std::unique_ptr<decoder_backend> make_sim_decoder(profile prof, sim_settings settings) {
  if (!prof.has_decoder(settings.profile_key))
    throw std::invalid_argument("sim decoder: decoder kind '" + settings.profile_key +
                                "' is not in profile '" + prof.name() + "'");
  if (!(settings.time_scale >= 0) || !std::isfinite(settings.time_scale))
    throw std::invalid_argument("sim decoder: time_scale must be finite and >= 0");
  return std::make_unique<sim_decoder>(std::move(prof), std::move(settings));
}

} // namespace vidline::backends::sim
