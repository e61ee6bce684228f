// GPU telemetry through NVML (dlopen) and amdgpu sysfs (telemetry.hpp).
#include "nodes/gpu/telemetry.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace vidline::nodes::gpu {

// -- NVML, declared here: the few types and symbols used, as nvml.h has them -------------

namespace {

using nvml_return = int;
constexpr nvml_return nvml_success = 0;
constexpr nvml_return nvml_not_supported = 3;
constexpr nvml_return nvml_timeout = 10;
constexpr nvml_return nvml_gpu_is_lost = 15;
using nvml_device = struct nvml_device_st*;
using nvml_event_set = struct nvml_event_set_st*;
/// nvmlEventData_t as nvmlEventSetWait_v2 fills it; the unversioned call fills the first
/// three fields only (the struct before MIG), so one buffer serves both.
struct nvml_event_data {
  nvml_device device;
  unsigned long long event_type;
  unsigned long long event_data;  ///< the Xid code (999: an Xid the driver cannot name)
  unsigned gpu_instance, compute_instance;
};
constexpr unsigned long long nvml_event_xid_critical = 0x8;  // nvmlEventTypeXidCriticalError
/// Events taken per reading at most: a storm of Xids cannot hold the sampler.
constexpr int max_events_per_reading = 256;
struct nvml_utilization { unsigned gpu, memory; };
struct nvml_memory { unsigned long long total, free, used; };
/// nvmlMemory_v2_t: `used` leaves out the driver's reserved memory, as nvidia-smi's
/// memory.used does (the v1 call counts it: ~480 MiB on an idle H100 with nothing running).
struct nvml_memory_v2 { unsigned version; unsigned long long total, reserved, free, used; };
/// NVML_STRUCT_VERSION(Memory, 2).
constexpr unsigned nvml_memory_v2_version = static_cast<unsigned>(sizeof(nvml_memory_v2)) | (2u << 24);
/// nvmlProcessInfo_t of the _v2/_v3 calls (the unversioned call's lacks the last two).
struct nvml_process { unsigned pid; unsigned long long used_memory; unsigned gpu_instance, compute_instance; };
struct nvml_process_v1 { unsigned pid; unsigned long long used_memory; };
/// nvmlFieldValue_t (nvmlDeviceGetFieldValues).
struct nvml_field_value {
  unsigned field_id, scope_id;
  long long timestamp, latency_usec;
  int value_type;
  nvml_return status;
  union { double d; unsigned ui; unsigned long ul; unsigned long long ull; long long sll; } value;
};
constexpr unsigned nvml_fi_dev_memory_temp = 82;
constexpr int nvml_temperature_gpu = 0;
constexpr int nvml_threshold_slowdown = 1;
constexpr int nvml_clock_sm = 1, nvml_clock_mem = 2;
constexpr int nvml_ecc_corrected = 0, nvml_ecc_uncorrected = 1, nvml_ecc_volatile = 0;

template <class F>
F sym(void* lib, const char* name) {
  return reinterpret_cast<F>(dlsym(lib, name));
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  if (!in)
    return "";
  std::stringstream s;
  s << in.rdbuf();
  std::string t = s.str();
  while (!t.empty() && (t.back() == '\n' || t.back() == ' '))
    t.pop_back();
  return t;
}

/// A number from a sysfs file scaled by `scale`, or -1.
double read_number(const std::filesystem::path& p, double scale = 1) {
  std::string t = read_text(p);
  if (t.empty())
    return -1;
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  return end == t.c_str() ? -1 : v * scale;
}

/// The active level of a pp_dpm_* file ("1: 1800Mhz *") in MHz, or -1.
double active_clock(const std::filesystem::path& p) {
  std::istringstream in(read_text(p));
  for (std::string line; std::getline(in, line);)
    if (line.find('*') != std::string::npos) {
      auto colon = line.find(':');
      if (colon == std::string::npos)
        continue;
      return std::strtod(line.c_str() + colon + 1, nullptr);
    }
  return -1;
}

} // namespace

