#include "nodes/node.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <random>
#include <thread>
#include <unistd.h>

#include <netdb.h>
#include <sys/socket.h>
#include <sys/statvfs.h>

#include <caf/all.hpp>

#include <spdlog/spdlog.h>

#include "actors/context.hpp"
#include "actors/coordinator/coordinator_actor.hpp"
#include "actors/decoder/decoder_actor.hpp"
#include "actors/encoder/encoder_actor.hpp"
#include "actors/latents/latents_actor.hpp"
#include "actors/pool/pool_actor.hpp"
#include "actors/supervisor/supervisor.hpp"
#include "common/spawn/pid_records.hpp"
#include "common/crash_points.hpp"
#include "common/data_paths.hpp"
#include "common/files.hpp"
#include "common/metrics.hpp"
#include "nodes/bus/bus.hpp"
#include "nodes/gpu/sampler.hpp"
#include "nodes/coordinator_calls.hpp"
#include "nodes/http_server.hpp"
#include "nodes/run_collection.hpp"
#include "nodes/verbs/exit_codes.hpp"
#include "nodes/state/journal_sqlite.hpp"
#include "nodes/bus/keys.hpp"
#include "nodes/state/node_lock.hpp"
#include "nodes/node_log.hpp"
#include "nodes/data/inputs.hpp"
#include "nodes/router.hpp"
#include "nodes/systemd_notify.hpp"
#include "nodes/verbs/collect.hpp"
#include "vidline/version.hpp"

