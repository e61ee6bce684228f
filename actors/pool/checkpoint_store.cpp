#include "actors/pool/checkpoint_store.hpp"

#include <chrono>
#include <filesystem>
#include <future>
#include <memory>

#include <spdlog/spdlog.h>

#include "common/files.hpp"
#include "common/sha256.hpp"

namespace vidline::actors::pool {
namespace {

namespace fs = std::filesystem;

double unix_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

} // namespace

std::string checkpoint_note(const std::string& run_id, uint32_t index, uint32_t step,
                            uint64_t attempt) {
  return run_id + " " + std::to_string(index) + " checkpoint " + std::to_string(step) + " "
         + std::to_string(attempt) + "\n";
}

std::optional<msg::checkpoint_ref> store_checkpoint(const context& ctx,
                                                    const std::string& run_id, uint32_t index,
                                                    uint64_t attempt, uint32_t step,
                                                    uint32_t steps, const std::string& file) {
  if (step == 0) {
    spdlog::warn("checkpoint {} of {}/{}: step 0 saves nothing: ignored", file, run_id, index);
    return std::nullopt;
  }
  try {
    uint64_t bytes = 0;
    const std::string sha = sha256_file_hex(file, &bytes);
    if (sha.empty()) {
      spdlog::warn("checkpoint {} of {}/{} (step {}): cannot read it: not saved", file, run_id,
                   index, step);
      return std::nullopt;
    }
    files::fsync_file(file);
    const std::string dir = latent_dir(ctx);
    files::make_dirs(dir);
    // The note first: the latents actor never sees a checkpoint it could take for a latent.
    files::write_atomic(data_paths::latent_job_file(dir, sha),
                        checkpoint_note(run_id, index, step, attempt));
    files::rename_durable(file, data_paths::latent_file(dir, sha));
    msg::checkpoint_ref c;
    c.step = step;
    c.steps = steps;
    c.sha256 = sha;
    c.bytes = bytes;
    c.host = ctx.host;
    c.made_unix_s = unix_now();
    c.attempt = attempt;
    return c;
  } catch (const std::exception& e) {
    spdlog::warn("checkpoint {} of {}/{} (step {}): not saved: {}", file, run_id, index, step,
                 e.what());
    return std::nullopt;
  }
}

resume_file make_resume_file(const context& ctx, const msg::job_spec& job,
                             const msg::checkpoint_ref& c, const std::atomic<bool>* cancel) {
  resume_file r;
  if (!is_sha256_hex(c.sha256)) {
    r.bad = c.sha256;
    r.note = "its digest is not 64 lowercase hex digits";
    return r;
  }
  const std::string dir = latent_dir(ctx);
  const std::string path = data_paths::latent_file(dir, c.sha256);
  std::error_code ec;
  if (fs::exists(path, ec)) {
    uint64_t bytes = 0;
    if (sha256_file_hex(path, &bytes) == c.sha256) {
      r.path = path;
      return r;
    }
    fs::remove(path, ec);
    if (c.host == ctx.host) {
      r.bad = c.sha256;
      r.note = "the stored copy " + path + " does not hash to its name: removed";
      return r;
    }
  } else if (c.host == ctx.host) {
    r.bad = c.sha256;
    r.note = path + " is gone";
    return r;
  }
  try {
    files::make_dirs(dir);
    // Its note, so this copy is reported and released as the original is.
    files::write_atomic(data_paths::latent_job_file(dir, c.sha256),
                        checkpoint_note(job.run_id, job.index, c.step, c.attempt));
  } catch (const std::exception& e) {
    r.note = e.what();
    return r;
  }
  auto done = std::make_shared<std::promise<fetch_result>>();
  auto result = done->get_future();
  ctx.out->fetch_latent(c.host, c.sha256, c.bytes, path,
                        [done](fetch_result f) { done->set_value(std::move(f)); });
  while (result.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready)
    if (cancel != nullptr && cancel->load()) {
      r.note = "cancelled";
      return r;
    }
  const auto f = result.get();
  // A note without its file is left by no failure.
  struct drop_note {
    std::string path;
    std::string note;
    ~drop_note() {
      std::error_code ec;
      if (!fs::exists(path, ec))
        fs::remove(note, ec);
    }
  } cleanup{path, data_paths::latent_job_file(dir, c.sha256)};
  if (f.outcome == msg::outcome::ok) {
    if (sha256_file_hex(path) == c.sha256) {
      spdlog::info("checkpoint {} of {}/{} (step {}) pulled from {} ({} bytes, {:.0f} ms)",
                   c.sha256, job.run_id, job.index, c.step, c.host, f.bytes, f.elapsed_ms);
      r.path = path;
      return r;
    }
    fs::remove(path, ec);
    r.bad = c.sha256;
    r.note = "the pulled copy does not hash to its digest";
    return r;
  }
  if (f.outcome == msg::outcome::corrupt || f.outcome == "not_found"
      || f.outcome == msg::outcome::fatal) {
    r.bad = c.sha256;
    r.note = "pull from " + c.host + " " + f.outcome + ": " + f.error;
    return r;
  }
  r.note = "pull from " + c.host + " failed (" + f.outcome + "): " + f.error;
  return r;
}

} // namespace vidline::actors::pool
