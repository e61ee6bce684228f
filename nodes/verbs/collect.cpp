/// Collecting a run's videos to the submitting host (collect.hpp, docs/shots.md).

#include "nodes/verbs/collect.hpp"
#include "actors/coordinator/input_maker.hpp"
#include "nodes/verbs/sequence_join.hpp"
#include "nodes/verbs/collection_reuse.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include "actors/decoder/output_index.hpp"
#include "common/files.hpp"
#include "common/sha256.hpp"
#include "messages/messages.hpp"
#include "nodes/verbs/client.hpp"
#include "nodes/bus/keys.hpp"

namespace vidline::nodes::verbs {
namespace {

using nlohmann::json;

/// A file name a status may give for a video: a stem and extension of the decoder's safe
/// characters, nothing that could leave `dir`.
bool safe_file_name(const std::string& f) {
  if (f.empty() || f.size() > 200 || f[0] == '.' || f[0] == '-')
    return false;
  for (char ch : f)
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9')
          || ch == '_' || ch == '.' || ch == '-'))
      return false;
  return f.find("..") == std::string::npos && f.size() > 5
         && f.compare(f.size() - 5, 5, ".part") != 0;
}

std::string str_or(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0)
      ::close(fd);
  }
};

/// Pulls video `sha` from `cl` (the decoder host's bus) into `part`, hashing as it goes;
/// on a match fsyncs and renames it to `dest`. "" on success, else why not (the part
/// removed). `bytes` gets the size.
std::string fetch_video(client& cl, const config::knobs& knobs, const std::string& host,
                        const std::string& sha, const std::string& part, const std::string& dest,
                        uint64_t& bytes, const std::string& kind = "output") {
  fd_guard out;
  out.fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out.fd < 0)
    return "cannot open " + part + ": " + std::strerror(errno);
  auto fail = [&](std::string why) {
    ::close(out.fd);
    out.fd = -1;
    std::error_code ec;
    std::filesystem::remove(part, ec);
    return why;
  };
  const auto limits = bus::wire_limits(knobs);
  const uint32_t chunk = knobs.chunk_bytes;
  const int timeout_ms = std::max(1000, knobs.transfer_timeout_ms);
  constexpr int max_silences = 6;  // consecutive unanswered requests before giving up
  sha256 h;
  uint64_t offset = 0, total = 0;
  bool known_total = false;
  int silences = 0;
  static std::atomic<uint64_t> next_transfer{1};  // the node's HTTP server and its coordinator
  while (!known_total || offset < total) {
    msg::latent_fetch req;
    req.transfer_id = next_transfer++;
    req.sha256 = sha;
    req.offset = offset;
    req.length = chunk;
    req.kind = kind;
    auto rep = cl.request("bus", req, timeout_ms);
    if (!rep) {
      if (++silences >= max_silences)
        return fail(fmt::format("no answer from host {} for {} s", host,
                                max_silences * timeout_ms / 1000));
      continue;
    }
    silences = 0;
    if (rep->env.type != msg::latent_chunk::wire_name)
      return fail("host " + host + " answered " + rep->env.type);
    msgpack::object_handle keep;
    msg::latent_chunk c;
    try {
      if (!msg::unpack_body(rep->body, limits, keep))
        return fail("host " + host + " sent a chunk that does not decode");
      keep.get().convert(c);
    } catch (const std::exception&) {
      return fail("host " + host + " sent a chunk that does not decode");
    }
    if (!c.error.empty())
      return fail(c.error != "not found" ? "host " + host + ": " + c.error
                  : kind == "output"
                    ? "host " + host + " has no video of that SHA-256 (removed, or made "
                      "before outputs were collectable)"
                    : "host " + host + " no longer holds that latent (released)");
    if (c.offset != offset || c.sha256 != sha || (known_total && c.total != total))
      return fail("host " + host + " sent a chunk that does not follow (offset, digest or size)");
    total = c.total;
    known_total = true;
    const std::size_t n = c.data.size;
    if (n > chunk || offset + n > total || (n == 0 && offset < total))
      return fail("host " + host + " sent a chunk of the wrong length");
    h.update(c.data.ptr, n);
    std::size_t done = 0;
    while (done < n) {
      ssize_t w = ::write(out.fd, c.data.ptr + done, n - done);
      if (w < 0 && errno == EINTR)
        continue;
      if (w <= 0)
        return fail("cannot write " + part + ": " + std::strerror(errno));
      done += static_cast<std::size_t>(w);
    }
    offset += n;
  }
  const std::string got = to_hex(h.finish());
  if (got != sha)
    return fail("the bytes from host " + host + " hash to " + got + ", not " + sha +
                " (nothing kept)");
  if (::fsync(out.fd) != 0)
    return fail("cannot fsync " + part + ": " + std::strerror(errno));
  ::close(out.fd);
  out.fd = -1;
  try {
    files::rename_durable(part, dest);
  } catch (const std::exception& e) {
    std::error_code ec;
    std::filesystem::remove(part, ec);
    return e.what();
  }
  bytes = total;
  return "";
}

} // namespace

