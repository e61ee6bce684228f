#include "actors/latents/latents_actor.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "actors/latents/store_machine.hpp"
#include "common/files.hpp"
#include "common/metrics.hpp"
#include "common/sha256.hpp"
#include "messages/actor_types.hpp"

namespace vidline::actors {
namespace {

namespace fs = std::filesystem;

struct shell {
  context ctx;
  storing::state st;
  std::map<std::string, storing::file> notes;  ///< what each latent's .job note said (cache)
};

double real_now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

/// The `<sha>.latent` files in the latent directory, with the job their note names.
std::map<std::string, storing::file> scan(shell& sh) {
  std::map<std::string, storing::file> out;
  std::error_code ec;
  for (fs::directory_iterator it(latent_dir(sh.ctx), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() != 64 + 7 || name.compare(64, 7, ".latent") != 0)
      continue;
    const std::string sha = name.substr(0, 64);
    std::error_code size_ec;
    const auto bytes = it->file_size(size_ec);
    if (!is_sha256_hex(sha) || size_ec)
      continue;
    auto note = sh.notes.find(sha);
    if (note == sh.notes.end()) {
      storing::file f;
      std::ifstream in(latent_dir(sh.ctx) + "/" + sha + ".job");
      if (!(in >> f.run_id >> f.index) || !files::is_safe_name(f.run_id))
        f = storing::file{};
      note = sh.notes.emplace(sha, f).first;
    }
    storing::file f = note->second;
    f.bytes = bytes;
    out[sha] = f;
  }
  for (auto it = sh.notes.begin(); it != sh.notes.end();)
    it = out.count(it->first) ? std::next(it) : sh.notes.erase(it);
  return out;
}

void execute(shell& sh, const std::vector<storing::effect>& fx) {
  for (auto& e : fx) {
    if (auto* r = std::get_if<storing::fx_report>(&e)) {
      sh.ctx.out->send(sh.ctx.cluster->coordinator, "coordinator", r->h);
    } else if (auto* rm = std::get_if<storing::fx_remove>(&e)) {
      const std::string base = latent_dir(sh.ctx) + "/" + rm->sha256;
      std::error_code ec;
      fs::remove(base + ".latent", ec);
      fs::remove(base + ".job", ec);
      sh.notes.erase(rm->sha256);
      spdlog::info("latents: removed {} (released)", rm->sha256);
    } else if (auto* a = std::get_if<storing::fx_accepting>(&e)) {
      sh.ctx.within_latent_budget->store(a->accepting);
    } else if (auto* l = std::get_if<storing::fx_log>(&e)) {
      spdlog::log(static_cast<spdlog::level::level_enum>(l->level), "latents: {}", l->text);
    }
  }
}

} // namespace

caf::behavior latents_actor(caf::event_based_actor* self, context ctx) {
  auto sh = std::make_shared<shell>();
  sh->ctx = std::move(ctx);
  const auto& k = sh->ctx.cluster->knobs;
  sh->st.host = sh->ctx.host;
  sh->st.epoch = sh->ctx.random64();
  sh->st.budget_bytes = k.latent_budget_bytes;
  sh->st.retention_s = k.latent_retention_s;
  auto interval = std::chrono::milliseconds(k.status_interval_ms);
  self->send(self, msg::status_atom::value);
  return {
    [sh](msg::latent_release& r) {
      execute(*sh, storing::step(sh->st, storing::ev_release{std::move(r.sha256s)}, real_now()));
    },
    [self, sh, interval](msg::status_atom) {
      auto held = scan(*sh);
      double bytes = 0;
      for (auto& [sha, f] : held)
        bytes += static_cast<double>(f.bytes);
      const metrics::labels host{{"host", sh->ctx.host}};
      metrics::global().set("vidline_latent_bytes_waiting", host, bytes);
      metrics::global().set("vidline_latent_files", host, static_cast<double>(held.size()));
      execute(*sh, storing::step(sh->st, storing::ev_scan{std::move(held)}, real_now()));
      self->delayed_send(self, interval, msg::status_atom::value);
    },
    [](msg::crash_atom) -> caf::result<void> { throw std::runtime_error("crash requested"); },
  };
}

} // namespace vidline::actors
