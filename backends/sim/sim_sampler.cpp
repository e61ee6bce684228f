/// The sim sampler: a job's latent per the contract, after the profile's sampling time.

#include <atomic>
#include <cmath>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <sstream>

#include "backends/sim/checkpoint.hpp"
#include "backends/sim/faults.hpp"
#include "backends/sim/gpu_models.hpp"
#include "backends/sim/latent.hpp"
#include "config/shot_identity.hpp"
#include "backends/sim/outcome.hpp"
#include "backends/sim/sim_backend.hpp"
#include "common/files.hpp"
#include "common/sha256.hpp"

namespace vidline::backends::sim {
namespace {

/// A sampler instance of one pool: cold (model load) for its first job and after a sampler
/// sharing its GPUs sampled, warm otherwise.
class sim_sampler final : public sampler_backend {
public:
  sim_sampler(profile prof, sim_settings settings)
      : profile_(std::move(prof)), settings_(std::move(settings)) {}

  stage_result sample(const msg::job_spec& job, const std::string& conditioning_path,
                      const stage_env& env) override {
    if (!(env.timeout_s >= 0))
      return failed(msg::outcome::fatal, "sim sampler: timeout_s must be >= 0", 0);
    stage_clock clock(settings_.time_scale, env.timeout_s, env.cancel);
    try {
      return run(job, conditioning_path, env, clock);
    } catch (const std::overflow_error& e) {  // a size no latent length can express
      return failed(msg::outcome::fatal, std::string("sim sampler: ") + e.what(),
                    clock.elapsed_or(0));
    } catch (const std::runtime_error& e) {  // I/O: retried, perhaps elsewhere
      return failed(msg::outcome::transient, std::string("sim sampler: ") + e.what(),
                    clock.elapsed_or(0));
    } catch (const std::exception& e) {
      return failed(msg::outcome::fatal, std::string("sim sampler: ") + e.what(),
                    clock.elapsed_or(0));
    }
  }

  bool reports_steps() const override { return true; }

private:
  stage_result run(const msg::job_spec& job, const std::string& conditioning_path,
                   const stage_env& env, const stage_clock& clock);
  /// A failed result when the conditioning file is missing or for another prompt.
  std::optional<stage_result> check_conditioning(const msg::job_spec& job,
                                                 const std::string& path) const;
  std::string out_of_memory(const job_size& size, const stage_env& env) const;
  /// A failed result when the job names a reference image (reference_sha256) and the file
  /// at job.reference is missing or holds other bytes (docs/sim-contract.md).
  static std::optional<stage_result> check_reference(const msg::job_spec& job);
  /// The same for every named input with a digest and a path on this host.
  static std::optional<stage_result> check_inputs(const msg::job_spec& job);