std::string fetch_output(const config::cluster& c, const std::string& host,
                         const std::string& sha, const std::string& dest, uint64_t& bytes) {
  const auto* h = c.find_host(host);
  if (h == nullptr)
    return "no host " + host + " in the config";
  client cl("tcp://" + h->address + ":" + std::to_string(h->port), c.knobs,
            bus::client_security_for(c, h->name));
  return fetch_video(cl, c.knobs, host, sha, dest + ".part", dest, bytes);
}

std::string fetch_latent(const config::cluster& c, const std::string& host,
                         const std::string& sha, const std::string& dest, uint64_t& bytes) {
  const auto* h = c.find_host(host);
  if (h == nullptr)
    return "no host " + host + " in the config";
  client cl("tcp://" + h->address + ":" + std::to_string(h->port), c.knobs,
            bus::client_security_for(c, h->name));
  return fetch_video(cl, c.knobs, host, sha, dest + ".part", dest, bytes, "");
}

namespace {

/// A job's verdict as an index line says it ({verdict, at_unix, take_index, revision}, as
/// the decoder's index), from its status; null when it has none.
json review_of(const json& job) {
  const json r = job.value("review", json());
  if (!r.is_object() || !r.value("verdict", json()).is_string())
    return nullptr;
  return {{"verdict", r["verdict"]}, {"at_unix", r.value("at_unix", json())},
          {"take_index", r.value("take_index", json())},
          {"revision", r.value("revision", json(1))}};
}

} // namespace

std::string collected_line(const std::string& run_id, const json& j, uint64_t bytes) {
  const bool reused = str_or(j, "state") == "reused";
  std::string file = std::filesystem::path(str_or(j, "output")).filename().string();
  if (reused && !str_or(j, "name").empty())
    file = str_or(j, "name") + std::filesystem::path(file).extension().string();
  const auto dot = file.rfind('.');
  auto null_if_empty = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  const json times = j.value("times", json::object());
  auto num = [&](const char* k) { return times.contains(k) && times[k].is_number() ? times[k] : json(0); };
  json l = {{"name", dot == std::string::npos ? file : file.substr(0, dot)},
            {"file", file},
            {"run_id", run_id},
            {"index", j.value("index", uint64_t{0})},
            {"seed", j.value("seed", uint64_t{0})},
            {"width", j.value("width", 0u)},
            {"height", j.value("height", 0u)},
            {"seconds", j.value("seconds", 0u)},
            {"prompt_sha256", null_if_empty(str_or(j, "prompt_sha256"))},
            {"reference_sha256", null_if_empty(str_or(j, "reference_sha256"))},
            {"pool", null_if_empty(str_or(j, "pool"))},
            {"decoder", null_if_empty(str_or(j, "decoder"))},
            {"timings", {{"conditioning_s", num("conditioning_s")},
                         {"sampling_s", num("sampling_s")},
                         {"handoff_s", num("handoff_s")},
                         {"decode_s", num("decode_s")}}},
            {"output_sha256", str_or(j, "output_sha256")},
            {"bytes", bytes}};
  if (!str_or(j, "key").empty())
    l["key"] = str_or(j, "key");  // docs/shots.md, "Job keys"
  if (reused)
    l["reused"] = true;
  if (auto review = review_of(j); !review.is_null())
    l["review"] = std::move(review);  // the verdict so far; a later one gets a line of its own
  // What it was made from, as the status says it (config::shot_record's fields).
  for (const char* k : {"workflow", "model", "params", "inputs", "negative_prompt_sha256", "ident",
                        "vidline_version", "model_identity"})
    if (j.contains(k))
      l[k] = j[k];
  return l.dump(-1, ' ', false, json::error_handler_t::replace);
}

