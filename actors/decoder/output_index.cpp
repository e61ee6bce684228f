#include "actors/decoder/output_index.hpp"

#include "config/shot_record.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "common/files.hpp"

namespace vidline::actors::decoder {

using nlohmann::json;

namespace {

json null_if_empty(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

std::string stem_of(const std::string& path) {
  return std::filesystem::path(path).stem().string();
}

void write_all(int fd, const std::string& text, const std::string& path) {
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      throw std::runtime_error("cannot append to " + path + ": " + std::strerror(errno));
    done += static_cast<std::size_t>(n);
  }
}

} // namespace

std::string line(const entry& e) {
  const auto& j = e.order.job;
  json l = {{"name", stem_of(e.output)},
            {"file", std::filesystem::path(e.output).filename().string()},
            {"run_id", j.run_id},
            {"index", j.index},
            {"seed", j.seed},
            {"width", j.width},
            {"height", j.height},
            {"seconds", j.seconds},
            {"prompt_sha256", j.prompt_sha256},
            {"reference_sha256", null_if_empty(j.reference_sha256)},
            {"pool", null_if_empty(e.order.pool)},
            {"decoder", e.order.decoder},
            {"timings", {{"conditioning_s", e.order.conditioning_s},
                         {"sampling_s", e.order.sampling_s},
                         {"handoff_s", e.handoff_s},
                         {"decode_s", e.decode_s}}},
            {"output_sha256", e.output_sha256},
            {"bytes", e.bytes}};
  // What it was made from: workflow, model, params, input digests, ident, vidline version.
  l.update(config::shot_record(j));
  // Which weights made the latent (the sampling pool's word; null: it cannot tell).
  l["model_identity"] = null_if_empty(e.order.model_identity);
  l["negative_prompt"] = j.negative_prompt.empty() ? json(nullptr) : json(j.negative_prompt);
  return l.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::set<std::pair<std::string, std::string>> read_keys(const std::string& path) {
  std::set<std::pair<std::string, std::string>> out;
  std::ifstream in(path, std::ios::binary);
  std::string text;
  while (std::getline(in, text)) {
    auto j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string()
        || !j.contains("output_sha256") || !j["output_sha256"].is_string())
      continue;
    out.emplace(j["name"].get<std::string>(), j["output_sha256"].get<std::string>());
  }
  return out;
}

bool append(cache& c, const std::string& path, const entry& e) {
  return append_line(c, path, stem_of(e.output), e.output_sha256, line(e));
}

bool append_line(cache& c, const std::string& path, const std::string& name,
                 const std::string& sha256, const std::string& line_text) {
  auto it = c.keys.find(path);
  if (it == c.keys.end()) {
    if (c.keys.size() >= cache::max_cached) {
      auto oldest = c.used.begin();
      for (auto u = c.used.begin(); u != c.used.end(); ++u)
        if (u->second < oldest->second)
          oldest = u;
      c.keys.erase(oldest->first);
      c.used.erase(oldest);
    }
    it = c.keys.emplace(path, read_keys(path)).first;
  }
  c.used[path] = ++c.clock;
  std::pair<std::string, std::string> key{name, sha256};
  if (it->second.count(key))
    return false;
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  std::string text = line_text + "\n";
  // A torn last line (a crash mid-append) is ended first, so this line stands whole.
  off_t size = ::lseek(fd, 0, SEEK_END);
  if (size > 0) {
    char last = '\n';
    if (::pread(fd, &last, 1, size - 1) == 1 && last != '\n')
      text.insert(text.begin(), '\n');
  }
  try {
    write_all(fd, text, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  bool synced = ::fsync(fd) == 0;
  int err = errno;
  ::close(fd);
  if (!synced)
    throw std::runtime_error("cannot fsync " + path + ": " + std::strerror(err));
  if (size == 0)  // a new file: its directory entry made durable too
    files::fsync_dir(std::filesystem::path(path).parent_path().string());
  it->second.insert(std::move(key));
  return true;
}

review_result append_review(const std::string& path, const std::string& file,
                            const std::string& sha256, const json& review) {
  json base;
  {
    std::ifstream in(path, std::ios::binary);
    std::string text;
    while (std::getline(in, text)) {
      auto l = json::parse(text, nullptr, false);
      if (l.is_object() && l.value("file", json()) == file
          && l.value("output_sha256", json()) == sha256)
        base = std::move(l);
    }
  }
  if (base.is_null())
    return review_result::no_line;
  const uint64_t revision = review.value("revision", uint64_t{0});
  uint64_t have = 0;  // a review written before reviews had revisions counts as none
  if (base.contains("review") && base["review"].is_object()) {
    const json& r = base["review"];
    if (r.contains("revision") && r["revision"].is_number_unsigned())
      have = r["revision"].get<uint64_t>();
  }
  if (have >= revision)
    return review_result::already;
  base["review"] = review;
  const std::string name = base.value("name", json()).is_string() ? base["name"].get<std::string>()
                                                                  : file;
  // Keyed apart from the video's own line (which the file holds): always appended.
  cache fresh;
  append_line(fresh, path, name, sha256 + " review " + std::to_string(revision),
              base.dump(-1, ' ', false, json::error_handler_t::replace));
  return review_result::appended;
}

std::size_t remove(cache& c, const std::string& path, const std::string& name,
                   const std::string& sha256) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return 0;
  std::string kept;
  std::string text;
  std::size_t gone = 0;
  while (std::getline(in, text)) {
    auto j = json::parse(text, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.value("name", json()).is_string()
        && j.value("output_sha256", json()).is_string()
        && j["name"].get<std::string>() == name
        && j["output_sha256"].get<std::string>() == sha256) {
      ++gone;
      continue;
    }
    kept += text;
    kept += '\n';
  }
  in.close();
  if (gone == 0)
    return 0;
  files::write_atomic(path, kept);
  if (auto it = c.keys.find(path); it != c.keys.end())
    it->second.erase({name, sha256});
  return gone;
}

} // namespace vidline::actors::decoder
