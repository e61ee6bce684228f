#include "actors/encoder/encoder_actor.hpp"

#include <deque>
#include <filesystem>
#include <map>
#include <memory>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "actors/warm_start.hpp"
#include "actors/worker.hpp"
#include "backends/backend.hpp"
#include "common/files.hpp"
#include "common/sha256.hpp"
#include "messages/actor_types.hpp"

namespace vidline::actors::encoder {
namespace {

/// One prompt waiting to be encoded, with everyone who asked for it.
struct waiting {
  msg::encode_request request;
  std::vector<caf::typed_response_promise<msg::encode_reply>> promises;
};

struct shell {
  context ctx;
  config::encoder enc;
  std::shared_ptr<backends::encoder_backend> backend;
  std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);
  std::deque<waiting> queue;  ///< front is being encoded when `busy`
  bool busy = false;
  uint64_t next_job = 1;      ///< warm_attempt (0) is the warm start's
};

std::string cache_path(const shell& sh, const std::string& prompt_sha) {
  return conditioning_dir(sh.ctx) + "/" + prompt_sha + ".cond";
}

void start_next(encoder_role::pointer self, const std::shared_ptr<shell>& sh) {
  if (sh->busy || sh->queue.empty())
    return;
  sh->busy = true;
  auto req = sh->queue.front().request;
  backends::stage_env env;
  env.work_dir = work_dir(sh->ctx) + "/encode-" + req.prompt_sha256;
  env.output_path = env.work_dir + "/conditioning";
  env.cancel = sh->cancel.get();
  auto backend = sh->backend;
  auto cancel = sh->cancel;
  auto dest = cache_path(*sh, req.prompt_sha256);
  uint64_t job = sh->next_job++;
  run_on_worker(
    self,
    [backend, cancel, env, req, dest, job]() {
      files::make_dirs(env.work_dir);
      auto r = backend->encode(req.prompt, env);
      msg::stage_done d{job, r.outcome, r.error, r.sha256, r.bytes, r.elapsed_s, r.cold, "", ""};
      if (r.outcome == msg::outcome::ok) {
        files::make_dirs(files::parent_of(dest));
        files::rename_durable(env.output_path, dest);
        d.product_path = dest;
      }
      std::error_code ec;
      std::filesystem::remove_all(env.work_dir, ec);
      return d;
    },
    [job](const std::string& what) {
      return msg::stage_done{job, msg::outcome::transient, "encoder: " + what, "", 0, 0, false, "", ""};
    });
}

} // namespace

encoder_role::behavior_type encoder_actor(encoder_role::pointer self, context ctx,
                                          config::encoder enc) {
  auto sh = std::make_shared<shell>();
  sh->ctx = std::move(ctx);
  sh->enc = std::move(enc);
  auto* b = sh->ctx.cluster->find_backend(sh->enc.backend);
  if (b == nullptr)
    throw std::runtime_error("encoder " + sh->enc.name + ": unknown backend " + sh->enc.backend);
  const auto& knobs = sh->ctx.cluster->knobs;
  sh->backend = backends::make_encoder({*b, sh->enc.profile_key, sh->enc.name, sh->enc.host,
                                        sh->enc.gpus, knobs.log_file_bytes, knobs.log_files});
  self->attach_functor([cancel = sh->cancel] { *cancel = true; });
  if (config::warm_start_of(*b)) {
    // Beside the pools' loads: the first prompt then finds the text encoder loaded. An
    // encoder warms even on a pool's GPUs: every job's conditioning runs there before its
    // sampling, and a worker keeps its model after its first prompt anyway.
    backends::warm_request req;
    req.env.work_dir = work_dir(sh->ctx) + "/warm-" + sh->enc.name;
    req.env.cancel = sh->cancel.get();  // an encode's own env names no devices either
    warm_in_background(self, sh->backend, req, "encoder " + sh->enc.name, sh->cancel);
  }
  spdlog::info("encoder {}: up", sh->enc.name);
  return {
    [self, sh](msg::encode_request& req) -> caf::result<msg::encode_reply> {
      if (!is_sha256_hex(req.prompt_sha256) || to_hex(sha256_of(req.prompt)) != req.prompt_sha256)
        return msg::encode_reply{req.prompt_sha256, "", false, 0,
                                 "prompt_sha256 does not match the prompt"};
      auto path = cache_path(*sh, req.prompt_sha256);
      if (std::filesystem::exists(path)) {
        // Touched on each use: the sweep removes conditioning no job used for
        // conditioning_retention_s (actors/latents/sweep.hpp).
        std::error_code ec;
        std::filesystem::last_write_time(path, std::filesystem::file_time_type::clock::now(), ec);
        return msg::encode_reply{req.prompt_sha256, path, true, 0, ""};
      }
      auto promise = self->make_response_promise<msg::encode_reply>();
      for (auto& w : sh->queue)
        if (w.request.prompt_sha256 == req.prompt_sha256) {
          w.promises.push_back(promise);
          return promise;
        }
      sh->queue.push_back(waiting{req, {promise}});
      start_next(self, sh);
      return promise;
    },
    [self, sh](msg::stage_done& d) {
      if (d.attempt == warm_attempt || sh->queue.empty())
        return;  // the warm start's answer (logged by it), or nothing waiting
      auto w = std::move(sh->queue.front());
      sh->queue.pop_front();
      sh->busy = false;
      msg::encode_reply reply{w.request.prompt_sha256, d.product_path, false, d.elapsed_s,
                              d.outcome == msg::outcome::ok ? "" : d.error};
      if (!reply.error.empty())
        spdlog::warn("encoder {}: {}", sh->enc.name, reply.error);
      // The first asker paid for the encode; the others got it from the cache.
      bool first = true;
      for (auto& p : w.promises) {
        auto r = reply;
        if (!first) {
          r.cached = true;
          r.encode_s = 0;
        }
        first = false;
        p.deliver(std::move(r));
      }
      start_next(self, sh);
    },
    [](msg::crash_atom) -> caf::result<void> { throw std::runtime_error("crash requested"); },
  };
}

} // namespace vidline::actors::encoder