struct reader::nvml_lib {
  void* handle = nullptr;
  bool ok = false;
  std::string status;
  nvml_return (*init)() = nullptr;
  nvml_return (*shutdown)() = nullptr;
  nvml_return (*count)(unsigned*) = nullptr;
  nvml_return (*by_index)(unsigned, nvml_device*) = nullptr;
  nvml_return (*name)(nvml_device, char*, unsigned) = nullptr;
  nvml_return (*uuid)(nvml_device, char*, unsigned) = nullptr;
  nvml_return (*temperature)(nvml_device, int, unsigned*) = nullptr;
  nvml_return (*threshold)(nvml_device, int, unsigned*) = nullptr;
  nvml_return (*power)(nvml_device, unsigned*) = nullptr;
  nvml_return (*energy)(nvml_device, unsigned long long*) = nullptr;
  nvml_return (*utilization)(nvml_device, nvml_utilization*) = nullptr;
  nvml_return (*memory)(nvml_device, nvml_memory*) = nullptr;
  nvml_return (*memory_v2)(nvml_device, nvml_memory_v2*) = nullptr;
  nvml_return (*clock)(nvml_device, int, unsigned*) = nullptr;
  nvml_return (*throttle)(nvml_device, unsigned long long*) = nullptr;
  nvml_return (*ecc)(nvml_device, int, int, unsigned long long*) = nullptr;
  nvml_return (*pcie_gen)(nvml_device, unsigned*) = nullptr;
  nvml_return (*pcie_width)(nvml_device, unsigned*) = nullptr;
  nvml_return (*processes)(nvml_device, unsigned*, nvml_process*) = nullptr;
  nvml_return (*processes_v1)(nvml_device, unsigned*, nvml_process_v1*) = nullptr;
  nvml_return (*fields)(nvml_device, int, nvml_field_value*) = nullptr;
  nvml_return (*event_set_create)(nvml_event_set*) = nullptr;
  nvml_return (*register_events)(nvml_device, unsigned long long, nvml_event_set) = nullptr;
  nvml_return (*event_set_wait)(nvml_event_set, nvml_event_data*, unsigned) = nullptr;
  nvml_return (*event_set_free)(nvml_event_set) = nullptr;

  // -- Xid events: one event set for every card, taken at each reading ------------------
  nvml_event_set events = nullptr;
  std::string xid_status = "NVML not in use";
  /// A card's Xids since the node started. `on`: registered; `unsupported`: its driver
  /// said NOT_SUPPORTED (never asked again); otherwise registration is tried again.
  struct xid_card {
    bool on = false, unsupported = false;
    int64_t count = 0;
    int32_t last = -1;
    double last_unix_s = -1;
    std::map<int32_t, msg::gpu_xid> codes;
  };
  std::map<nvml_device, xid_card> xids;

  /// Registers `d` for Xid events unless it is, or said it cannot be; the answer.
  nvml_return register_xids(nvml_device d) {
    auto& c = xids[d];
    if (events == nullptr || c.on || c.unsupported)
      return nvml_success;
    const nvml_return r = register_events(d, nvml_event_xid_critical, events);
    c.on = r == nvml_success;
    c.unsupported = r == nvml_not_supported;
    return r;
  }

  /// Takes the events waiting (timeout 0: never blocks) into `xids`, stamped `unix_now`.
  void take_xids(double unix_now) {
    if (events == nullptr)
      return;
    for (int i = 0; i < max_events_per_reading; ++i) {
      nvml_event_data e{};
      const nvml_return r = event_set_wait(events, &e, 0);
      if (r == nvml_timeout)
        return;  // none waiting
      if (r != nvml_success)
        return;  // GPU_IS_LOST or another error: the cards' own calls tell which
      if ((e.event_type & nvml_event_xid_critical) == 0)
        continue;
      auto& c = xids[e.device];
      const auto code = static_cast<int32_t>(e.event_data);
      ++c.count;
      c.last = code;
      c.last_unix_s = unix_now;
      auto& x = c.codes[code];
      x.code = code;
      ++x.count;
      x.last_unix_s = unix_now;
    }
  }
};

