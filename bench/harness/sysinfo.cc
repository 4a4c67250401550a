#include "sysinfo.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>

namespace lazybench {

namespace {

double tv_seconds(const timeval& tv) { return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) * 1e-6; }

// Reads a whole small proc file into buf without allocating.  Returns bytes read.
std::size_t read_small_file(const char* path, char* buf, std::size_t cap) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  std::size_t len = 0;
  while (len + 1 < cap) {
    const ssize_t n = ::read(fd, buf + len, cap - 1 - len);
    if (n <= 0) break;
    len += static_cast<std::size_t>(n);
  }
  ::close(fd);
  buf[len] = '\0';
  return len;
}

std::string read_text_file(const char* path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text;
}

}  // namespace

Usage Usage::self() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  Usage u;
  u.user_s = tv_seconds(ru.ru_utime);
  u.sys_s = tv_seconds(ru.ru_stime);
  u.minflt = ru.ru_minflt;
  u.majflt = ru.ru_majflt;
  u.nvcsw = ru.ru_nvcsw;
  u.nivcsw = ru.ru_nivcsw;
  u.maxrss_kib = ru.ru_maxrss;
  return u;
}

Usage Usage::delta(const Usage& earlier, const Usage& later) {
  Usage d;
  d.user_s = later.user_s - earlier.user_s;
  d.sys_s = later.sys_s - earlier.sys_s;
  d.minflt = later.minflt - earlier.minflt;
  d.majflt = later.majflt - earlier.majflt;
  d.nvcsw = later.nvcsw - earlier.nvcsw;
  d.nivcsw = later.nivcsw - earlier.nivcsw;
  d.maxrss_kib = later.maxrss_kib;
  return d;
}

std::optional<std::int64_t> proc_field_kib(std::string_view text, std::string_view key) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string_view line = text.substr(pos, eol - pos);
    if (line.size() > key.size() && line.substr(0, key.size()) == key && line[key.size()] == ':') {
      std::int64_t value = 0;
      bool any = false;
      for (std::size_t i = key.size() + 1; i < line.size(); ++i) {
        const char c = line[i];
        if (c == ' ' || c == '\t') {
          if (any) break;
          continue;
        }
        if (c < '0' || c > '9') break;
        value = value * 10 + (c - '0');
        any = true;
      }
      if (any) return value;
      return std::nullopt;
    }
    pos = eol + 1;
  }
  return std::nullopt;
}

std::optional<MemSample> parse_smaps_rollup(std::string_view text) {
  const auto rss = proc_field_kib(text, "Rss");
  if (!rss) return std::nullopt;
  MemSample s;
  s.rss_kib = *rss;
  s.lazyfree_kib = proc_field_kib(text, "LazyFree").value_or(0);
  s.anonhuge_kib = proc_field_kib(text, "AnonHugePages").value_or(0);
  return s;
}

std::optional<MemSample> read_mem_sample() {
  char buf[8192];
  std::size_t n = read_small_file("/proc/self/smaps_rollup", buf, sizeof buf);
  if (n > 0) {
    if (auto s = parse_smaps_rollup(std::string_view(buf, n))) return s;
  }
  n = read_small_file("/proc/self/status", buf, sizeof buf);
  if (n == 0) return std::nullopt;
  const auto rss = proc_field_kib(std::string_view(buf, n), "VmRSS");
  if (!rss) return std::nullopt;
  MemSample s;
  s.rss_kib = *rss;
  return s;
}

