// A fake NVML (libnvidia-ml.so.1) for tests: the same C symbols the node's reader resolves
// (nodes/gpu/telemetry.cpp), answering from a text file named by VIDLINE_FAKE_NVML, read
// again on every call so a test changes the cards between readings:
//
//   count 2                  cards listed
//   init_fails 1             nvmlInit_v2 answers an error
//   0 temperature 71         card 0's value of a field (see `field` below)
//   1 lost 1                 card 1 answers GPU_IS_LOST to every call
//   0 process 4242 3072      a compute process: pid, MiB
//   0 xid 79                 an Xid critical-error event of card 0 (see below)
//   0 events_unsupported 1   card 0 answers NOT_SUPPORTED to nvmlDeviceRegisterEvents
//
// Xid events: each `xid` line is one event, in file order. An event set delivers the lines
// written after it was made (a driver holds no events for a set not yet there), each once,
// to a set its card is registered with; a test injects an event by adding a line.
//
// Built three times: fake_nvml (every symbol); with FAKE_NVML_OLD, fake_nvml_old, an older
// driver without nvmlDeviceGetTotalEnergyConsumption, nvmlDeviceGetFieldValues and
// nvmlEventSetWait_v2 (its nvmlEventSetWait fills the event struct before MIG: three
// fields); with FAKE_NVML_NO_EVENTS, fake_nvml_no_events, one without event functions.
// `fake_nvml_event_sets_open` (not NVML's) tells a test how many event sets are not freed.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct card {
  std::map<std::string, double> v;
  std::vector<std::pair<unsigned, double>> procs;
};

struct world {
  int count = 0;
  bool init_fails = false;
  std::map<int, card> cards;
  std::vector<std::pair<int, unsigned>> xids;  ///< (card, code), in file order
};

world load() {
  world w;
  const char* path = std::getenv("VIDLINE_FAKE_NVML");
  if (path == nullptr)
    return w;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::istringstream s(line);
    std::string a;
    if (!(s >> a))
      continue;
    if (a == "count") {
      s >> w.count;
    } else if (a == "init_fails") {
      int x = 0;
      s >> x;
      w.init_fails = x != 0;
    } else {
      int idx = std::atoi(a.c_str());
      std::string field;
      s >> field;
      if (field == "process") {
        unsigned pid = 0;
        double mib = 0;
        s >> pid >> mib;
        w.cards[idx].procs.emplace_back(pid, mib);
      } else if (field == "xid") {
        unsigned code = 0;
        s >> code;
        w.xids.emplace_back(idx, code);
      } else {
        double val = 0;
        s >> val;
        w.cards[idx].v[field] = val;
      }
    }
  }
  return w;
}

struct dev {
  int index;
};
dev devices[16];

constexpr int ok = 0, invalid = 2, not_supported = 3, lost = 15, uninit = 1;

/// The card behind a handle, or the error to answer.
int find(void* d, world& w, card*& c) {
  w = load();
  if (d == nullptr)
    return invalid;
  int i = static_cast<dev*>(d)->index;
  c = &w.cards[i];
  if (c->v.count("lost") && c->v["lost"] != 0)
    return lost;
  return ok;
}

template <class T>
int field(void* d, const char* name, T* out, double scale = 1) {
  world w;
  card* c = nullptr;
  int r = find(d, w, c);
  if (r != ok)
    return r;
  auto it = c->v.find(name);
  if (it == c->v.end())
    return not_supported;
  *out = static_cast<T>(it->second * scale);
  return ok;
}

bool initialised = false;

#ifndef FAKE_NVML_NO_EVENTS
constexpr int timeout = 10;
constexpr unsigned long long xid_critical = 0x8;  // the one event type the fake supports

struct event_set {
  bool open = false;
  unsigned registered = 0;  ///< bit per card index
  std::size_t taken = 0;    ///< xid lines delivered or passed over
};
event_set sets[8];

/// The next event for `set` (its card and code), or false.
bool next_event(void* set, int& card_index, unsigned& code) {
  auto* es = static_cast<event_set*>(set);
  if (es == nullptr || !es->open)
    return false;
  world w = load();
  while (es->taken < w.xids.size()) {
    auto [c, x] = w.xids[es->taken++];
    if (c >= 0 && c < 16 && (es->registered & (1u << c))) {
      devices[c].index = c;
      card_index = c;
      code = x;
      return true;
    }
  }
  return false;
}
#endif

} // namespace