struct collector::impl {
  const config::cluster& c;
  std::string dir;
  std::string index;
  actors::decoder::cache idx;
  std::map<std::string, std::unique_ptr<client>> clients;  // by host
  std::set<std::string> handled;                           // "<index>:<sha>": done, found or refused
  std::map<std::string, std::string> refusals;             // key -> its problem line
  std::map<std::string, std::string> failures;             // key -> its problem line
  std::map<uint64_t, std::pair<std::string, std::string>> files;  // job -> (file, sha) here
  std::map<std::string, uint64_t> reviewed;                // key -> the review revision indexed
  void index_review(const std::string& key, const json& job, const std::string& file,
                    const std::string& sha, const std::string& label);
  std::set<std::string> joined;                            // sequences joined (or refused)
  /// Sequences the folder's index names: file -> (its parts' digests, its own).
  std::map<std::string, std::pair<std::vector<std::string>, std::string>> sequences;
  std::map<std::string, std::string> local;                // sha -> a file of the folder (its
                                                           // index line's; checked on copy)
  void join_sequences(const std::string& run_id, const json& status, collect_report& r);
};

/// Sequences whose parts are all collected here are joined (nodes/verbs/sequence_join.hpp)
/// and indexed like any video, with their parts' digests.
void collector::impl::join_sequences(const std::string& run_id, const json& status,
                                     collect_report& r) {
  for (const auto& q : status.value("sequences", json::array())) {
    const std::string name = str_or(q, "name");
    if (name.empty() || joined.count(name) || !q.value("done", false))
      continue;
    std::vector<std::string> paths, shas;
    json parts = json::array();
    bool sim = true, all_here = true;
    for (const auto& p : q.value("parts", json::array())) {
      auto it = files.find(p.value("index", uint64_t{0}));
      if (it == files.end()) {
        all_here = false;
        break;
      }
      paths.push_back(it->second.first);
      shas.push_back(it->second.second);
      sim = sim && actors::coordinator::decoder_backend_type(c, str_or(p, "decoder")) == "sim";
      parts.push_back({{"name", std::filesystem::path(it->second.first).stem().string()},
                       {"output_sha256", it->second.second}});
    }
    if (!all_here || paths.empty())
      continue;
    const std::string file = name + std::filesystem::path(paths.front()).extension().string();
    const std::string dest = dir + "/" + file;
    joined.insert(name);
    std::error_code ec;
    if (auto it = sequences.find(file); it != sequences.end() && it->second.first == shas
        && std::filesystem::exists(dest, ec) && sha256_file_hex(dest) == it->second.second) {
      ++r.already;  // joined from these parts before (a run that reused them)
      continue;
    }
    if (std::filesystem::exists(dest, ec)) {
      r.problems.push_back("sequence " + name + ": refused: " + dest
                           + " exists; it is not overwritten");
      continue;
    }
    if (auto why = nodes::verbs::join_sequence(sim, paths, shas, dest); !why.empty()) {
      r.problems.push_back("sequence " + name + ": not joined: " + why);
      continue;
    }
    uint64_t bytes = 0;
    const std::string sha = sha256_file_hex(dest, &bytes);
    json l = {{"name", name}, {"file", file}, {"run_id", run_id}, {"sequence", true},
              {"parts", std::move(parts)}, {"output_sha256", sha}, {"bytes", bytes}};
    try {
      actors::decoder::append_line(idx, index, name, sha, l.dump());
      ++r.collected;
    } catch (const std::exception& e) {
      r.problems.push_back("sequence " + name + ": joined, but its index line was not written: "
                           + e.what());
    }
  }
}

