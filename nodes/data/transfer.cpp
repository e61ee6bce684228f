/// The data plane's fetcher and server (transfer.hpp).

#include "nodes/data/transfer.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <atomic>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "common/data_paths.hpp"
#include "common/files.hpp"
#include "messages/envelope.hpp"

namespace vidline::nodes::data {

uint64_t first_envelope_id() {
  using namespace std::chrono;
  const auto us = duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
  return us > 0 ? static_cast<uint64_t>(us) : 1;
}

namespace {

using steady = std::chrono::steady_clock;

double ms_since(steady::time_point t0) {
  return std::chrono::duration<double, std::milli>(steady::now() - t0).count();
}

std::string errno_text() { return std::strerror(errno); }

/// Closes a file descriptor when it goes out of scope.
struct unique_fd {
  int fd = -1;
  explicit unique_fd(int f) : fd(f) {}
  ~unique_fd() {
    if (fd >= 0)
      ::close(fd);
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
};

bool write_all_at(int fd, const char* p, std::size_t n, uint64_t offset) {
  while (n > 0) {
    ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return false;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return true;
}

void call_guarded(fetch_callback& callback, const fetch_result& r) {
  if (!callback)
    return;
  try {
    callback(r);
  } catch (const std::exception& e) {
    spdlog::error("transfer: fetch callback threw: {}", e.what());
  } catch (...) {
    spdlog::error("transfer: fetch callback threw");
  }
}

} // namespace

const char* to_string(fetch_outcome o) {
  switch (o) {
  case fetch_outcome::ok:
    return "ok";
  case fetch_outcome::corrupt:
    return "corrupt";
  case fetch_outcome::not_found:
    return "not_found";
  case fetch_outcome::transient:
    return "transient";
  }
  return "unknown";
}

// -- receiver ------------------------------------------------------------------------------

namespace {

/// What `<dest>.part.state` records: the part's first `durable` bytes are on disk
/// (fsynced) and hash to `prefix_sha256`. One line: "<sha256> <bytes> <durable> <prefix>".
struct part_record {
  std::string sha256;
  uint64_t bytes = 0;
  uint64_t durable = 0;
  std::string prefix_sha256;
};

std::optional<part_record> read_part_record(const std::string& path) {
  std::string text;
  try {
    text = files::read_all(path);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::istringstream in(text);
  part_record r;
  if (!(in >> r.sha256 >> r.bytes >> r.durable >> r.prefix_sha256) ||
      !is_sha256_hex(r.sha256) || !is_sha256_hex(r.prefix_sha256) || r.durable > r.bytes)
    return std::nullopt;
  return r;
}

} // namespace

/// The disk side of one transfer. Filled in by start(); once its first job is queued only
/// the disk threads touch it, until the hasher posts the completion that reads `callback`.
struct latent_fetcher::part_file {
  int fd = -1;
  std::string part;
  std::string state;    ///< part + ".state": how much of the part is durable
  std::string dest;
  std::string sha256;
  uint64_t bytes = 0;
  uint64_t sync_every = 0;
  vidline::sha256 hasher;
  // The writer's: how far it wrote, from 0.
  uint64_t written = 0;
  // The hasher's: bytes hashed (all of them written before), and of those fsynced and
  // recorded in `state`. The open job sets both before the hasher sees this file.
  uint64_t hashed = 0;
  uint64_t synced = 0;
  std::atomic<bool> failed{false};  ///< a write failed: later writes are skipped
  steady::time_point started;
  fetch_callback callback;
};

/// The network side of one running transfer.
struct latent_fetcher::transfer {
  uint64_t id = 0;
  std::string host;
  std::string sha256;
  std::string kind;            ///< latent_fetch::kind of its requests
  uint64_t bytes = 0;
  std::shared_ptr<part_file> file;
  bool opened = false;         ///< the writer found where to resume; requests may go
  bool asked_empty = false;    ///< an empty latent's one request went
  uint64_t next_request = 0;   ///< offset of the next chunk to ask for
  uint64_t next_expected = 0;  ///< offset of the next chunk to take
  int in_flight = 0;           ///< requested, not received
  int unwritten = 0;           ///< received, not yet written and hashed
  int64_t last_progress_ms = 0;
};

/// Work for the disk threads: each job goes to the writer, then the hasher.
struct latent_fetcher::disk_job {
  enum class kind {
    open,    ///< open the part file, resume from its durable prefix or truncate it
    write,   ///< write and hash one chunk
    verify,  ///< all chunks queued: compare the digest, fsync, rename (or delete)
    abort,   ///< the transfer failed: keep a durable prefix (transient) or delete
  };
  kind what = kind::write;
  uint64_t transfer_id = 0;
  std::shared_ptr<part_file> file;
  uint64_t offset = 0;
  const char* data = nullptr;
  std::size_t size = 0;
  std::shared_ptr<const void> owner;  ///< keeps `data` alive
  fetch_outcome outcome = fetch_outcome::transient;  ///< abort: how it ended
  std::string error;                                 ///< abort: why
};

latent_fetcher::latent_fetcher(const config::knobs& knobs, send_fn send, post_fn post,
                               clock_fn now_ms)
    : knobs_(knobs), send_(std::move(send)), post_(std::move(post)), now_ms_(std::move(now_ms)) {
  if (knobs_.chunk_bytes == 0)
    throw std::invalid_argument("knobs.chunk_bytes must be positive");
  if (knobs_.chunk_window <= 0)
    throw std::invalid_argument("knobs.chunk_window must be positive");
  // Ids continue above a previous boot's, like envelope ids, so a chunk still queued for
  // this host's previous process cannot be taken for one of this process's.
  next_transfer_id_ = first_envelope_id();
  hasher_.thread = std::thread([this] { hasher_loop(); });
  writer_.thread = std::thread([this] { writer_loop(); });
}

latent_fetcher::~latent_fetcher() {
  writer_.stop_and_join();  // the writer hands every job on before it ends
  hasher_.stop_and_join();
  // Only without shutdown(): parts of transfers still running stay, as after a crash; the
  // next fetch resumes from what their records say is durable.
  for (auto& [id, t] : running_)
    if (t.file->fd >= 0)
      ::close(t.file->fd);
}

void latent_fetcher::start(const std::string& host, const std::string& sha256_hex,
                           uint64_t bytes, const std::string& dest_path,
                           fetch_callback callback, const std::string& kind) {
  const auto started = steady::now();
  auto refuse = [&](std::string why) {
    call_guarded(callback,
                 fetch_result{fetch_outcome::transient, std::move(why), 0, ms_since(started)});
  };
  if (shut_down_)
    return refuse("bus stopping");
  if (busy_dests_.count(dest_path) != 0)
    return refuse("a fetch into " + dest_path + " is already running");
  auto file = std::make_shared<part_file>();
  file->part = dest_path + ".part";
  file->state = file->part + ".state";
  file->dest = dest_path;
  file->sha256 = sha256_hex;
  file->bytes = bytes;
  file->sync_every = knobs_.part_sync_bytes;
  file->started = started;
  file->callback = std::move(callback);

  const uint64_t id = next_transfer_id_++;
  transfer& t = running_[id];
  t.id = id;
  t.host = host;
  t.sha256 = sha256_hex;
  t.kind = kind;
  t.bytes = bytes;
  t.file = file;
  busy_dests_.insert(dest_path);
  disk_job o;
  o.what = disk_job::kind::open;
  o.transfer_id = id;
  o.file = std::move(file);
  queue(std::move(o));  // requests go once the writer knows where to resume (on_opened)
}

void latent_fetcher::on_opened(uint64_t id, uint64_t resume_at) {
  auto it = running_.find(id);
  if (it == running_.end())
    return;  // ended meanwhile
  transfer& t = it->second;
  t.opened = true;
  t.next_request = t.next_expected = resume_at;
  resumed_bytes_ += resume_at;
  if (t.bytes > 0 && resume_at >= t.bytes)
    return queue_verify(t);  // all of it was durable already
  if (!issue_requests(t))
    finish(id, fetch_outcome::transient, "cannot reach " + t.host);
}

bool latent_fetcher::issue_requests(transfer& t) {
  if (!t.opened)
    return true;
  // An empty latent still takes one request: its reply confirms the size.
  while (t.in_flight + t.unwritten < knobs_.chunk_window &&
         (t.next_request < t.bytes || (t.bytes == 0 && !t.asked_empty))) {
    const uint64_t offset = t.next_request;
    const auto length =
        static_cast<uint32_t>(std::min<uint64_t>(knobs_.chunk_bytes, t.bytes - offset));
    if (!send_(t.host, msg::latent_fetch{t.id, t.sha256, offset, length, t.kind}))
      return false;
    if (t.in_flight == 0)
      t.last_progress_ms = now_ms_();  // the timeout runs while something is asked for
    t.next_request += length;
    t.asked_empty = true;
    ++t.in_flight;
  }
  return true;
}

bool latent_fetcher::on_chunk(const std::string& from, const msg::latent_chunk& c,
                              std::shared_ptr<const void> owner) {
  auto it = running_.find(c.transfer_id);
  if (it == running_.end() || it->second.host != from || it->second.sha256 != c.sha256)
    return false;
  transfer& t = it->second;
  t.last_progress_ms = now_ms_();
  if (!c.error.empty()) {
    finish(t.id, c.error == latent_not_found ? fetch_outcome::not_found : fetch_outcome::transient,
           "source " + from + ": " + c.error);
    return true;
  }
  if (c.total != t.bytes) {
    finish(t.id, fetch_outcome::corrupt,
           "source " + from + " has " + std::to_string(c.total) + " bytes, expected " +
               std::to_string(t.bytes));
    return true;
  }
  if (c.offset != t.next_expected) {
    // One connection keeps requests and replies in order; a gap means a reconnect lost
    // some. The retry resumes from the durable prefix.
    finish(t.id, fetch_outcome::transient,
           "chunk at " + std::to_string(c.offset) + " arrived, expected " +
               std::to_string(t.next_expected));
    return true;
  }
  const uint64_t expected_len = std::min<uint64_t>(knobs_.chunk_bytes, t.bytes - c.offset);
  if (c.data.size != expected_len) {
    finish(t.id, fetch_outcome::corrupt,
           "chunk at " + std::to_string(c.offset) + " holds " + std::to_string(c.data.size) +
               " bytes, expected " + std::to_string(expected_len));
    return true;
  }
  disk_job w;
  w.what = disk_job::kind::write;
  w.transfer_id = t.id;
  w.file = t.file;
  w.offset = c.offset;
  w.data = c.data.ptr;
  w.size = c.data.size;
  w.owner = std::move(owner);
  queue(std::move(w));
  t.next_expected += c.data.size;
  --t.in_flight;
  ++t.unwritten;

  if (t.next_expected < t.bytes) {
    if (!issue_requests(t))
      finish(t.id, fetch_outcome::transient, "cannot reach " + t.host);
    return true;
  }
  queue_verify(t);  // everything is in: the hasher verifies after the last chunk
  return true;
}

void latent_fetcher::queue_verify(transfer& t) {
  disk_job v;
  v.what = disk_job::kind::verify;
  v.transfer_id = t.id;
  v.file = t.file;
  running_.erase(t.id);
  queue(std::move(v));
}

void latent_fetcher::on_written(uint64_t id) {
  auto it = running_.find(id);
  if (it == running_.end())
    return;  // ended meanwhile
  --it->second.unwritten;
  // The window reopens as the disk catches up; waiting for the disk is not a timeout.
  if (!issue_requests(it->second))
    finish(id, fetch_outcome::transient, "cannot reach " + it->second.host);
}

void latent_fetcher::finish(uint64_t id, fetch_outcome outcome, std::string error) {
  auto it = running_.find(id);
  if (it == running_.end())
    return;
  disk_job a;
  a.what = disk_job::kind::abort;
  a.transfer_id = id;
  a.file = std::move(it->second.file);
  a.outcome = outcome;
  a.error = std::move(error);
  running_.erase(it);
  queue(std::move(a));  // after the writes already queued; the callback follows it
}

void latent_fetcher::queue(disk_job job) { writer_.push(std::move(job)); }

void latent_fetcher::tick(int64_t now_ms) {
  std::vector<uint64_t> expired;
  for (const auto& [id, t] : running_)
    if (t.in_flight > 0 && now_ms - t.last_progress_ms >= knobs_.transfer_timeout_ms)
      expired.push_back(id);
  for (uint64_t id : expired)
    finish(id, fetch_outcome::transient,
           "no chunk for " + std::to_string(knobs_.transfer_timeout_ms) + " ms");
}

std::optional<int64_t> latent_fetcher::next_deadline() const {
  std::optional<int64_t> next;
  for (const auto& [id, t] : running_) {
    if (t.in_flight == 0)
      continue;
    const int64_t d = t.last_progress_ms + knobs_.transfer_timeout_ms;
    if (!next || d < *next)
      next = d;
  }
  return next;
}

void latent_fetcher::fail_host(const std::string& host, const std::string& why) {
  std::vector<uint64_t> ids;
  for (const auto& [id, t] : running_)
    if (t.host == host)
      ids.push_back(id);
  for (uint64_t id : ids)
    finish(id, fetch_outcome::transient, "source " + host + ": " + why);
}

void latent_fetcher::shutdown() {
  if (shut_down_)
    return;
  shut_down_ = true;
  std::vector<uint64_t> ids;
  for (const auto& [id, t] : running_)
    ids.push_back(id);
  for (uint64_t id : ids)
    finish(id, fetch_outcome::transient, "bus stopping");
  writer_.stop_and_join();
  hasher_.stop_and_join();
}

void latent_fetcher::stage::push(disk_job job) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    jobs.push_back(std::move(job));
  }
  cv.notify_one();
}

bool latent_fetcher::stage::pop(disk_job& job) {
  std::unique_lock<std::mutex> lock(mutex);
  cv.wait(lock, [&] { return stop || !jobs.empty(); });
  if (jobs.empty())
    return false;  // stopping, and every job handed over is done
  job = std::move(jobs.front());
  jobs.pop_front();
  return true;
}

void latent_fetcher::stage::stop_and_join() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stop = true;
  }
  cv.notify_all();
  if (thread.joinable())
    thread.join();
}