namespace vidline::nodes {
namespace {

void setup_logging(const config::cluster& c, const config::host& h) {
  auto dir = h.data_dir + "/logs";
  files::make_dirs(dir);
  spdlog::set_default_logger(make_node_logger(dir, h.name, c.knobs.log_file_bytes, c.knobs.log_files,
                                              is_regular_file(2)));
}

double wall_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

double monotonic_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string endpoint_of(const config::host& h) {
  return "tcp://" + h.address + ":" + std::to_string(h.port);
}

/// The numeric IP addresses a host's configured address stands for (the ZAP handler of
/// the bulk channel compares connections' source addresses with them).
std::vector<std::string> numeric_addresses(const std::string& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::vector<std::string> out;
  if (::getaddrinfo(address.c_str(), nullptr, &hints, &res) != 0)
    return out;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    char text[NI_MAXHOST];
    if (::getnameinfo(a->ai_addr, a->ai_addrlen, text, sizeof text, nullptr, 0,
                      NI_NUMERICHOST) == 0 &&
        std::find(out.begin(), out.end(), text) == out.end())
      out.emplace_back(text);
  }
  ::freeaddrinfo(res);
  return out;
}

/// The bulk channel of host `self` (docs/security.md, "Bulk transfers"): bound when it has
/// a bulk_port, used toward every peer that has one too; admits the addresses of every
/// host of the cluster.
void set_bulk_options(bus::bus_options& bo, const config::cluster& c, const config::host& self) {
  if (self.bulk_port == 0)
    return;
  bo.bulk_bind_endpoint = "tcp://" + self.address + ":" + std::to_string(self.bulk_port);
  for (const auto& h : c.hosts) {
    for (auto& a : numeric_addresses(h.address))
      if (std::find(bo.bulk_admit_addresses.begin(), bo.bulk_admit_addresses.end(), a) ==
          bo.bulk_admit_addresses.end())
        bo.bulk_admit_addresses.push_back(a);
    if (h.name != self.name && h.bulk_port != 0)
      bo.bulk_peers[h.name] = "tcp://" + h.address + ":" + std::to_string(h.bulk_port);
  }
  if (bo.bulk_admit_addresses.empty())
    throw std::runtime_error("no host address of the cluster resolves: the bulk channel on " +
                             bo.bulk_bind_endpoint + " would admit nobody");
}

/// The supervised children of this host: the coordinator (if it runs here), its pools,
/// encoder and decoders.
std::vector<actors::supervisor::child_spec> children_of(const actors::context& ctx,
                                            const std::shared_ptr<actors::coordinator::journal>& jnl) {
  const auto& c = *ctx.cluster;
  std::vector<actors::supervisor::child_spec> out;
  using sup = actors::supervisor::supervisor_role::pointer;
  // The registry holds dynamically typed handles; each child's contract is checked at it.
  auto untyped = [](const auto& typed) { return caf::actor_cast<caf::actor>(typed); };
  if (c.coordinator == ctx.host)
    out.push_back({"coordinator", c.knobs.coordinator_restarts,
                   [ctx, jnl, untyped](sup self) {
                     // Frames of videos made on other hosts: pulled as --collect pulls them;
                     // latents handed over: pulled as a decoder pulls them.
                     actors::coordinator::input_fetchers fetch;
                     fetch.video = [c = ctx.cluster](const std::string& host,
                                                     const std::string& sha,
                                                     const std::string& dest) {
                       uint64_t bytes = 0;
                       return verbs::fetch_output(*c, host, sha, dest, bytes);
                     };
                     fetch.latent = [c = ctx.cluster](const std::string& host,
                                                      const std::string& sha,
                                                      const std::string& dest) {
                       uint64_t bytes = 0;
                       return verbs::fetch_latent(*c, host, sha, dest, bytes);
                     };
                     return untyped(
                       self->spawn(actors::coordinator::coordinator_actor, ctx, jnl, std::move(fetch)));
                   }});
  for (auto& e : c.encoders)
    if (e.host == ctx.host)
      out.push_back({"encoder", c.knobs.encoder_restarts, [ctx, e, untyped](sup self) {
                       return untyped(self->spawn(actors::encoder::encoder_actor, ctx, e));
                     }});
  for (auto& p : c.pools)
    if (p.host == ctx.host)
      out.push_back({"pool:" + p.name, c.knobs.pool_restarts,
                     [ctx, p, untyped](sup self) {
                       return untyped(self->spawn(actors::pool::pool_actor, ctx, p));
                     }});
  // Every host holds latents (sampled, received or both); restarted like a decoder.
  out.push_back({"latents", c.knobs.decoder_restarts, [ctx, untyped](sup self) {
                   return untyped(self->spawn(actors::latents::latents_actor, ctx));
                 }});
  for (auto& d : c.decoders)
    if (d.host == ctx.host)
      out.push_back({"decoder:" + d.name, c.knobs.decoder_restarts,
                     [ctx, d, untyped](sup self) {
                       return untyped(self->spawn(actors::decoder::decoder_actor, ctx, d));
                     }});
  return out;
}

/// Waits for SIGTERM/SIGINT or for `give_up`; returns the exit code. `turns` counts its
/// rounds (the systemd watchdog's proof that this loop is alive).
int wait_for_end(const std::atomic<int>& give_up, std::atomic<uint64_t>& turns) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  timespec slice{0, 100 * 1000 * 1000};
  for (;;) {
    turns.fetch_add(1, std::memory_order_relaxed);
    int sig = sigtimedwait(&set, nullptr, &slice);
    if (sig == SIGTERM || sig == SIGINT) {
      spdlog::info("signal {}: stopping", sig);
      return verbs::exit_code::ok;
    }
    if (int code = give_up.load(); code != 0)
      return code;
  }
}