reader_options options_from_environment() {
  reader_options o;
  if (const char* v = std::getenv("VIDLINE_NVML_LIBRARY"))
    o.nvml_library = v;
  if (const char* v = std::getenv("VIDLINE_DRM_ROOT"))
    o.drm_root = v;
  return o;
}

reader::reader(reader_options o) : nv_(std::make_unique<nvml_lib>()), o_(std::move(o)) {
  auto& n = *nv_;
  if (o_.nvml_library.empty()) {
    n.status = "NVML not tried";
    return;
  }
  n.handle = dlopen(o_.nvml_library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (n.handle == nullptr) {
    const char* e = dlerror();
    n.status = std::string("no NVML: ") + (e ? e : o_.nvml_library);
    return;
  }
  n.init = sym<decltype(n.init)>(n.handle, "nvmlInit_v2");
  n.shutdown = sym<decltype(n.shutdown)>(n.handle, "nvmlShutdown");
  n.count = sym<decltype(n.count)>(n.handle, "nvmlDeviceGetCount_v2");
  n.by_index = sym<decltype(n.by_index)>(n.handle, "nvmlDeviceGetHandleByIndex_v2");
  n.name = sym<decltype(n.name)>(n.handle, "nvmlDeviceGetName");
  n.uuid = sym<decltype(n.uuid)>(n.handle, "nvmlDeviceGetUUID");
  n.temperature = sym<decltype(n.temperature)>(n.handle, "nvmlDeviceGetTemperature");
  n.threshold = sym<decltype(n.threshold)>(n.handle, "nvmlDeviceGetTemperatureThreshold");
  n.power = sym<decltype(n.power)>(n.handle, "nvmlDeviceGetPowerUsage");
  n.energy = sym<decltype(n.energy)>(n.handle, "nvmlDeviceGetTotalEnergyConsumption");
  n.utilization = sym<decltype(n.utilization)>(n.handle, "nvmlDeviceGetUtilizationRates");
  n.memory = sym<decltype(n.memory)>(n.handle, "nvmlDeviceGetMemoryInfo");
  n.memory_v2 = sym<decltype(n.memory_v2)>(n.handle, "nvmlDeviceGetMemoryInfo_v2");
  n.clock = sym<decltype(n.clock)>(n.handle, "nvmlDeviceGetClockInfo");
  n.throttle = sym<decltype(n.throttle)>(n.handle, "nvmlDeviceGetCurrentClocksThrottleReasons");
  n.ecc = sym<decltype(n.ecc)>(n.handle, "nvmlDeviceGetTotalEccErrors");
  n.pcie_gen = sym<decltype(n.pcie_gen)>(n.handle, "nvmlDeviceGetCurrPcieLinkGeneration");
  n.pcie_width = sym<decltype(n.pcie_width)>(n.handle, "nvmlDeviceGetCurrPcieLinkWidth");
  n.processes = sym<decltype(n.processes)>(n.handle, "nvmlDeviceGetComputeRunningProcesses_v3");
  if (n.processes == nullptr)
    n.processes = sym<decltype(n.processes)>(n.handle, "nvmlDeviceGetComputeRunningProcesses_v2");
  if (n.processes == nullptr)
    n.processes_v1 =
        sym<decltype(n.processes_v1)>(n.handle, "nvmlDeviceGetComputeRunningProcesses");
  n.fields = sym<decltype(n.fields)>(n.handle, "nvmlDeviceGetFieldValues");
  n.event_set_create = sym<decltype(n.event_set_create)>(n.handle, "nvmlEventSetCreate");
  n.register_events = sym<decltype(n.register_events)>(n.handle, "nvmlDeviceRegisterEvents");
  n.event_set_wait = sym<decltype(n.event_set_wait)>(n.handle, "nvmlEventSetWait_v2");
  if (n.event_set_wait == nullptr)
    n.event_set_wait = sym<decltype(n.event_set_wait)>(n.handle, "nvmlEventSetWait");
  n.event_set_free = sym<decltype(n.event_set_free)>(n.handle, "nvmlEventSetFree");
  if (n.init == nullptr || n.count == nullptr || n.by_index == nullptr) {
    n.status = "NVML lacks nvmlInit_v2, nvmlDeviceGetCount_v2 or nvmlDeviceGetHandleByIndex_v2";
    return;
  }
  nvml_return r = n.init();
  if (r != nvml_success) {
    n.status = "nvmlInit_v2 failed (" + std::to_string(r) + ")";
    return;
  }
  n.ok = true;
  if (n.event_set_create == nullptr || n.register_events == nullptr
      || n.event_set_wait == nullptr || n.event_set_free == nullptr) {
    n.xid_status = "this NVML has no event functions (nvmlEventSetCreate, "
                   "nvmlDeviceRegisterEvents, nvmlEventSetWait, nvmlEventSetFree)";
    return;
  }
  r = n.event_set_create(&n.events);
  if (r != nvml_success) {
    n.events = nullptr;
    n.xid_status = r == nvml_not_supported
                       ? "this driver does not support NVML events"
                       : "nvmlEventSetCreate failed (" + std::to_string(r) + ")";
    return;
  }
  n.xid_status.clear();
  // Every card now, so each one's events count from here, not from its first reading (a
  // driver keeps none for a card not registered). One that fails is tried again when read.
  unsigned cards = 0;
  if (n.count(&cards) == nvml_success)
    for (unsigned i = 0; i < cards; ++i) {
      nvml_device d = nullptr;
      if (n.by_index(i, &d) == nvml_success)
        n.register_xids(d);
    }
}

reader::~reader() {
  if (nv_->events != nullptr)
    nv_->event_set_free(nv_->events);
  if (nv_->ok && nv_->shutdown != nullptr)
    nv_->shutdown();
  if (nv_->handle != nullptr)
    dlclose(nv_->handle);
}

bool reader::nvml() const { return nv_->ok; }
const std::string& reader::nvml_status() const { return nv_->status; }
const std::string& reader::xid_status() const { return nv_->xid_status; }

int reader::nvml_count() {
  unsigned n = 0;
  if (!nv_->ok || nv_->count(&n) != nvml_success)
    return 0;
  return static_cast<int>(n);
}

msg::gpu_sample reader::read_nvml(int index, double unix_now) {
  msg::gpu_sample g;
  g.index = index;
  g.unix_s = unix_now;
  auto& n = *nv_;
  if (!n.ok)
    return g;
  g.source = "nvml";
  nvml_device d = nullptr;
  nvml_return r = n.by_index(static_cast<unsigned>(index), &d);
  if (r != nvml_success) {
    g.lost = true;  // listed by the config, not by the driver (or lost)
    return g;
  }
  // Each call: its value when it answers, the card lost when it says so, else unknown.
  auto ok = [&](nvml_return rc) {
    if (rc == nvml_gpu_is_lost)
      g.lost = true;
    return rc == nvml_success;
  };
  ok(n.register_xids(d));
  n.take_xids(unix_now);
  if (auto& x = n.xids[d]; x.on) {
    g.xid_events = x.count;
    g.xid_last = x.last;
    g.xid_last_unix_s = x.last_unix_s;
    for (auto& [code, c] : x.codes)
      g.xids.push_back(c);
  }
  char buf[96];
  if (n.name && ok(n.name(d, buf, sizeof buf)))
    g.name.assign(buf, strnlen(buf, sizeof buf));
  if (n.uuid && ok(n.uuid(d, buf, sizeof buf)))
    g.uuid.assign(buf, strnlen(buf, sizeof buf));
  unsigned u = 0;
  unsigned long long ull = 0;
  if (n.temperature && ok(n.temperature(d, nvml_temperature_gpu, &u)))
    g.temperature_c = u;
  if (n.threshold && ok(n.threshold(d, nvml_threshold_slowdown, &u)))
    g.slowdown_c = u;
  if (n.power && ok(n.power(d, &u)))
    g.power_w = u / 1000.0;
  if (n.energy && ok(n.energy(d, &ull)))
    g.energy_j = static_cast<double>(ull) / 1000.0;
  nvml_utilization util{};
  if (n.utilization && ok(n.utilization(d, &util)))
    g.utilization = util.gpu;
  nvml_memory_v2 mem2{};
  mem2.version = nvml_memory_v2_version;
  nvml_memory mem{};
  if (n.memory_v2 && ok(n.memory_v2(d, &mem2))) {
    g.memory_used_mib = static_cast<double>(mem2.used) / (1 << 20);
    g.memory_total_mib = static_cast<double>(mem2.total) / (1 << 20);
  } else if (n.memory && ok(n.memory(d, &mem))) {
    g.memory_used_mib = static_cast<double>(mem.used) / (1 << 20);
    g.memory_total_mib = static_cast<double>(mem.total) / (1 << 20);
  }
  if (n.clock && ok(n.clock(d, nvml_clock_sm, &u)))
    g.sm_clock_mhz = u;
  if (n.clock && ok(n.clock(d, nvml_clock_mem, &u)))
    g.memory_clock_mhz = u;
  if (n.throttle && ok(n.throttle(d, &ull)))
    g.throttle_reasons = static_cast<int64_t>(ull);
  if (n.ecc && ok(n.ecc(d, nvml_ecc_uncorrected, nvml_ecc_volatile, &ull)))
    g.ecc_uncorrected = static_cast<int64_t>(ull);
  if (n.ecc && ok(n.ecc(d, nvml_ecc_corrected, nvml_ecc_volatile, &ull)))
    g.ecc_corrected = static_cast<int64_t>(ull);
  if (n.pcie_gen && ok(n.pcie_gen(d, &u)))
    g.pcie_gen = static_cast<int32_t>(u);
  if (n.pcie_width && ok(n.pcie_width(d, &u)))
    g.pcie_width = static_cast<int32_t>(u);
  if (n.fields) {
    nvml_field_value f{};
    f.field_id = nvml_fi_dev_memory_temp;
    if (ok(n.fields(d, 1, &f)) && f.status == nvml_success) {
      double t = f.value_type == 0 ? f.value.d : static_cast<double>(f.value.ui);
      if (t > 0 && t < 200)
        g.memory_temperature_c = t;
    }
  }
  auto add_process = [&](unsigned pid, unsigned long long bytes) {
    msg::gpu_process p;
    p.pid = pid;
    // NVML reports "not available" (~0) without the right to see another user's memory.
    p.memory_mib = bytes == ~0ull ? -1 : static_cast<double>(bytes) / (1 << 20);
    p.name = read_text(std::filesystem::path(o_.proc_root) / std::to_string(pid) / "comm");
    g.processes.push_back(std::move(p));
  };
  unsigned count = 64;
  if (n.processes) {
    std::vector<nvml_process> ps(count);
    if (ok(n.processes(d, &count, ps.data())))
      for (unsigned i = 0; i < std::min<unsigned>(count, 64); ++i)
        add_process(ps[i].pid, ps[i].used_memory);
  } else if (n.processes_v1) {
    std::vector<nvml_process_v1> ps(count);
    if (ok(n.processes_v1(d, &count, ps.data())))
      for (unsigned i = 0; i < std::min<unsigned>(count, 64); ++i)
        add_process(ps[i].pid, ps[i].used_memory);
  }
  return g;
}

std::vector<msg::gpu_sample> reader::read_amdgpu(double unix_now) {
  namespace fs = std::filesystem;
  std::vector<msg::gpu_sample> out;
  if (o_.drm_root.empty())
    return out;
  std::error_code ec;
  std::vector<std::pair<int, fs::path>> cards;
  for (auto& e : fs::directory_iterator(o_.drm_root, ec)) {
    const std::string name = e.path().filename().string();
    // card0, card1, ... (not card0-DP-1, not renderD128)
    if (name.rfind("card", 0) != 0 || name.size() == 4
        || name.find_first_not_of("0123456789", 4) != std::string::npos)
      continue;
    const fs::path dev = e.path() / "device";
    if (read_text(dev / "vendor") != "0x1002")
      continue;
    cards.emplace_back(std::stoi(name.substr(4)), dev);
  }
  std::sort(cards.begin(), cards.end());
  for (auto& [n, dev] : cards) {
    msg::gpu_sample g;
    g.index = static_cast<int32_t>(out.size());
    g.source = "amdgpu";
    g.unix_s = unix_now;
    g.name = read_text(dev / "product_name");
    if (g.name.empty())
      g.name = "AMD GPU";
    g.uuid = read_text(dev / "unique_id");
    for (auto& h : fs::directory_iterator(dev / "hwmon", ec)) {
      const fs::path hw = h.path();
      for (int i = 1; i <= 4; ++i) {
        const std::string t = "temp" + std::to_string(i);
        std::string label = read_text(hw / (t + "_label"));
        double v = read_number(hw / (t + "_input"), 0.001);
        if (v < 0)
          continue;
        if (label == "mem")
          g.memory_temperature_c = v;
        else if (label.empty() || label == "edge") {
          g.temperature_c = v;
          g.slowdown_c = read_number(hw / (t + "_crit"), 0.001);
        }
      }
      g.power_w = read_number(hw / "power1_average", 1e-6);
      if (g.power_w < 0)
        g.power_w = read_number(hw / "power1_input", 1e-6);
      g.energy_j = read_number(hw / "energy1_input", 1e-6);
      break;  // one hwmon per card
    }
    g.utilization = read_number(dev / "gpu_busy_percent");
    double used = read_number(dev / "mem_info_vram_used");
    double total = read_number(dev / "mem_info_vram_total");
    g.memory_used_mib = used < 0 ? -1 : used / (1 << 20);
    g.memory_total_mib = total < 0 ? -1 : total / (1 << 20);
    g.sm_clock_mhz = active_clock(dev / "pp_dpm_sclk");
    g.memory_clock_mhz = active_clock(dev / "pp_dpm_mclk");
    {
      std::istringstream in(read_text(dev / "ras" / "umc_err_count"));
      for (std::string k; in >> k;) {
        long long v = -1;
        if (!(in >> v))
          break;
        if (k == "ue:")
          g.ecc_uncorrected = v;
        else if (k == "ce:")
          g.ecc_corrected = v;
      }
    }
    double speed = read_number(dev / "current_link_speed");  // "16.0 GT/s PCIe"
    static const std::map<int, int> gen_of{{2, 1}, {5, 2}, {8, 3}, {16, 4}, {32, 5}, {64, 6}};
    if (auto it = gen_of.find(static_cast<int>(speed)); speed > 0 && it != gen_of.end())
      g.pcie_gen = it->second;
    double width = read_number(dev / "current_link_width");
    g.pcie_width = width < 0 ? -1 : static_cast<int32_t>(width);
    out.push_back(std::move(g));
  }
  return out;
}

std::vector<msg::gpu_sample> reader::read(const std::vector<config::gpu>& configured,
                                          double unix_now) {
  std::vector<msg::gpu_sample> out;
  const int nv = nvml_count();
  std::vector<msg::gpu_sample> amd;
  bool amd_read = false;
  std::set<int> nv_named, amd_named;
  for (auto& c : configured) {
    msg::gpu_sample g;
    if (c.vendor == "nvidia") {
      g = read_nvml(c.index, unix_now);  // lost when NVML runs but lists no such card
      nv_named.insert(c.index);
    } else if (c.vendor == "amd") {
      if (!amd_read) {
        amd = read_amdgpu(unix_now);
        amd_read = true;
      }
      amd_named.insert(c.index);
      if (c.index >= 0 && static_cast<std::size_t>(c.index) < amd.size()) {
        g = amd[static_cast<std::size_t>(c.index)];
      } else {
        g.index = c.index;
        g.unix_s = unix_now;
        if (!amd.empty()) {  // the driver answers, this card is gone
          g.source = "amdgpu";
          g.lost = true;
        }
      }
    } else {
      g.index = c.index;
      g.unix_s = unix_now;
    }
    g.id = c.id;
    out.push_back(std::move(g));
  }
  for (int i = 0; i < nv; ++i)
    if (!nv_named.count(i))
      out.push_back(read_nvml(i, unix_now));
  if (!amd_read)
    amd = read_amdgpu(unix_now);
  for (auto& g : amd)
    if (!amd_named.count(g.index))
      out.push_back(g);
  return out;
}

} // namespace vidline::nodes::gpu