/// A verdict given since the job's line went into this index: the line again with it, as
/// the decoder's index does (actors::decoder::append_review).
void collector::impl::index_review(const std::string& key, const json& job,
                                   const std::string& file, const std::string& sha,
                                   const std::string& label) {
  const json review = review_of(job);
  if (review.is_null())
    return;
  const uint64_t revision = review["revision"].is_number_unsigned()
                              ? review["revision"].get<uint64_t>() : 1;
  if (auto it = reviewed.find(key); it != reviewed.end() && it->second >= revision)
    return;
  try {
    actors::decoder::append_review(index, file, sha, review);
    reviewed[key] = revision;
    failures.erase(key);
  } catch (const std::exception& e) {
    failures[key] = label + ": collected, but its verdict was not indexed: " + e.what();
  }
}

collector::collector(const config::cluster& c, std::string dir)
    : p_(std::make_unique<impl>(impl{c, std::move(dir), "", {}, {}, {}, {}, {}, {}, {}, {}, {}, {}})) {
  files::make_dirs(p_->dir);
  p_->index = p_->dir + "/" + actors::decoder::file_name;
  // The folder's videos by digest: a reused video whose bytes it holds under another name
  // is copied from there, not fetched (it may be gone from the cluster).
  std::ifstream in(p_->index);
  for (std::string text; std::getline(in, text);) {
    const json l = json::parse(text, nullptr, false);
    const std::string file = l.is_object() ? str_or(l, "file") : "";
    if (!safe_file_name(file) || !is_sha256_hex(str_or(l, "output_sha256")))
      continue;
    if (l.value("sequence", false)) {
      std::vector<std::string> parts;
      for (const auto& p : l.value("parts", json::array()))
        parts.push_back(str_or(p, "output_sha256"));
      p_->sequences[file] = {std::move(parts), str_or(l, "output_sha256")};
    } else {
      p_->local.emplace(str_or(l, "output_sha256"), p_->dir + "/" + file);
    }
  }
}

collector::~collector() = default;