/// What /metrics shows of the bus and the disk, read at each scrape (docs/metrics.md).
std::vector<int> add_node_collectors(const bus::bus& b, const config::host& h) {
  auto& reg = metrics::global();
  std::vector<int> ids;
  ids.push_back(reg.add_collector([&b] {
    const auto s = b.stats();
    std::vector<metrics::sample> out;
    auto put = [&](const char* name, metrics::labels l, uint64_t v) {
      out.push_back({name, std::move(l), static_cast<double>(v)});
    };
    put("vidline_bus_frames_received_total", {}, s.frames_received);
    put("vidline_bus_frames_sent_total", {}, s.sent);
    for (std::size_t i = 1; i < s.decode_errors.size(); ++i)
      put("vidline_bus_dropped_frames_total",
          {{"reason", msg::to_string(static_cast<msg::decode_error>(i))}}, s.decode_errors[i]);
    put("vidline_bus_dropped_frames_total", {{"reason", "duplicate"}}, s.duplicates);
    put("vidline_bus_dropped_frames_total", {{"reason", "send_refused"}}, s.send_dropped);
    put("vidline_bus_dropped_frames_total", {{"reason", "queue_full"}}, s.queue_full);
    put("vidline_bus_dropped_frames_total", {{"reason", "unroutable"}}, s.unroutable);
    put("vidline_bus_dropped_frames_total", {{"reason", "refused_peer"}}, s.refused_peer_frames);
    put("vidline_bus_dropped_frames_total", {{"reason", "impersonation"}}, s.impersonations);
    put("vidline_bus_dropped_frames_total", {{"reason", "bulk_misuse"}}, s.bulk_misuse);
    put("vidline_bus_dropped_frames_total", {{"reason", "stale_chunk"}}, s.stale_chunks);
    put("vidline_bus_handler_errors_total", {}, s.handler_errors);
    put("vidline_bus_redials_total", {}, s.redials);
    put("vidline_refused_connections_total", {{"channel", "bus"}},
        s.keys_refused + s.handshakes_failed);
    put("vidline_refused_connections_total", {{"channel", "bulk"}}, s.bulk_refused);
    return out;
  }));
  ids.push_back(reg.add_collector([dir = h.data_dir] {
    struct statvfs fs {};
    if (::statvfs(dir.c_str(), &fs) != 0)
      return std::vector<metrics::sample>{};
    return std::vector<metrics::sample>{
      {"vidline_data_dir_free_bytes", {{"dir", dir}},
       static_cast<double>(fs.f_bavail) * static_cast<double>(fs.f_frsize)}};
  }));
  reg.set("vidline_build_info", {{"host", h.name}, {"version", version_string}}, 1);
  return ids;
}

} // namespace

double run_clock_scale(const config::cluster& c) {
  double scale = 0;
  for (auto& [name, b] : c.backends) {
    if (b.type != "sim")
      return 1.0;
    scale = scale == 0 ? b.time_scale : std::min(scale, b.time_scale);
  }
  return scale > 0 ? scale : 1.0;
}