std::vector<int> usable_cpus() {
  std::vector<int> out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

unsigned online_cpus() {
  if (const auto cpus = usable_cpus(); !cpus.empty()) return static_cast<unsigned>(cpus.size());
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<unsigned>(n) : 1u;
}

std::string kernel_release() {
  utsname u{};
  if (::uname(&u) != 0) return "unknown";
  return u.release;
}

std::uint64_t page_reporting_kib(std::string_view features, std::string_view order) {
  constexpr std::size_t kReportingBit = 5;
  if (features.size() <= kReportingBit || features[kReportingBit] != '1') return 0;
  unsigned shift = 9;  // the kernel's default, pageblock_order on x86-64
  if (!order.empty() && order.front() >= '0' && order.front() <= '9') {
    unsigned v = 0;
    for (std::size_t i = 0; i < order.size() && order[i] >= '0' && order[i] <= '9'; ++i) v = v * 10 + unsigned(order[i] - '0');
    if (v <= 20) shift = v;
  }
  return std::uint64_t{4} << shift;
}

namespace {

// The reporting block size of the first virtio-balloon device that reports
// free pages, in KiB; 0 if none does.
std::uint64_t machine_page_reporting_kib() {
  std::error_code ec;
  const std::filesystem::path dir = "/sys/bus/virtio/drivers/virtio_balloon";
  const std::string order = read_text_file("/sys/module/page_reporting/parameters/page_reporting_order");
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("virtio", 0) != 0) continue;
    if (const auto kib = page_reporting_kib(read_text_file((entry.path() / "features").c_str()), order)) return kib;
  }
  return 0;
}

}  // namespace

std::string machine_description() {
  std::string cpu_model;
  {
    const std::string cpuinfo = read_text_file("/proc/cpuinfo");
    const auto pos = cpuinfo.find("model name");
    if (pos != std::string::npos) {
      const auto colon = cpuinfo.find(':', pos);
      const auto eol = cpuinfo.find('\n', pos);
      if (colon != std::string::npos && colon < eol) {
        cpu_model = cpuinfo.substr(colon + 1, eol - colon - 1);
        while (!cpu_model.empty() && cpu_model.front() == ' ') cpu_model.erase(0, 1);
      }
    }
  }
  const std::string meminfo = read_text_file("/proc/meminfo");
  const auto mem_kib = proc_field_kib(meminfo, "MemTotal").value_or(0);
  std::string thp = read_text_file("/sys/kernel/mm/transparent_hugepage/enabled");
  {
    const auto l = thp.find('['), r = thp.find(']');
    thp = (l != std::string::npos && r != std::string::npos && r > l) ? thp.substr(l + 1, r - l - 1) : "unknown";
  }
  utsname u{};
  ::uname(&u);
  char buf[512];
  std::snprintf(buf, sizeof buf, "%u CPUs%s%s%s, %.1f GiB RAM, %s %s %s, THP %s", online_cpus(),
                cpu_model.empty() ? "" : " (", cpu_model.c_str(), cpu_model.empty() ? "" : ")",
                static_cast<double>(mem_kib) / (1024.0 * 1024.0), u.sysname, u.release, u.machine,
                thp.c_str());
  std::string text = buf;
  if (const auto kib = machine_page_reporting_kib()) {
    text += ", free page reporting to the host (blocks of " +
            (kib >= 1024 ? std::to_string(kib / 1024) + " MiB" : std::to_string(kib) + " KiB") + ")";
  }
  return text;
}

std::string load_average() {
  std::string text = read_text_file("/proc/loadavg");
  std::size_t fields = 0, i = 0;
  for (; i < text.size(); ++i)
    if (text[i] == ' ' && ++fields == 3) break;
  return text.substr(0, i);
}

std::string local_timestamp() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S %z", &tm);
  return buf;
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return {};
  return std::string(buf, static_cast<std::size_t>(n));
}

std::uint64_t fresh_seed() {
  std::uint64_t seed = 0;
  if (::getrandom(&seed, sizeof seed, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof seed)) seed = 0;
  seed ^= static_cast<std::uint64_t>(Clock::now().time_since_epoch().count());
  seed ^= static_cast<std::uint64_t>(::getpid()) << 32;
  return seed;
}

std::string detect_allocator() {
  struct Probe {
    const char* symbol;
    const char* name;
  };
  static constexpr Probe kProbes[] = {
      {"lazymalloc_version", "lazymalloc"},
      {"mallctl", "jemalloc"},
      {"tc_malloc", "tcmalloc"},
      {"mi_malloc", "mimalloc"},
      {"scalable_malloc", "tbbmalloc"},
  };
  for (const auto& p : kProbes)
    if (::dlsym(RTLD_DEFAULT, p.symbol) != nullptr) return p.name;
  return "glibc";
}

}  // namespace lazybench