void collector::pass(const json& status, bool final) {
  auto& P = *p_;
  const std::string run_id = str_or(status, "run_id");
  if (final)
    r_.not_made = 0;
  // A host that did not answer is not asked again in this pass: one silence per host, not
  // one per video (its videos are named as not collected; the next final pass tries again).
  std::map<std::string, std::string> silent;
  for (const auto& j : status.value("jobs", json::array())) {
    const std::string sha = str_or(j, "output_sha256");
    const std::string output = str_or(j, "output");
    const std::string state = str_or(j, "state");
    if ((state != "succeeded" && state != "reused") || output.empty() || !is_sha256_hex(sha)) {
      if (final)
        ++r_.not_made;
      continue;
    }
    const std::string key = std::to_string(j.value("index", uint64_t{0})) + ":" + sha;
    if (P.handled.count(key)) {
      // Collected before: a verdict given since goes into this index too.
      if (auto f = P.files.find(j.value("index", uint64_t{0}));
          f != P.files.end() && f->second.second == sha) {
        const std::string file = std::filesystem::path(f->second.first).filename().string();
        P.index_review(key, j, file, sha,
                       fmt::format("job {} ({})", j.value("index", uint64_t{0}), file));
      }
      continue;
    }
    if (!final && P.failures.count(key))
      continue;
    P.failures.erase(key);
    // A reused video (made by an earlier job with the same key) is collected under this
    // job's own name.
    const std::string own = str_or(j, "name");
    const std::string file = state == "reused" && !own.empty()
                               ? own + std::filesystem::path(output).extension().string()
                               : std::filesystem::path(output).filename().string();
    const std::string label = fmt::format("job {} ({})", j.value("index", uint64_t{0}), file);
    if (!safe_file_name(file)) {
      P.failures[key] = label + ": not a file name to collect under";
      continue;
    }
    const std::string dest = P.dir + "/" + file;
    const auto stem = file.substr(0, file.rfind('.'));
    std::error_code ec;
    uint64_t bytes = 0;
    if (std::filesystem::exists(dest, ec)) {
      const std::string have = sha256_file_hex(dest, &bytes);
      if (have != sha) {
        P.handled.insert(key);
        P.refusals[key] = fmt::format(
          "{}: refused: {} exists with other bytes (SHA-256 {}, the run's video is {}); it "
          "is not overwritten: move it away and collect again",
          label, dest, have.empty() ? "unreadable" : have, sha);
        continue;
      }
      ++r_.already;
    } else if (auto l = P.local.find(sha);
               l != P.local.end() && files::copy_verified(l->second, sha, dest, bytes).empty()) {
      ++r_.collected;  // the folder holds its bytes already (a video reused by its key)
    } else {
      const std::string decoder = str_or(j, "decoder");
      const auto* d = P.c.find_decoder(decoder);
      const auto* h = d == nullptr ? nullptr : P.c.find_host(d->host);
      if (h == nullptr) {
        P.failures[key] = label + ": decoder '" + decoder + "' is not in this config";
        continue;
      }
      if (auto it = silent.find(h->name); it != silent.end()) {
        P.failures[key] = label + ": not collected: " + it->second;
        continue;
      }
      auto& cl = P.clients[h->name];
      std::string why;
      try {
        if (!cl)
          cl = std::make_unique<client>("tcp://" + h->address + ":" + std::to_string(h->port),
                                        P.c.knobs, bus::client_security_for(P.c, h->name));
        why = fetch_video(*cl, P.c.knobs, h->name, sha, dest + ".part", dest, bytes);
      } catch (const std::exception& e) {
        why = e.what();
      }
      if (!why.empty()) {
        if (why.rfind("no answer from host", 0) == 0)
          silent[h->name] = why;
        P.failures[key] = label + ": not collected: " + why;
        continue;
      }
      ++r_.collected;
    }
    try {
      actors::decoder::append_line(P.idx, P.index, stem, sha,
                                        collected_line(run_id, j, bytes));
      P.handled.insert(key);
      P.files[j.value("index", uint64_t{0})] = {dest, sha};
      P.local.emplace(sha, dest);
      // Its verdict, when the line was there before it (collected before the verdict).
      P.index_review(key, j, file, sha, label);
    } catch (const std::exception& e) {
      P.failures[key] = label + ": collected, but its index line was not written: " + e.what();
    }
  }
  r_.refused = static_cast<uint32_t>(P.refusals.size());
  r_.failed = static_cast<uint32_t>(P.failures.size());
  r_.problems.clear();
  P.join_sequences(run_id, status, r_);
  for (auto& [k, why] : P.refusals)
    r_.problems.push_back(why);
  for (auto& [k, why] : P.failures)
    r_.problems.push_back(why);
}

collect_report collect_run(const config::cluster& c, const json& status, const std::string& dir) {
  collector k(c, dir);
  k.pass(status, true);
  return k.report();
}

std::string format_collect_report(const collect_report& r, const std::string& dir) {
  std::string s = fmt::format("collected {} video(s) into {}", r.collected, dir);
  if (r.already)
    s += fmt::format(", {} already there", r.already);
  if (r.refused)
    s += fmt::format(", {} refused (another file at the name)", r.refused);
  if (r.failed)
    s += fmt::format(", {} not collected (`vidline resume RUN --collect DIR` tries again)", r.failed);
  if (r.not_made)
    s += fmt::format(", {} job(s) have no video", r.not_made);
  return s;
}

} // namespace vidline::nodes::verbs