// The writer: opens and writes, then hands every job but an open on to the hasher, in
// order, so the hasher sees a chunk only once it is written and a verify or abort only
// after every write before it.
void latent_fetcher::writer_loop() {
  disk_job job;
  while (writer_.pop(job)) {
    if (job.what == disk_job::kind::open) {
      open_file(job);
      continue;
    }
    if (job.what == disk_job::kind::write)
      write_chunk(job);
    hasher_.push(std::move(job));
  }
}

void latent_fetcher::hasher_loop() {
  disk_job job;
  while (hasher_.pop(job)) {
    if (job.what == disk_job::kind::write)
      hash_chunk(job);
    else
      close_file(job);
  }
}

void latent_fetcher::open_file(disk_job& job) {
  part_file& f = *job.file;
  const uint64_t id = job.transfer_id;
  auto fail = [&](fetch_outcome outcome, std::string error) {
    f.failed = true;
    post_([this, id, outcome, error] { finish(id, outcome, error); });
  };
  f.fd = ::open(f.part.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (f.fd < 0)
    return fail(fetch_outcome::transient, "cannot open " + f.part + ": " + errno_text());
  uint64_t resume_at = 0;
  const auto record = read_part_record(f.state);
  struct stat st {};
  if (record && record->sha256 == f.sha256 && record->bytes == f.bytes && record->durable > 0 &&
      ::fstat(f.fd, &st) == 0 && static_cast<uint64_t>(st.st_size) >= record->durable) {
    // Re-hash the durable prefix: the hash goes on from there, and a prefix damaged on
    // disk since it was recorded is caught now rather than after the whole transfer.
    std::vector<char> buf(std::min<uint64_t>(record->durable, 1u << 20));
    uint64_t at = 0;
    while (at < record->durable) {
      const auto want = static_cast<std::size_t>(std::min<uint64_t>(buf.size(), record->durable - at));
      ssize_t r = ::pread(f.fd, buf.data(), want, static_cast<off_t>(at));
      if (r < 0 && errno == EINTR)
        continue;
      if (r <= 0)
        return fail(fetch_outcome::transient, "cannot read " + f.part + ": " + errno_text());
      f.hasher.update(buf.data(), static_cast<std::size_t>(r));
      at += static_cast<uint64_t>(r);
    }
    if (to_hex(f.hasher.peek()) != record->prefix_sha256) {
      ::unlink(f.state.c_str());
      ::unlink(f.part.c_str());  // the abort that follows removes nothing more
      return fail(fetch_outcome::corrupt,
                  "the durable first " + std::to_string(record->durable) + " bytes of " + f.part +
                      " no longer hash as recorded");
    }
    resume_at = f.written = f.hashed = f.synced = record->durable;
  } else {
    f.hasher = vidline::sha256();
  }
  // Bytes past the durable prefix may be anything (a crash before their fsync): dropped.
  if (::ftruncate(f.fd, static_cast<off_t>(resume_at)) != 0)
    return fail(fetch_outcome::transient, "cannot truncate " + f.part + ": " + errno_text());
  if (resume_at > 0)
    spdlog::info("transfer: {} resumes at {} of {} bytes", f.dest, resume_at, f.bytes);
  post_([this, id, resume_at] { on_opened(id, resume_at); });
}

void latent_fetcher::write_chunk(disk_job& job) {
  part_file& f = *job.file;
  if (f.failed.load())
    return;
  if (!write_all_at(f.fd, job.data, job.size, job.offset)) {
    f.failed.store(true);
    const std::string error = "cannot write " + f.part + ": " + errno_text();
    post_([this, id = job.transfer_id, error] { finish(id, fetch_outcome::transient, error); });
    return;
  }
  // Start the disk on this chunk now, so the fsync after the last one has only the tail
  // and the device flush left instead of the whole latent. Advisory: the fsync is what
  // makes it durable, and reports any error.
  ::sync_file_range(f.fd, static_cast<off_t>(job.offset), static_cast<off_t>(job.size),
                    SYNC_FILE_RANGE_WRITE);
  f.written = job.offset + job.size;
}

void latent_fetcher::hash_chunk(disk_job& job) {
  part_file& f = *job.file;
  // A failed write stops the hashing too: the chunks after it were never written.
  if (!f.failed.load()) {
    f.hasher.update(job.data, job.size);
    f.hashed = job.offset + job.size;
    if (f.sync_every > 0 && f.hashed - f.synced >= f.sync_every && f.hashed < f.bytes)
      sync_part(f);
  }
  job.owner.reset();  // the frame's memory goes back now, not when the transfer ends
  post_([this, id = job.transfer_id] { on_written(id); });
}

void latent_fetcher::sync_part(part_file& f) {
  // Data first, then the record that vouches for it: a crash between the two leaves the
  // older record, which still tells the truth.
  if (::fdatasync(f.fd) != 0) {
    spdlog::warn("transfer: cannot fsync {}: {}", f.part, errno_text());
    return;
  }
  try {
    files::write_atomic(f.state, f.sha256 + " " + std::to_string(f.bytes) + " " +
                                     std::to_string(f.hashed) + " " + to_hex(f.hasher.peek()) +
                                     "\n");
    f.synced = f.hashed;
  } catch (const std::exception& e) {
    spdlog::warn("transfer: cannot record how much of {} is durable: {}", f.part, e.what());
  }
}

void latent_fetcher::close_file(disk_job& job) {
  part_file& f = *job.file;
  fetch_result r{job.outcome, std::move(job.error), 0, 0};
  if (job.what == disk_job::kind::verify) {
    if (f.failed.load()) {
      r = fetch_result{fetch_outcome::transient, "a write of " + f.part + " failed", 0, 0};
    } else if (const std::string got = to_hex(f.hasher.finish()); got != f.sha256) {
      r = fetch_result{fetch_outcome::corrupt, "sha256 mismatch: received " + got, 0, 0};
    } else {
      try {
        if (::fsync(f.fd) != 0)
          throw std::runtime_error("cannot fsync " + f.part + ": " + errno_text());
        ::close(f.fd);
        f.fd = -1;
        files::rename_durable(f.part, f.dest);
        ::unlink(f.state.c_str());
        r = fetch_result{fetch_outcome::ok, "", f.bytes, 0};
      } catch (const std::exception& e) {
        r = fetch_result{fetch_outcome::transient, e.what(), 0, 0};
      }
    }
  }
  if (r.outcome != fetch_outcome::ok) {
    // A transient end keeps what is durable for the next try; anything else starts over.
    const bool keep = r.outcome == fetch_outcome::transient && job.what == disk_job::kind::abort &&
                      !f.failed.load() && f.fd >= 0;
    if (keep && f.hashed > f.synced)
      sync_part(f);
    if (f.fd >= 0)
      ::close(f.fd);
    f.fd = -1;
    if (!keep || f.synced == 0) {
      ::unlink(f.state.c_str());
      ::unlink(f.part.c_str());
    }
  }
  r.elapsed_ms = ms_since(f.started);
  post_([this, file = job.file, r] {
    busy_dests_.erase(file->dest);
    call_guarded(file->callback, r);
  });
}

// -- sender --------------------------------------------------------------------------------

latent_server::latent_server(std::string latent_dir, uint32_t max_chunk_bytes,
                             uint32_t corrupt_every_nth_chunk)
    : latent_dir_(std::move(latent_dir)),
      max_chunk_bytes_(max_chunk_bytes),
      corrupt_every_nth_chunk_(corrupt_every_nth_chunk) {}

namespace {
/// A requested kind as it may be logged: at most 32 printable characters.
std::string printable_kind(const std::string& k) {
  std::string out;
  for (char c : k.substr(0, 32))
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out;
}
} // namespace

bool latent_server::serve(const msg::latent_fetch& req, const body_allocator& alloc) {
  const bool valid_sha = is_sha256_hex(req.sha256);
  auto refuse = [&](std::string error) {
    msg::latent_chunk c;
    c.transfer_id = req.transfer_id;
    c.sha256 = valid_sha ? req.sha256 : std::string();
    c.offset = req.offset;
    c.error = std::move(error);
    const std::string body = msg::pack_body(c);
    std::memcpy(alloc(body.size()), body.data(), body.size());
    return false;
  };
  // The name is checked before it touches the file system: 64 lowercase hex digits and
  // nothing else, so no "../" or "/" can reach the path.
  if (!valid_sha)
    return refuse("bad sha256");
  if (req.length > max_chunk_bytes_)
    return refuse("chunk of " + std::to_string(req.length) + " bytes asked, at most " +
                  std::to_string(max_chunk_bytes_) + " served");
  if (!req.kind.empty() && req.kind != "output" && req.kind != "input")
    return refuse("unknown kind '" + printable_kind(req.kind) +
                  "' (latent \"\", \"output\" or \"input\")");
  const bool output = req.kind == "output", input = req.kind == "input";
  const std::string& dir = output ? output_dir_ : input ? input_dir_ : latent_dir_;
  if (dir.empty())
    return refuse(latent_not_found);
  const std::string path = output || input ? data_paths::by_digest(dir, req.sha256)
                                            : data_paths::latent_file(dir, req.sha256);
  unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0)
    return refuse(errno == ENOENT ? std::string(latent_not_found)
                                  : "cannot open " + path + ": " + errno_text());
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0 || !S_ISREG(st.st_mode))
    return refuse("cannot stat " + path);
  const auto total = static_cast<uint64_t>(st.st_size);
  if (req.offset > total)
    return refuse("offset " + std::to_string(req.offset) + " beyond the end");
  if (input && req.offset == 0)
    ::futimens(fd.fd, nullptr);  // in use: the sweep keeps it (input_retention_s)
  const auto n = static_cast<std::size_t>(std::min<uint64_t>(req.length, total - req.offset));

  msg::latent_chunk c;
  c.transfer_id = req.transfer_id;
  c.sha256 = req.sha256;
  c.offset = req.offset;
  c.total = total;
  const std::string head = msg::pack_latent_chunk_head(c, n);
  char* out = alloc(head.size() + n);
  std::memcpy(out, head.data(), head.size());
  char* data = out + head.size();
  std::size_t got = 0;
  while (got < n) {  // straight from the file into the outgoing frame
    ssize_t r = ::pread(fd.fd, data + got, n - got, static_cast<off_t>(req.offset + got));
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return refuse(r == 0 ? "short read of " + path : "cannot read " + path + ": " + errno_text());
    got += static_cast<std::size_t>(r);
  }
  ++served_;
  if (corrupt_every_nth_chunk_ != 0 && n > 0 && served_ % corrupt_every_nth_chunk_ == 0)
    data[n / 2] ^= 0x5a;  // fault injection, tests only
  return true;
}

} // namespace vidline::nodes::data