  const profile profile_;
  const sim_settings settings_;
  std::atomic<bool> warm_{false};  ///< the model stays loaded after an attempt that loaded it
  const uint64_t id_ = new_gpu_holder();
};

stage_result sim_sampler::run(const msg::job_spec& job, const std::string& conditioning_path,
                              const stage_env& env, const stage_clock& clock) {
  job_size size{job.width, job.height, job.seconds};
  if (size.load() == 0)
    return failed(msg::outcome::fatal, "sim sampler: job size " + size.str() + " is empty", 0);
  if (env.output_path.empty())
    return failed(msg::outcome::fatal, "sim sampler: no output path", 0);
  if (!conditioning_path.empty())
    if (auto bad = check_conditioning(job, conditioning_path))
      return *bad;
  if (auto bad = check_reference(job))
    return *bad;
  if (auto bad = check_inputs(job))
    return *bad;
  // Loading this pool's model evicts any other pool's from these GPUs; a job of another
  // model than the one loaded switches it (a cold stage).
  bool cold = !load_on_gpus(id_, settings_.host, settings_.gpus, job.model) || !warm_.load();

  if (!profile_.fits(settings_.profile_key, size)) {
    double fail_after = profile_.capacity(settings_.profile_key).fail_after_s;
    if (auto why = clock.wait_until(fail_after); why != stage_clock::stop::reached)
      return stopped(why, "sampling", clock, cold);
    warm_ = true;  // the model was loaded before memory ran out
    return failed(msg::outcome::capacity, out_of_memory(size, env),
                  clock.elapsed_or(fail_after), cold);
  }

  latent_key key{job.seed, job.width, job.height, job.seconds, config::ident(job)};
  const uint32_t steps = settings_.steps;
  // The stage: the model's load (cold), then settings_.steps equal steps; a resumed attempt
  // loads and runs the steps after its checkpoint's (checkpoint.hpp).
  const double warm_s =
    profile_.sampling(settings_.profile_key, size, model_state::warm, job.model).s;
  const double full_s =
    cold ? profile_.sampling(settings_.profile_key, size, model_state::cold, job.model).s : warm_s;
  const double load_s = std::max(0.0, full_s - warm_s);
  const double step_s = warm_s / steps;
  uint32_t from = 0;
  if (env.resume_step > 0 && !env.resume_file.empty()) {
    std::string text;
    try {
      text = files::read_all(env.resume_file);
    } catch (const std::runtime_error&) {  // unreadable: the steps are run again
    }
    if (auto st = checkpoint_step(key, steps, text); st && *st == env.resume_step)
      from = *st;
  }
  const double duration = load_s + step_s * (steps - from);
  double crash_at = -1;
  switch (next_fault()) {
    case injected::hang:  // until the stage timeout (or a cancel) ends it
      return stopped(clock.wait_until(1e18), "sampling", clock, cold);
    case injected::crash:
      crash_at = duration / 2;
      break;
    case injected::none:
      break;
  }
  files::make_dirs(files::parent_of(env.output_path));
  std::string tmp = env.output_path + ".tmp";
  uint64_t bytes = latent_bytes(profile_, job.width, job.height, job.seconds);
  // Generating the latent takes real time too: it counts inside the sampling time.
  auto digest = write_latent_file(key, bytes, tmp, [&] {
    return clock.check() == stage_clock::stop::reached;
  });
  if (!digest)
    return stopped(clock.check(), "sampling", clock, cold);
  // The steps, each ended at its time on the stage clock; a checkpoint at the first step
  // boundary checkpoint_interval_s after the last one, and at once when asked to make way.
  const bool saves = env.checkpoint && !env.checkpoint_dir.empty();
  double saved_at = load_s;  // stage-clock seconds of the last checkpoint (or the first step)
  auto save = [&](uint32_t step) {
    const std::string file = env.checkpoint_dir + "/step-" + std::to_string(step);
    files::write_atomic(file, checkpoint_text(key, step, steps));
    return env.checkpoint(step, steps, file);
  };
  for (uint32_t step = from + 1; step <= steps; ++step) {
    const double end_s = load_s + step_s * (step - from);
    if (crash_at >= 0 && crash_at <= end_s) {
      if (auto why = clock.wait_until(crash_at); why != stage_clock::stop::reached) {
        std::remove(tmp.c_str());
        return stopped(why, "sampling", clock, cold);
      }
      std::remove(tmp.c_str());
      return failed(msg::outcome::transient, "sim sampler: backend crashed (injected fault)",
                    clock.elapsed_or(crash_at), cold);
    }
    if (auto why = clock.wait_until(end_s); why != stage_clock::stop::reached) {
      std::remove(tmp.c_str());
      return stopped(why, "sampling", clock, cold);
    }
    if (env.progress)
      env.progress(step, steps);
    if (step == steps || !saves)
      continue;
    if (env.preempt != nullptr && env.preempt->load() && save(step)) {
      std::remove(tmp.c_str());
      auto r = failed(msg::outcome::preempted,
                      "sim sampler: made way at step " + std::to_string(step) + " of "
                        + std::to_string(steps),
                      clock.elapsed_or(end_s), cold);
      warm_ = true;
      return r;
    }
    if (env.checkpoint_interval_s > 0 && end_s - saved_at >= env.checkpoint_interval_s - 1e-9) {
      if (save(step))
        saved_at = end_s;
    }
  }
  files::rename_durable(tmp, env.output_path);
  warm_ = true;

  stage_result r;
  r.outcome = msg::outcome::ok;
  r.sha256 = *digest;
  r.bytes = bytes;
  r.elapsed_s = clock.elapsed_or(duration);
  r.cold = cold;
  return r;
}

std::optional<stage_result> sim_sampler::check_reference(const msg::job_spec& job) {
  if (job.reference_sha256.empty())
    return std::nullopt;
  const std::string got = job.reference.empty() ? std::string() : sha256_file_hex(job.reference);
  if (got.empty())  // the host pulls it again on the next attempt
    return failed(msg::outcome::transient,
                  "sim sampler: reference image " +
                      (job.reference.empty() ? std::string("<no path>") : job.reference) +
                      " is missing or unreadable on this host",
                  0);
  if (got == job.reference_sha256)
    return std::nullopt;
  return failed(msg::outcome::corrupt,
                "sim sampler: reference image " + job.reference + " hashes to " + got +
                    ", not the job's reference_sha256 " + job.reference_sha256,
                0);
}

std::optional<stage_result> sim_sampler::check_inputs(const msg::job_spec& job) {
  for (auto& in : job.inputs) {
    if (in.sha256.empty() || in.name == "reference")
      continue;
    const std::string got = in.path.empty() ? std::string() : sha256_file_hex(in.path);
    if (got.empty())
      return failed(msg::outcome::transient,
                    "sim sampler: input " + in.name + " (" +
                        (in.path.empty() ? std::string("<no path>") : in.path) +
                        ") is missing or unreadable on this host",
                    0);
    if (got != in.sha256)
      return failed(msg::outcome::corrupt,
                    "sim sampler: input " + in.name + " " + in.path + " hashes to " + got +
                        ", not the job's " + in.sha256,
                    0);
  }
  return std::nullopt;
}

std::optional<stage_result> sim_sampler::check_conditioning(const msg::job_spec& job,
                                                            const std::string& path) const {
  std::string text;
  try {
    text = files::read_all(path);
  } catch (const std::runtime_error& e) {  // the encoder can make it again
    return failed(msg::outcome::transient,
                  std::string("sim sampler: conditioning missing: ") + e.what(), 0);
  }
  // The prompt text itself, not job.prompt_sha256: that is the cache key, whose recipe
  // belongs to the coordinator.
  std::string want = to_hex(sha256_of(job.prompt));
  std::string got = conditioning_prompt_sha256(text);
  if (got == want)
    return std::nullopt;
  return failed(msg::outcome::corrupt,
                "sim sampler: conditioning " + path + " is for prompt " +
                    (got.empty() ? std::string("<unreadable>") : got) + ", not this job's " +
                    want,
                0);
}

std::string sim_sampler::out_of_memory(const job_size& size, const stage_env& env) const {
  const capacity_limit& c = profile_.capacity(settings_.profile_key);
  std::ostringstream m;
  m << (env.vendor == "amd" ? "HIP" : "CUDA") << " out of memory: job " << size.str()
    << " has load " << size.load() << " (width x height x seconds) but pool kind '"
    << settings_.profile_key << "' holds at most " << *c.max_load << " (sim profile '"
    << profile_.name() << "'; pool " << settings_.owner << ")";
  return m.str();
}

} // namespace

std::unique_ptr<sampler_backend> make_sim_sampler(profile prof, sim_settings settings) {
  if (!prof.has_pool(settings.profile_key))
    throw std::invalid_argument("sim sampler: pool kind '" + settings.profile_key +
                                "' is not in profile '" + prof.name() + "'");
  if (!(settings.time_scale >= 0) || !std::isfinite(settings.time_scale))
    throw std::invalid_argument("sim sampler: time_scale must be finite and >= 0");
  return std::make_unique<sim_sampler>(std::move(prof), std::move(settings));
}

} // namespace vidline::backends::sim