int run_node(const config::cluster& c, const std::string& host_name) {
  const auto* h = c.find_host(host_name);
  if (h == nullptr) {
    std::string known;
    for (auto& x : c.hosts)
      known += (known.empty() ? "" : ", ") + x.name;
    std::fprintf(stderr, "config error: /hosts: no host named '%s' (known: %s)\n",
                 host_name.c_str(), known.c_str());
    return verbs::exit_code::usage;
  }
  try {
    crash::init_from_env();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return verbs::exit_code::usage;
  }
  // Signals are taken by wait_for_end only: block them before any thread starts.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  const std::string digest = config::digest(c);
  // The data directory is this node's for its whole life (nodes/node_lock.hpp): taken
  // before anything in it is touched, so a second node on it changes nothing.
  std::unique_ptr<state::node_lock> claim;
  try {
    claim = std::make_unique<state::node_lock>(h->data_dir, h->name, digest, c.source_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return verbs::exit_code::fatal;
  }
  try {
    for (auto dir : {data_paths::latent_dir(h->data_dir), data_paths::output_dir(h->data_dir),
                     data_paths::work_dir(h->data_dir), data_paths::conditioning_dir(h->data_dir),
                     h->data_dir + "/journal", h->data_dir + "/logs"})
      files::make_dirs(dir);
    setup_logging(c, *h);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cannot prepare data directory %s: %s\n", h->data_dir.c_str(), e.what());
    return verbs::exit_code::fatal;
  }
  // The first line of every node log: which build, from which config (its hello says the same).
  spdlog::info("vidline {} node {} starting, config {} sha256 {}", version_string, h->name,
               c.source_path.empty() ? "(embedded)" : c.source_path, digest);
  for (const auto& k : c.old_profile_keys)
    spdlog::warn("config {}: \"{}\" is the old name of kind '{}', read as it: write "
                 "\"profile\": \"{}\" (or leave \"profile\" out to derive it from the GPUs)",
                 k.path, k.written, k.kind, k.kind);
  // Before any stage process starts: end what a previous life of this node left running
  // (it was killed, so its children's parent-death signal may have missed grandchildren),
  // then record every child of this life.
  try {
    std::string pids = h->data_dir + "/pids";
    auto rep = spawn::reap_previous_life(pids, ::getpid());
    for (auto& n : rep.notes)
      spdlog::warn("{}", n);
    if (rep.killed > 0 || rep.left_to_live_node > 0)
      spdlog::warn("stage processes of a previous life: {} killed, {} record(s) of a node "
                   "still alive left alone ({})", rep.killed, rep.left_to_live_node, pids);
    spawn::set_pid_record_dir(pids);
  } catch (const std::exception& e) {
    spdlog::critical("cannot keep pid records under {}/pids: {}", h->data_dir, e.what());
    return verbs::exit_code::fatal;
  }

  auto cluster = std::make_shared<const config::cluster>(c);
  double scale = run_clock_scale(c);
  auto rng = std::make_shared<std::mt19937_64>(std::random_device{}());
  auto rng_mtx = std::make_shared<std::mutex>();

  auto rt = std::make_shared<router>(h->name, bus::wire_limits(c.knobs));
  bus::bus_options bo;
  bo.self = h->name;
  bo.bind_endpoint = endpoint_of(*h);
  for (auto& peer : c.hosts)
    if (peer.name != h->name)
      bo.peers[peer.name] = endpoint_of(peer);
  bo.knobs = c.knobs;
  bo.latent_dir = data_paths::latent_dir(h->data_dir);
  bo.output_dir = data_paths::output_blob_dir(h->data_dir);
  bo.input_dir = data_paths::input_dir(h->data_dir);
  bo.version = version_string;
  bo.config_digest = digest;
  // Fault injection for tests, off unless set: flip a byte of every nth latent chunk served.
  if (const char* v = std::getenv("VIDLINE_CORRUPT_EVERY_NTH_CHUNK"); v != nullptr && *v != '\0') {
    bo.corrupt_every_nth_chunk = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
    spdlog::warn("VIDLINE_CORRUPT_EVERY_NTH_CHUNK={}: every {}th latent chunk served is damaged",
                 v, bo.corrupt_every_nth_chunk);
  }
  std::unique_ptr<bus::bus> b;
  try {
    bo.security = bus::bus_security_for(c, h->name);
  } catch (const std::exception& e) {
    spdlog::critical("cannot authenticate this node's links: {}", e.what());
    return verbs::exit_code::fatal;
  }
  try {
    set_bulk_options(bo, c, *h);
  } catch (const std::exception& e) {
    spdlog::critical("cannot set up the bulk channel: {}", e.what());
    return verbs::exit_code::fatal;
  }
  try {
    b = std::make_unique<bus::bus>(
      bo, [rt](const bus::inbound& in) { rt->deliver(in); },
      [rt](const msg::peer_event& e) { rt->peer_changed(e); });
    rt->attach(b.get());
    b->start();
  } catch (const std::exception& e) {
    spdlog::critical("cannot start the bus on {}: {}", bo.bind_endpoint, e.what());
    return verbs::exit_code::fatal;
  }

  auto collectors = add_node_collectors(*b, *h);
  std::unique_ptr<http_server> web;
  // The coordinator's node answers its HTTP API in its own process (CAF requests).
  std::shared_ptr<in_process_calls> calls;
  if (c.coordinator == h->name)
    calls = std::make_shared<in_process_calls>(rt);
  if (h->http.port != 0) {
    try {
      web = std::make_unique<http_server>(cluster, h->name, calls);
    } catch (const std::exception& e) {
      spdlog::critical("cannot start the HTTP endpoint: {}", e.what());
      for (int id : collectors)
        metrics::global().remove_collector(id);
      b->stop();
      return verbs::exit_code::fatal;
    }
  }
  // A host with a collect_dir collects every run's videos (docs/shots.md), over sockets of
  // its own as a client does; stopped first, so no fetch outlives the node's stop.
  std::unique_ptr<run_collection> collecting;
  if (!h->collect_dir.empty())
    collecting = std::make_unique<run_collection>(cluster, h->name);

  // The collectors read the bus: gone before it is.
  auto end_web = [&] {
    collecting.reset();
    if (web)
      web->stop();
    for (int id : collectors)
      metrics::global().remove_collector(id);
    collectors.clear();
  };

  std::shared_ptr<actors::coordinator::journal> jnl;
  if (c.coordinator == h->name) {
    try {
      jnl = std::make_shared<state::sqlite_journal>(h->data_dir + "/journal/journal.db");
    } catch (const std::exception& e) {
      spdlog::critical("cannot open the journal: {}", e.what());
      end_web();
      b->stop();
      return verbs::exit_code::fatal;
    }
  }

  actors::context ctx;
  ctx.host = h->name;
  ctx.cluster = cluster;
  ctx.out = rt;
  ctx.data_dir = h->data_dir;
  ctx.time_scale = scale;
  ctx.run_now = [scale] { return wall_seconds() / scale; };
  ctx.random64 = [rng, rng_mtx] {
    std::lock_guard<std::mutex> lock(*rng_mtx);
    uint64_t v = 0;
    while (v == 0)
      v = (*rng)();
    return v;
  };

  std::atomic<int> give_up{0};
  int code = verbs::exit_code::ok;
  service_notifier notifier;  // systemd's Type=notify; does nothing without NOTIFY_SOCKET
  if (notifier.watchdog_usec() != 0 &&
      notifier.watchdog_usec() / 2000 <= static_cast<uint64_t>(c.knobs.heartbeat_interval_ms))
    spdlog::warn("systemd watchdog period {} ms is at most 2 x heartbeat_interval_ms ({} ms): "
                 "an idle bus loop may miss a check; raise WatchdogSec",
                 notifier.watchdog_usec() / 1000, c.knobs.heartbeat_interval_ms);
  {
    caf::actor_system_config cfg;
    cfg.set("scheduler.max-threads",
            static_cast<size_t>(std::max(2u, std::thread::hardware_concurrency())));
    caf::actor_system system{cfg};
    if (calls)
      calls->attach(&system);
    actors::supervisor::supervisor_options so;
    so.children = children_of(ctx, jnl);
    so.reg = rt.get();
    so.now = monotonic_seconds;
    so.give_up = [&give_up](const std::string&, const std::string&) {
      give_up = verbs::exit_code::gave_up;
    };
    auto sup = system.spawn(actors::supervisor::supervisor, so);
    spdlog::info("node {} up on {} ({} actors, run clock: {} real s per s)", h->name,
                 b->endpoint(), so.children.size(), scale);
    notifier.ready("node " + h->name + " up on " + b->endpoint());
    // Every node reads its cards and reports them (docs/metrics.md, "GPU telemetry").
    auto gpus = std::make_unique<gpu::sampler>(cluster, h->name, rt,
                                               gpu::options_from_environment());
    std::atomic<uint64_t> main_turns{0};
    notifier.start_watchdog({{"bus", [&b] { return b->loop_turns(); }},
                             {"main", [&main_turns] { return main_turns.load(); }}});
    code = wait_for_end(give_up, main_turns);
    notifier.stopping("node " + h->name + " stopping");
    gpus.reset();
    caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
    end_web();
    if (calls)
      calls->attach(nullptr);
    b->stop();
  }  // the actor system waits for every actor (workers are cancelled) here
  spdlog::info("node {} stopped", h->name);
  spdlog::shutdown();
  return code;
}

} // namespace vidline::nodes
