#include "common/stage_records.hpp"

#include "common/crash_points.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <unistd.h>

#include "common/files.hpp"
#include "common/sha256.hpp"

namespace vidline::records {

std::string receipt_path(const std::string& dir, const std::string& run_id, uint32_t index,
                         const std::string& stage) {
  return dir + "/" + run_id + "/" + std::to_string(index) + "." + stage;
}

void write_receipt(const std::string& path, const receipt& r) {
  files::make_dirs(files::parent_of(path));
  std::ostringstream out;
  out << "vidline-receipt 1\nproduct " << r.product << "\nsha256 " << r.sha256 << "\nbytes "
      << r.bytes << "\nsource " << r.source << "\n";
  files::write_atomic(path, out.str());
}

std::optional<receipt> valid_receipt(const std::string& path) {
  std::string text;
  try {
    text = files::read_all(path);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::istringstream in(text);
  std::string line, magic;
  receipt r;
  if (!std::getline(in, magic) || magic != "vidline-receipt 1")
    return std::nullopt;
  while (std::getline(in, line)) {
    auto sp = line.find(' ');
    if (sp == std::string::npos)
      continue;
    auto key = line.substr(0, sp);
    auto value = line.substr(sp + 1);
    if (key == "product")
      r.product = value;
    else if (key == "sha256")
      r.sha256 = value;
    else if (key == "bytes")
      r.bytes = std::strtoull(value.c_str(), nullptr, 10);
    else if (key == "source")
      r.source = value;
  }
  if (r.product.empty() || !is_sha256_hex(r.sha256))
    return std::nullopt;
  uint64_t bytes = 0;
  if (sha256_file_hex(r.product, &bytes) != r.sha256 || bytes != r.bytes)
    return std::nullopt;
  return r;
}

void ledger_append(const std::string& data_dir, const ledger_entry& entry) {
  const std::string line = entry.stage + " " + entry.run_id + " " +
                           std::to_string(entry.index) + " " + std::to_string(entry.attempt) +
                           " " + entry.sha256;
  auto path = data_dir + "/ledger.log";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  std::string l = line + "\n";
  // One write with O_APPEND: lines of concurrent writers never interleave.
  ssize_t n = ::write(fd, l.data(), l.size());
  int e = errno;
  bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (n != static_cast<ssize_t>(l.size()) || !synced)
    throw std::runtime_error("cannot append to " + path + ": " + std::strerror(e));
}

bool ledger_has(const std::string& data_dir, const std::string& stage, const std::string& run_id,
                uint32_t index) {
  std::ifstream in(data_dir + "/ledger.log");  // none yet: no line
  const std::string want = stage + " " + run_id + " " + std::to_string(index) + " ";
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, want.size(), want) == 0)
      return true;
  return false;
}

void ledger_record_reuse(const std::string& data_dir, const ledger_entry& e) {
  if (!ledger_has(data_dir, e.stage, e.run_id, e.index))
    ledger_append(data_dir, e);
}

namespace {

std::string receipts_dir(const std::string& data_dir) { return data_dir + "/receipts"; }

} // namespace

uint64_t publish(const publication& p) {
  const std::string what = p.stage == "sampled" ? "latent" : "video";
  crash::point((what + ".before_commit").c_str());
  files::rename_durable(p.staged, p.product);
  std::error_code ec;
  const auto bytes = static_cast<uint64_t>(std::filesystem::file_size(p.product, ec));
  if (ec)
    throw std::runtime_error("cannot read the size of " + p.product + ": " + ec.message());
  write_receipt(receipt_path(receipts_dir(p.data_dir), p.run_id, p.index, p.stage),
                {p.product, p.sha256, bytes, p.source});
  ledger_append(p.data_dir, {p.stage, p.run_id, p.index, p.attempt, p.sha256});
  crash::point((what + ".after_commit").c_str());
  return bytes;
}

std::optional<receipt> reuse(const std::string& data_dir, const std::string& stage,
                             const std::string& run_id, uint32_t index, uint64_t attempt,
                             const std::string& source) {
  auto r = valid_receipt(receipt_path(receipts_dir(data_dir), run_id, index, stage));
  if (!r || (!source.empty() && r->source != source))
    return std::nullopt;
  // A kill between the receipt and the ledger line left the line out: added now.
  ledger_record_reuse(data_dir, {stage, run_id, index, attempt, r->sha256});
  return r;
}

void retract(const std::string& data_dir, const std::string& stage, const std::string& run_id,
             uint32_t index, uint64_t attempt, const std::string& path, bool published) {
  std::error_code ec;
  if (published) {
    // Published, then another attempt's product won: its receipt would vouch for it.
    auto rp = receipt_path(receipts_dir(data_dir), run_id, index, stage);
    if (auto r = valid_receipt(rp); r && r->product == path)
      std::filesystem::remove(rp, ec);
  }
  std::filesystem::remove_all(path, ec);
  ledger_append(data_dir, {(published ? "removed-" : "fenced-") + stage, run_id, index, attempt, "-"});
}

} // namespace vidline::records