extern "C" {

int nvmlInit_v2() {
  if (load().init_fails)
    return uninit;
  initialised = true;
  return ok;
}
int nvmlShutdown() {
  initialised = false;
  return ok;
}
int nvmlDeviceGetCount_v2(unsigned* n) {
  if (!initialised)
    return uninit;
  *n = static_cast<unsigned>(load().count);
  return ok;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** d) {
  if (!initialised)
    return uninit;
  if (i >= static_cast<unsigned>(load().count) || i >= 16)
    return invalid;
  devices[i].index = static_cast<int>(i);
  *d = &devices[i];
  return ok;
}
int nvmlDeviceGetName(void* d, char* buf, unsigned len) {
  world w;
  card* c = nullptr;
  int r = find(d, w, c);
  if (r == ok)
    std::snprintf(buf, len, "Fake GPU %d", static_cast<dev*>(d)->index);
  return r;
}
int nvmlDeviceGetUUID(void* d, char* buf, unsigned len) {
  world w;
  card* c = nullptr;
  int r = find(d, w, c);
  if (r == ok)
    std::snprintf(buf, len, "GPU-fake-%d", static_cast<dev*>(d)->index);
  return r;
}
int nvmlDeviceGetTemperature(void* d, int sensor, unsigned* t) {
  return sensor == 0 ? field(d, "temperature", t) : invalid;
}
int nvmlDeviceGetTemperatureThreshold(void* d, int which, unsigned* t) {
  return which == 1 ? field(d, "slowdown", t) : not_supported;
}
int nvmlDeviceGetPowerUsage(void* d, unsigned* mw) { return field(d, "power_w", mw, 1000); }
#ifndef FAKE_NVML_OLD
int nvmlDeviceGetTotalEnergyConsumption(void* d, unsigned long long* mj) {
  return field(d, "energy_j", mj, 1000);
}
struct field_value {
  unsigned field_id, scope_id;
  long long timestamp, latency_usec;
  int value_type;
  int status;
  union { double d; unsigned ui; unsigned long ul; unsigned long long ull; long long sll; } value;
};
int nvmlDeviceGetFieldValues(void* d, int n, field_value* values) {
  for (int i = 0; i < n; ++i) {
    values[i].status = not_supported;
    if (values[i].field_id == 82) {
      unsigned t = 0;
      values[i].status = field(d, "memory_temperature", &t);
      values[i].value_type = 1;
      values[i].value.ui = t;
    }
  }
  return ok;
}
#endif
struct utilization { unsigned gpu, memory; };
int nvmlDeviceGetUtilizationRates(void* d, utilization* u) {
  u->memory = 0;
  return field(d, "utilization", &u->gpu);
}
// As the driver does: the v1 call's `used` counts the reserved memory, v2's does not
// (memory_used_mib is v2's, what nvidia-smi shows). "no_memory_v2 1" hides the v2 call's
// answer (an older driver).
struct memory { unsigned long long total, free, used; };
int nvmlDeviceGetMemoryInfo(void* d, memory* m) {
  int r = field(d, "memory_total_mib", &m->total, 1 << 20);
  if (r != ok)
    return r;
  r = field(d, "memory_used_mib", &m->used, 1 << 20);
  unsigned long long reserved = 0;
  field(d, "memory_reserved_mib", &reserved, 1 << 20);
  m->used += reserved;
  m->free = m->total - m->used;
  return r;
}
struct memory_v2 { unsigned version; unsigned long long total, reserved, free, used; };
int nvmlDeviceGetMemoryInfo_v2(void* d, memory_v2* m) {
  unsigned hidden = 0;
  if (field(d, "no_memory_v2", &hidden) == ok && hidden != 0)
    return not_supported;
  if (m->version != (static_cast<unsigned>(sizeof(memory_v2)) | (2u << 24)))
    return 25;  // NVML_ERROR_ARGUMENT_VERSION_MISMATCH
  int r = field(d, "memory_total_mib", &m->total, 1 << 20);
  if (r != ok)
    return r;
  r = field(d, "memory_used_mib", &m->used, 1 << 20);
  m->reserved = 0;
  field(d, "memory_reserved_mib", &m->reserved, 1 << 20);
  m->free = m->total - m->used - m->reserved;
  return r;
}
int nvmlDeviceGetClockInfo(void* d, int type, unsigned* mhz) {
  return field(d, type == 1 ? "sm_clock_mhz" : type == 2 ? "memory_clock_mhz" : "none", mhz);
}
int nvmlDeviceGetCurrentClocksThrottleReasons(void* d, unsigned long long* r) {
  return field(d, "throttle", r);
}
int nvmlDeviceGetTotalEccErrors(void* d, int type, int counter, unsigned long long* n) {
  if (counter != 0)
    return not_supported;
  return field(d, type == 1 ? "ecc_uncorrected" : "ecc_corrected", n);
}
int nvmlDeviceGetCurrPcieLinkGeneration(void* d, unsigned* g) { return field(d, "pcie_gen", g); }
int nvmlDeviceGetCurrPcieLinkWidth(void* d, unsigned* w) { return field(d, "pcie_width", w); }
struct process { unsigned pid; unsigned long long used; unsigned gi, ci; };
int nvmlDeviceGetComputeRunningProcesses_v3(void* d, unsigned* count, process* out) {
  world w;
  card* c = nullptr;
  int r = find(d, w, c);
  if (r != ok)
    return r;
  unsigned n = 0;
  for (auto& [pid, mib] : c->procs) {
    if (n >= *count)
      return 7;  // INSUFFICIENT_SIZE
    out[n++] = process{pid, static_cast<unsigned long long>(mib * (1 << 20)), 0, 0};
  }
  *count = n;
  return ok;
}

#ifndef FAKE_NVML_NO_EVENTS
int nvmlEventSetCreate(void** set) {
  if (!initialised)
    return uninit;
  for (auto& es : sets)
    if (!es.open) {
      es = event_set{true, 0, load().xids.size()};
      *set = &es;
      return ok;
    }
  return 999;  // UNKNOWN: more sets than a test needs
}
int nvmlDeviceRegisterEvents(void* d, unsigned long long types, void* set) {
  world w;
  card* c = nullptr;
  int r = find(d, w, c);
  if (r != ok)
    return r;
  auto* es = static_cast<event_set*>(set);
  if (es == nullptr || !es->open)
    return invalid;
  if ((types & ~xid_critical) != 0 || (c->v.count("events_unsupported")
                                       && c->v["events_unsupported"] != 0))
    return not_supported;
  es->registered |= 1u << static_cast<dev*>(d)->index;
  return ok;
}
/// nvmlEventData_t, as the _v2 call fills it; the unversioned call's lacks the last two.
struct event_data {
  void* device;
  unsigned long long type, data;
  unsigned gpu_instance, compute_instance;
};
struct event_data_v1 {
  void* device;
  unsigned long long type, data;
};
#ifndef FAKE_NVML_OLD
int nvmlEventSetWait_v2(void* set, event_data* e, unsigned /*timeout_ms*/) {
  int card_index = 0;
  unsigned code = 0;
  if (!next_event(set, card_index, code))
    return timeout;
  *e = event_data{&devices[card_index], xid_critical, code, 0xFFFFFFFFu, 0xFFFFFFFFu};
  return ok;
}
#endif
int nvmlEventSetWait(void* set, event_data_v1* e, unsigned /*timeout_ms*/) {
  int card_index = 0;
  unsigned code = 0;
  if (!next_event(set, card_index, code))
    return timeout;
  *e = event_data_v1{&devices[card_index], xid_critical, code};
  return ok;
}
int nvmlEventSetFree(void* set) {
  auto* es = static_cast<event_set*>(set);
  if (es == nullptr || !es->open)
    return invalid;
  es->open = false;
  return ok;
}
int fake_nvml_event_sets_open() {
  int n = 0;
  for (auto& es : sets)
    n += es.open ? 1 : 0;
  return n;
}
#endif

} // extern "C"
