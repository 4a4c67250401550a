#include "server.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "compare.h"
#include "harness/stats.h"
#include "harness/sysinfo.h"

namespace lazybench {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

constexpr double kKiBPerMiB = 1024.0;

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Without the line end(s) at its end.
std::string chomp(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

// The text on one line, for a message: runs of white space (line ends too)
// as one space, none at either end.
std::string one_line(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n' || c == '\r' || c == '\t' || c == ' ') {
      if (!out.empty() && out.back() != ' ') out += ' ';
    } else {
      out += c;
    }
  }
  if (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::string join(const std::vector<std::string>& v, const char* sep = " ") {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

// Resolved sizes (the --quick defaults applied) and the programs found.
struct Plan {
  std::string server, benchmark, cli;
  std::vector<std::string> server_args;
  long requests = 0;
  long keys = 0;
  double idle_s = 0, rss_wait_s = 0;
  std::vector<double> sample_times;  // seconds after FLUSHALL
  std::vector<int> server_cpus, client_cpus;  // empty: not pinned
  int memory_reps = 0;
  // A server's safety-net lifetime (stop() ends it long before).
  double server_lifetime_s = 0;
};

// A client program call (no preload, the allocator's variables not set):
// its stdout, trimmed, or nullopt with *error.
std::optional<std::string> client(const std::vector<std::string>& argv, double timeout_s, std::string* error,
                                  const std::vector<int>& cpus = {}) {
  SpawnOptions o;
  o.env = child_env("", {});
  o.timeout_s = timeout_s;
  o.cpus = cpus;
  const SpawnResult r = spawn(argv, o);
  if (!r.ok()) {
    *error = join(argv) + ": " + r.status_text() + " " + one_line(r.err) + " " + one_line(r.out);
    return std::nullopt;
  }
  return chomp(r.out);
}

// What /proc says of the server.
struct ProcSample {
  MemSample mem;
  // The peak resident set so far: VmHWM, or Rss when that is higher (VmHWM
  // comes from the kernel's per-CPU counters, which lag the page walk of
  // smaps_rollup by a few hundred KiB).
  double hwm_kib = 0;
};

// The CPU time the server has used so far, in seconds.  Exact where the
// kernel keeps schedstat: the sum over the server's threads of the first
// field of /proc/PID/task/TID/schedstat (nanoseconds on a CPU; a thread that
// ends takes its time along, but redis's threads live as long as the
// server).  Else utime + stime of /proc/PID/stat, which count every thread,
// ended ones too, in clock ticks of 10 ms (3-7% of a command at the default
// sizes).  nullopt if neither can be read.
std::optional<double> cpu_seconds(pid_t pid) {
  const fs::path tasks = "/proc/" + std::to_string(pid) + "/task";
  std::error_code ec;
  double ns = 0;
  bool any = false;
  for (const auto& entry : fs::directory_iterator(tasks, ec)) {
    std::istringstream in(slurp(entry.path() / "schedstat"));
    double run_ns = -1;
    if (in >> run_ns && run_ns >= 0) {
      ns += run_ns;
      any = true;
    }
  }
  if (!ec && any) return ns * 1e-9;
  const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  const auto paren = stat.rfind(')');  // the command name may hold spaces
  if (paren == std::string::npos) return std::nullopt;
  std::istringstream in(stat.substr(paren + 1));
  std::string field;
  long long utime = -1, stime = -1;
  // Fields 3 (state) to 15 (stime): utime is the 12th after the name, stime the 13th.
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14) utime = std::atoll(field.c_str());
    if (i == 15) stime = std::atoll(field.c_str());
  }
  const long ticks = ::sysconf(_SC_CLK_TCK);
  if (utime < 0 || stime < 0 || ticks <= 0) return std::nullopt;
  return static_cast<double>(utime + stime) / static_cast<double>(ticks);
}

std::optional<ProcSample> read_proc(pid_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  const auto mem = parse_smaps_rollup(slurp(proc + "/smaps_rollup"));
  const auto hwm = proc_field_kib(slurp(proc + "/status"), "VmHWM");
  if (!mem || !hwm) return std::nullopt;
  return ProcSample{*mem, std::max(static_cast<double>(*hwm), static_cast<double>(mem->rss_kib))};
}

// One redis-server lifetime: run by the spawner on a thread of its own (the
// spawner waits for its child), talked to through a unix socket in a fresh
// temporary directory, stopped with SIGTERM.  The server stays in our process
// group, so an interrupted lazybench takes it along.
class Server {
 public:
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  ~Server() {
    std::string ignored;
    stop(&ignored);
  }

  static std::unique_ptr<Server> start(const Plan& plan, const AllocatorSpec& a, const fs::path& log, double timeout_s,
                                       std::string* error) {
    char tmpl[] = "/tmp/lazybench-server-XXXXXX";
    if (!::mkdtemp(tmpl)) {
      *error = "mkdtemp failed";
      return nullptr;
    }
    std::unique_ptr<Server> s(new Server);
    s->cli_ = plan.cli;
    s->cli_cpus_ = plan.client_cpus;
    s->timeout_s_ = timeout_s;
    s->dir_ = tmpl;
    s->socket_ = (s->dir_ / "redis.sock").string();
    const std::string pidfile = (s->dir_ / "redis.pid").string();
    std::vector<std::string> argv = {plan.server,       "--port",         "0",        "--unixsocket", s->socket_,
                                     "--unixsocketperm", "700",           "--save",   "",             "--appendonly",
                                     "no",              "--dir",          s->dir_.string(), "--pidfile", pidfile,
                                     "--logfile",       fs::absolute(log).string(), "--daemonize", "no",
                                     "--enable-debug-command", "local"};
    argv.insert(argv.end(), plan.server_args.begin(), plan.server_args.end());
    SpawnOptions o;
    o.env = child_env(a.preload, a.env);
    o.cpus = plan.server_cpus;
    // A safety net only (stop() ends it): longer than any phase can take,
    // so that a server whose pid we never learnt cannot outlive us.
    o.timeout_s = plan.server_lifetime_s;
    Server* self = s.get();
    s->thread_ = std::thread([self, argv, o] {
      self->result_ = spawn(argv, o);
      self->done_.store(true);
    });
    // Ready when it has written its pid file (after it listens) and answers PING.
    const auto begin = Clock::now();
    std::string last;
    while (true) {
      if (s->done_.load()) {
        *error = "redis-server ended at start: " + s->result_.status_text() + " " + one_line(s->result_.err) + " " +
                 one_line(s->result_.out) + " (log: " + log.string() + ")";
        return nullptr;
      }
      if (s->pid_ <= 0) s->pid_ = std::atoi(slurp(pidfile).c_str());
      if (s->pid_ > 0 && s->cli({"PING"}, &last) == "PONG") return s;
      if (seconds_since(begin) > timeout_s) {
        *error = "redis-server not ready after " + format_fixed(timeout_s, 0) + " s (" + last + "; log: " +
                 log.string() + ")";
        return nullptr;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  pid_t pid() const { return pid_; }

  // redis-cli COMMAND...: the reply, trimmed, or nullopt with *error.
  std::optional<std::string> cli(const std::vector<std::string>& command, std::string* error) const {
    std::vector<std::string> argv = {cli_, "-s", socket_};
    argv.insert(argv.end(), command.begin(), command.end());
    return client(argv, timeout_s_, error, cli_cpus_);
  }

  // Checks that the reply of `command` is `expected`.
  bool expect(const std::vector<std::string>& command, const std::string& expected, std::string* error) const {
    const auto reply = cli(command, error);
    if (!reply) return false;
    if (*reply == expected) return true;
    *error = join(command) + ": " + *reply;
    return false;
  }

  const std::string& socket() const { return socket_; }

  // SIGTERM (redis shuts down, nothing to save), SIGKILL if it has not ended
  // after the timeout (a server whose pid is unknown ends at the spawner's
  // timeout); true when it exited with status 0, else false with *error.
  bool stop(std::string* error) {
    if (!thread_.joinable()) return true;
    if (!done_.load() && pid_ > 0) ::kill(pid_, SIGTERM);
    const auto begin = Clock::now();
    while (!done_.load()) {
      if (seconds_since(begin) > timeout_s_ && pid_ > 0) {
        ::kill(pid_, SIGKILL);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    thread_.join();
    std::error_code ec;
    fs::remove_all(dir_, ec);
    if (result_.ok()) return true;
    *error = "redis-server " + result_.status_text() + " " + one_line(result_.err);
    return false;
  }

 private:
  Server() = default;
  std::string cli_;
  std::vector<int> cli_cpus_;
  double timeout_s_ = 0;
  fs::path dir_;
  std::string socket_;
  pid_t pid_ = 0;
  std::thread thread_;
  std::atomic<bool> done_{false};
  SpawnResult result_;
};

// redis-benchmark --csv: "test","rps",... then one line per test.
std::vector<std::pair<std::string, double>> parse_benchmark_csv(const std::string& text) {
  std::vector<std::pair<std::string, double>> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> fields;
    std::string field;
    bool quoted = false;
    for (char c : line) {
      if (c == '"') quoted = !quoted;
      else if (c == ',' && !quoted) fields.push_back(std::move(field)), field.clear();
      else if (c != '\r') field += c;
    }
    fields.push_back(field);
    if (fields.size() < 2 || fields[0] == "test") continue;
    char* end = nullptr;
    const double rps = std::strtod(fields[1].c_str(), &end);
    if (end != fields[1].c_str() && *end == '\0') out.emplace_back(fields[0], rps);
  }
  return out;
}

struct ThroughputRun {
  int rep = 0;
  std::size_t alloc = 0;
  bool ok = false;
  std::string status;
  std::vector<std::pair<std::string, double>> rps;
  // Server CPU (all threads) per request, microseconds, per command of rps.
  // Unlike requests/s it does not count the time the server waits for the
  // CPU or for its client, so other work on the machine moves it less.
  std::vector<std::pair<std::string, double>> cpu_us;
  double peak_kib = 0;  // VmHWM at the end of the benchmark
};

struct MemoryRun {
  int rep = 0;
  std::size_t alloc = 0;
  bool ok = false;
  std::string status;
  MemSample start, loaded;
  double peak_kib = 0;
  std::vector<std::pair<double, MemSample>> idle;  // (seconds after FLUSHALL, sample)
  std::optional<double> settle_s;                  // first sample within settle_mib of start
};

// Progress lines on stderr: "[i/total] what ... result".
struct Progress {
  std::size_t index = 0, total = 0;
  void begin(const std::string& what) {
    std::fprintf(stderr, "[%zu/%zu] %s ... ", ++index, total, what.c_str());
    std::fflush(stderr);
  }
};

// One repetition of the throughput phase.  A fresh server for every
// allocator, all started first; then each test of --tests in turn against
// every server, in an order that rotates by one allocator per repetition and
// per test, so that the runs of one test follow each other within seconds
// and what drifts (other work, the clock) hits every allocator alike.  Each
// server still sees the tests in --tests order (GET reads the key SET wrote,
// LPOP pops what LPUSH pushed).  Returns a run per allocator, in the order
// of `allocators`.
std::vector<ThroughputRun> run_throughput_rep(const ServerOptions& opt, const Plan& plan,
                                              const std::vector<AllocatorSpec>& allocators, int rep,
                                              const fs::path& log_dir, Progress& progress) {
  const std::size_t n = allocators.size();
  std::vector<ThroughputRun> runs(n);
  std::vector<std::string> errors(n);
  std::vector<std::unique_ptr<Server>> servers(n);
  for (std::size_t k = 0; k < n; ++k) {
    runs[k].rep = rep;
    runs[k].alloc = k;
    const std::string log = "throughput." + allocators[k].name + ".rep" + std::to_string(rep) + ".log";
    servers[k] = Server::start(plan, allocators[k], log_dir / log, opt.timeout_s, &errors[k]);
  }
  const auto tests = split_list(opt.tests);
  for (std::size_t j = 0; j < tests.size(); ++j) {
    const std::string& test = tests[j];
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t k = (i + j + static_cast<std::size_t>(rep - 1)) % n;
      ThroughputRun& r = runs[k];
      std::string& error = errors[k];
      progress.begin("rep " + std::to_string(rep) + " " + test + " under " + allocators[k].name);
      if (!error.empty()) {
        std::fprintf(stderr, "FAILED: %s\n", error.c_str());
        continue;
      }
      // One client call per test, so that the server's CPU time is known per
      // command.  A test may print several results (e.g. "ping":
      // PING_INLINE and PING_MBULK), each of -n requests: they share its CPU
      // time evenly.
      const std::vector<std::string> argv = {plan.benchmark, "-s", servers[k]->socket(), "-P", std::to_string(opt.pipeline),
                                             "-c", std::to_string(opt.clients), "-d", std::to_string(opt.data_size),
                                             "-n", std::to_string(plan.requests), "-t", test, "--csv"};
      const auto cpu_before = cpu_seconds(servers[k]->pid());
      const auto out = client(argv, opt.timeout_s, &error, plan.client_cpus);
      const auto cpu_after = cpu_seconds(servers[k]->pid());
      if (out) {
        const auto rows = parse_benchmark_csv(*out);
        if (rows.empty()) {
          error = "redis-benchmark -t " + test + " printed no results: " + one_line(*out);
        } else if (!cpu_before || !cpu_after) {
          error = "cannot read /proc of the server";
        } else {
          const double requests = static_cast<double>(plan.requests) * static_cast<double>(rows.size());
          for (const auto& row : rows) {
            const double cpu_us = (*cpu_after - *cpu_before) * 1e6 / requests;
            r.rps.push_back(row);
            r.cpu_us.emplace_back(row.first, cpu_us);
            std::fprintf(stderr, "%s %s/s %.2f us ", row.first.c_str(), format_si(row.second).c_str(), cpu_us);
          }
        }
      }
      if (error.empty()) std::fprintf(stderr, "\n");
      else std::fprintf(stderr, "FAILED: %s\n", error.c_str());
    }
  }
  for (std::size_t k = 0; k < n; ++k) {
    if (!servers[k]) continue;
    if (errors[k].empty()) {
      if (const auto p = read_proc(servers[k]->pid())) runs[k].peak_kib = p->hwm_kib;
      else errors[k] = "cannot read /proc of the server";
    }
    std::string stop_error;
    if (!servers[k]->stop(&stop_error) && errors[k].empty()) errors[k] = stop_error;
    servers[k].reset();
  }
  for (std::size_t k = 0; k < n; ++k) {
    runs[k].ok = errors[k].empty() && !runs[k].rps.empty();
    runs[k].status = runs[k].ok ? "ok" : errors[k];
  }
  return runs;
}

MemoryRun run_memory(const ServerOptions& opt, const Plan& plan, const AllocatorSpec& a, const fs::path& log) {
  MemoryRun r;
  std::string error;
  auto server = Server::start(plan, a, log, opt.timeout_s, &error);
  auto fail = [&](const std::string& what) {
    r.status = what;
    return r;
  };
  if (!server) return fail(error);
  const auto start = read_proc(server->pid());
  if (!start) return fail("cannot read /proc of the server");
  r.start = start->mem;
  const std::string keys = std::to_string(plan.keys);
  if (!server->expect({"DEBUG", "POPULATE", keys, "key", std::to_string(opt.value_size)}, "OK", &error) ||
      !server->expect({"DBSIZE"}, keys, &error))
    return fail(error);
  const auto loaded = read_proc(server->pid());
  if (!loaded) return fail("cannot read /proc of the server");
  r.loaded = loaded->mem;
  if (!server->expect({"FLUSHALL"}, "OK", &error)) return fail(error);
  const auto flushed = Clock::now();
  const double settle_kib = static_cast<double>(r.start.held_kib()) + opt.settle_mib * kKiBPerMiB;
  for (const double t : plan.sample_times) {
    std::this_thread::sleep_until(flushed + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(t)));
    const auto p = read_proc(server->pid());
    if (!p) return fail("cannot read /proc of the server");
    r.idle.emplace_back(t, p->mem);
    r.peak_kib = std::max({r.peak_kib, p->hwm_kib, static_cast<double>(r.loaded.rss_kib)});
    if (!r.settle_s && static_cast<double>(p->mem.held_kib()) <= settle_kib) r.settle_s = t;
  }
  if (!server->stop(&error)) return fail(error);
  r.ok = true;
  r.status = "ok";
  return r;
}

// The sample of `run` taken at `t` seconds after FLUSHALL.
const MemSample* sample_at(const MemoryRun& run, double t) {
  for (const auto& [when, s] : run.idle)
    if (when == t) return &s;
  return nullptr;
}

// A memory figure of a run, in MiB.
struct MemoryMetric {
  std::string key;    // CSV/JSON name
  std::string title;  // table column
  std::optional<double> (*get)(const MemoryRun&, const Plan&);
};

std::optional<double> mib(double kib) { return kib / kKiBPerMiB; }

const std::vector<MemoryMetric>& memory_metrics() {
  static const std::vector<MemoryMetric> metrics = {
      {"start_rss_mib", "start Rss", [](const MemoryRun& r, const Plan&) { return mib(r.start.rss_kib); }},
      {"start_held_mib", "start held", [](const MemoryRun& r, const Plan&) { return mib(r.start.held_kib()); }},
      {"loaded_rss_mib", "loaded Rss", [](const MemoryRun& r, const Plan&) { return mib(r.loaded.rss_kib); }},
      {"peak_rss_mib", "peak (VmHWM)", [](const MemoryRun& r, const Plan&) { return mib(r.peak_kib); }},
      {"idle_held_mib", "held after idle",
       [](const MemoryRun& r, const Plan& p) -> std::optional<double> {
         const MemSample* s = sample_at(r, p.idle_s);
         return s ? mib(s->held_kib()) : std::nullopt;
       }},
      {"wait_rss_mib", "Rss after wait",
       [](const MemoryRun& r, const Plan& p) -> std::optional<double> {
         const MemSample* s = sample_at(r, p.rss_wait_s);
         return s ? mib(s->rss_kib) : std::nullopt;
       }},
      {"wait_held_mib", "held after wait",
       [](const MemoryRun& r, const Plan& p) -> std::optional<double> {
         const MemSample* s = sample_at(r, p.rss_wait_s);
         return s ? mib(s->held_kib()) : std::nullopt;
       }},
  };
  return metrics;
}

std::string seconds_text(double s) { return format_fixed(s, s == std::floor(s) ? 0 : 1) + " s"; }

void remove_previous_outputs(const fs::path& dir) {
  std::error_code ec;
  for (const char* name : {"results.md", "results.csv", "results.json"}) fs::remove(dir / name, ec);
  if (!fs::is_directory(dir / "logs", ec)) return;
  for (const auto& entry : fs::directory_iterator(dir / "logs", ec))
    if (entry.is_regular_file(ec) && entry.path().extension() == ".log") fs::remove(entry.path(), ec);
}

bool write_file(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  return static_cast<bool>(f);
}

Json summary_json(const std::optional<Summary>& s) {
  if (!s) return nullptr;
  return Json{{"median", s->median}, {"min", s->min}, {"max", s->max}, {"runs", s->count}};
}

}  // namespace

int server_command(const ServerOptions& opt) {
  const char* who = "lazybench server";
  if (opt.reps < 1 || opt.clients < 1 || opt.pipeline < 1 || opt.data_size < 1 || opt.value_size < 1 ||
      opt.requests < 0 || opt.keys < 0 || opt.settle_mib < 0 || opt.timeout_s <= 0 || opt.memory_reps < 0) {
    std::cerr << who << ": --reps, --clients, --pipeline, --data-size and --value-size must be at least 1, "
                        "--requests, --keys, --memory-reps and --settle-mib not negative, --timeout positive\n";
    return 2;
  }
  if (split_list(opt.tests).empty()) {
    std::cerr << who << ": --tests names no test\n";
    return 2;
  }
  Plan plan;
  plan.requests = opt.requests > 0 ? opt.requests : opt.quick ? 20000 : 200000;
  plan.memory_reps = std::min(opt.memory_reps, opt.reps);
  plan.keys = opt.keys > 0 ? opt.keys : opt.quick ? 20000 : 1500000;
  plan.idle_s = opt.idle_s >= 0 ? opt.idle_s : opt.quick ? 1 : 10;
  plan.rss_wait_s = opt.rss_wait_s >= 0 ? opt.rss_wait_s : opt.quick ? 2 : 12;
  // Every second up to the later of the two, and the two themselves.
  const double last = std::max(plan.idle_s, plan.rss_wait_s);
  for (int i = 0; i <= static_cast<int>(std::floor(last)); ++i) plan.sample_times.push_back(i);
  plan.sample_times.push_back(plan.idle_s);
  plan.sample_times.push_back(plan.rss_wait_s);
  std::sort(plan.sample_times.begin(), plan.sample_times.end());
  plan.sample_times.erase(std::unique(plan.sample_times.begin(), plan.sample_times.end()), plan.sample_times.end());
  const auto words = split_words(opt.server_args);
  if (!words) {
    std::cerr << who << ": unterminated quote in --server-args\n";
    return 2;
  }
  plan.server_args = *words;
  // CPUs: "auto" puts the servers on the first CPU we may use and the
  // clients on the second (when there are two), so that a server and its
  // client never take turns on one CPU; "none" (or "") does not pin.
  {
    const std::vector<int> ours = usable_cpus();
    bool ok = true;
    auto cpus = [&](const std::string& text, std::size_t auto_index, const char* option) {
      if (text == "auto") return ours.size() >= 2 ? std::vector<int>{ours[auto_index]} : std::vector<int>{};
      if (text.empty() || text == "none") return std::vector<int>{};
      const auto list = parse_cpu_list(text);
      if (!list) {
        std::cerr << who << ": bad " << option << " '" << text << "' (a CPU list such as 0 or 1-3,5; auto; none)\n";
        ok = false;
        return std::vector<int>{};
      }
      for (const int c : *list)
        if (std::find(ours.begin(), ours.end(), c) == ours.end()) {
          std::cerr << who << ": " << option << ": CPU " << c << " is not one this process may use\n";
          ok = false;
        }
      return *list;
    };
    plan.server_cpus = cpus(opt.server_cpus, 0, "--server-cpus");
    plan.client_cpus = cpus(opt.client_cpus, 1, "--client-cpus");
    if (!ok) return 2;
  }
  for (auto [path, name] : {std::pair{&plan.server, &opt.server}, {&plan.benchmark, &opt.benchmark}, {&plan.cli, &opt.cli}}) {
    *path = name->find('/') != std::string::npos ? (::access(name->c_str(), X_OK) == 0 ? *name : "") : find_in_path(*name);
    if (path->empty()) {
      std::cerr << who << ": " << *name << " not found (Debian: redis-server and redis-tools; tools/deps.sh installs them)\n";
      return 2;
    }
  }

  std::vector<std::string> skipped;
  auto resolved = allocators_to_run(opt.allocators, opt.lib, opt.alloc_env, who, &skipped);
  if (!resolved) return 2;
  std::vector<AllocatorSpec> allocators = std::move(*resolved);
  // Debian's redis-server links libjemalloc, which comes before libc in its
  // search order: without a preload it runs on jemalloc.  Preloading libc
  // itself puts glibc's malloc first.
  std::string glibc_note;
  for (auto& a : allocators) {
    if (a.name != "glibc" || !a.preload.empty()) continue;
    a.preload = resolve_preload("libc.so.6", peer_library_dirs());
    glibc_note = a.preload.empty() ? "libc.so.6 not found: glibc runs without a preload (a server that links "
                                     "another malloc runs on that one)"
                                   : "glibc is run with LD_PRELOAD=" + a.preload +
                                         ", so that its malloc comes before the libjemalloc that Debian's "
                                         "redis-server links (without a preload it would run on jemalloc)";
  }

  const fs::path out_dir = opt.out_dir;
  std::error_code ec;
  remove_previous_outputs(out_dir);
  fs::create_directories(out_dir / "logs", ec);
  if (ec) {
    std::cerr << who << ": cannot create " << out_dir << ": " << ec.message() << '\n';
    return 2;
  }
  std::string version_error;
  const std::string version = client({plan.server, "--version"}, opt.timeout_s, &version_error).value_or(version_error);

  const std::size_t n = allocators.size();
  const std::size_t n_tests = split_list(opt.tests).size();
  // Generous: every client call of a repetition at its limit, and a memory phase.
  plan.server_lifetime_s = static_cast<double>(n_tests * n + 6) * opt.timeout_s + plan.sample_times.back();
  const std::string load_before = load_average();
  const auto begin = Clock::now();
  std::vector<ThroughputRun> throughput;
  std::vector<MemoryRun> memory;
  Progress progress;
  progress.total = n * (n_tests * static_cast<std::size_t>(opt.reps) + static_cast<std::size_t>(plan.memory_reps));
  for (int rep = 1; rep <= opt.reps; ++rep) {
    for (auto& t : run_throughput_rep(opt, plan, allocators, rep, out_dir / "logs", progress))
      throughput.push_back(std::move(t));
    if (rep > plan.memory_reps) continue;
    for (std::size_t i = 0; i < n; ++i) {
      // Each repetition starts with the next allocator.
      const std::size_t k = (i + static_cast<std::size_t>(rep - 1)) % n;
      const AllocatorSpec& a = allocators[k];
      const std::string stem = a.name + ".rep" + std::to_string(rep);
      progress.begin("memory under " + a.name + " rep " + std::to_string(rep));
      const auto t0 = Clock::now();
      MemoryRun m = run_memory(opt, plan, a, out_dir / "logs" / ("memory." + stem + ".log"));
      m.rep = rep;
      m.alloc = k;
      if (m.ok) {
        for (const auto& metric : memory_metrics())
          if (const auto v = metric.get(m, plan)) std::fprintf(stderr, "%s %.1f ", metric.key.c_str(), *v);
        std::fprintf(stderr, "(%.1f s)\n", seconds_since(t0));
      } else {
        std::fprintf(stderr, "FAILED: %s\n", m.status.c_str());
      }
      memory.push_back(std::move(m));
    }
  }
  const double duration = seconds_since(begin);
  const std::string load_after = load_average();

  // ---- Summaries.
  std::optional<std::size_t> glibc;
  for (std::size_t k = 0; k < n; ++k)
    if (allocators[k].name == "glibc") glibc = k;
  std::vector<std::string> commands;  // in redis-benchmark's order
  for (const auto& t : throughput)
    for (const auto& [cmd, rps] : t.rps)
      if (std::find(commands.begin(), commands.end(), cmd) == commands.end()) commands.push_back(cmd);
  // rps[command][allocator], cpu[command][allocator]
  using PerCommand = std::map<std::string, std::vector<std::optional<Summary>>>;
  auto per_command = [&](std::vector<std::pair<std::string, double>> ThroughputRun::*field) {
    PerCommand out;
    for (const auto& cmd : commands) {
      auto& row = out[cmd];
      for (std::size_t k = 0; k < n; ++k) {
        std::vector<double> v;
        for (const auto& t : throughput)
          if (t.ok && t.alloc == k)
            for (const auto& [c, x] : t.*field)
              if (c == cmd) v.push_back(x);
        row.push_back(summarize(v));
      }
    }
    return out;
  };
  PerCommand rps = per_command(&ThroughputRun::rps);
  PerCommand cpu = per_command(&ThroughputRun::cpu_us);
  // Paired ratios against glibc: in each repetition, allocator k's figure
  // against glibc's for the same command (paired_ratios); their summary over
  // the repetitions, per command and allocator (glibc's own: 1.00x).
  auto paired_of = [&](std::vector<std::pair<std::string, double>> ThroughputRun::*field, bool higher_is_better) {
    auto by_rep = [&](const std::string& cmd, std::size_t k) {
      std::map<int, double> v;
      for (const auto& t : throughput)
        if (t.ok && t.alloc == k)
          for (const auto& [c, x] : t.*field)
            if (c == cmd) v[t.rep] = x;
      return v;
    };
    PerCommand out;
    for (const auto& cmd : commands) {
      auto& row = out[cmd];
      for (std::size_t k = 0; k < n; ++k)
        row.push_back(glibc ? summarize(paired_ratios(by_rep(cmd, k), by_rep(cmd, *glibc), higher_is_better))
                            : std::nullopt);
    }
    return out;
  };
  PerCommand rps_paired = paired_of(&ThroughputRun::rps, true);
  PerCommand cpu_paired = paired_of(&ThroughputRun::cpu_us, false);
  auto paired_text = [](const std::optional<Summary>& s) {
    return s ? format_ratio(s->median) + " (" + format_fixed(s->min, 2) + "-" + format_fixed(s->max, 2) + ")"
             : std::string("-");
  };
  // > 1.00x = better than glibc: more requests/s, or less CPU per request.
  auto vs_glibc_of = [&](PerCommand& table, bool higher_is_better, const std::string& cmd,
                         std::size_t k) -> std::optional<double> {
    const auto& row = table[cmd];
    if (!glibc || !row[k] || !row[*glibc]) return std::nullopt;
    return speedup(row[k]->median, row[*glibc]->median, higher_is_better);
  };
  auto vs_glibc = [&](const std::string& cmd, std::size_t k) { return vs_glibc_of(rps, true, cmd, k); };
  // One row per command, one column per allocator: the median (`format`)
  // and, in parentheses, the median paired ratio to glibc's (`paired`) or,
  // without it, the ratio of the medians.
  auto command_table = [&](PerCommand& table, bool higher_is_better, PerCommand* paired, auto format) {
    std::vector<MarkdownTable::Column> cols = {{"command"}};
    for (const auto& a : allocators) cols.push_back({a.name, true});
    MarkdownTable out(cols);
    for (const auto& cmd : commands) {
      std::vector<std::string> cells = {cmd};
      for (std::size_t k = 0; k < n; ++k) {
        const auto& s = table[cmd][k];
        std::optional<double> ratio = vs_glibc_of(table, higher_is_better, cmd, k);
        if (paired) {
          const auto& p = (*paired)[cmd][k];
          ratio = p ? std::optional<double>(p->median) : std::nullopt;
        }
        cells.push_back(s ? format(s->median) + " (" + format_ratio(ratio) + ")" : "-");
      }
      out.add_row(cells);
    }
    return out.render();
  };
  // One row per command, one column per allocator: the median paired ratio
  // to glibc's and the range of the ratios.
  auto paired_table = [&](PerCommand& paired) {
    std::vector<MarkdownTable::Column> cols = {{"command"}};
    for (const auto& a : allocators) cols.push_back({a.name, true});
    MarkdownTable out(cols);
    for (const auto& cmd : commands) {
      std::vector<std::string> cells = {cmd};
      for (std::size_t k = 0; k < n; ++k) cells.push_back(paired_text(paired[cmd][k]));
      out.add_row(cells);
    }
    return out.render();
  };
  // Allocator k's summary per command, each with its ratio to glibc's (of
  // the medians) and the summary of its paired ratios.
  auto command_json = [&](PerCommand& table, bool higher_is_better, PerCommand& paired, std::size_t k) {
    Json out = Json::object();
    for (const auto& cmd : commands) {
      Json c = summary_json(table[cmd][k]);
      if (!c.is_null()) {
        const auto r = vs_glibc_of(table, higher_is_better, cmd, k);
        c["vs_glibc"] = r ? Json(*r) : Json(nullptr);
        c["paired_vs_glibc"] = summary_json(paired[cmd][k]);
      }
      out[cmd] = c;
    }
    return out;
  };
  auto memory_summary = [&](std::size_t k, const MemoryMetric& metric) {
    std::vector<double> v;
    for (const auto& m : memory)
      if (m.ok && m.alloc == k)
        if (const auto x = metric.get(m, plan)) v.push_back(*x);
    return summarize(v);
  };
  auto bench_peak = [&](std::size_t k) {
    std::vector<double> v;
    for (const auto& t : throughput)
      if (t.ok && t.alloc == k) v.push_back(t.peak_kib / kKiBPerMiB);
    return summarize(v);
  };
  // Settling: the median time when every successful run settled.
  struct Settle {
    std::size_t runs = 0, settled = 0;
    std::optional<double> median_s;
  };
  auto settle = [&](std::size_t k) {
    Settle s;
    std::vector<double> v;
    for (const auto& m : memory) {
      if (!m.ok || m.alloc != k) continue;
      ++s.runs;
      if (m.settle_s) v.push_back(*m.settle_s);
    }
    s.settled = v.size();
    if (s.runs > 0 && s.settled == s.runs) s.median_s = median(v);
    return s;
  };
  auto settle_text = [&](const Settle& s) {
    if (s.runs == 0) return std::string("-");
    if (s.median_s) return seconds_text(*s.median_s);
    return "not within " + seconds_text(plan.sample_times.back()) + " (" + std::to_string(s.runs - s.settled) + " of " +
           std::to_string(s.runs) + " runs)";
  };
  std::size_t failures = 0;
  for (const auto& t : throughput) failures += t.ok ? 0 : 1;
  for (const auto& m : memory) failures += m.ok ? 0 : 1;

  // ---- Markdown.
  const std::string client_line = "redis-benchmark -s SOCKET -P " + std::to_string(opt.pipeline) + " -c " +
                                  std::to_string(opt.clients) + " -d " + std::to_string(opt.data_size) + " -n " +
                                  std::to_string(plan.requests) + " -t TEST --csv";
  std::string md = "# lazybench server results\n\n";
  md += "- Date: " + local_timestamp() + "\n";
  md += "- Machine: " + machine_description() + "\n";
  md += "- Load average (1/5/15 min) before: " + load_before + ", after: " + load_after +
        " (other work on the machine competes with the server and its client)\n";
  md += "- Duration: " + format_fixed(duration, 0) + " s\n";
  md += "- Command: `" + opt.command_line + "`\n";
  md += "- Server: " + version + " (`" + plan.server + " --port 0 --unixsocket SOCKET --save '' --appendonly no" +
        (plan.server_args.empty() ? "" : " " + join(plan.server_args)) + "`)\n";
  auto cpu_text = [](const std::vector<int>& cpus) {
    if (cpus.empty()) return std::string("not pinned");
    std::string out = "CPU ";
    for (std::size_t i = 0; i < cpus.size(); ++i) out += (i ? "," : "") + std::to_string(cpus[i]);
    return out;
  };
  md += "- Repetitions: " + std::to_string(opt.reps) + " of the throughput phase, " +
        std::to_string(plan.memory_reps) +
        " of the memory phase; each repetition runs every allocator (the order rotating by one allocator per "
        "repetition and per command)\n";
  md += "- CPUs: servers " + cpu_text(plan.server_cpus) + ", clients " + cpu_text(plan.client_cpus) + "\n";
  md += "- Allocators: " + describe_allocators(allocators) + "\n";
  if (!glibc_note.empty()) md += "- Note: " + glibc_note + "\n";
  for (const auto& s : skipped) md += "- Skipped: " + s + "\n";
  if (failures) md += "- **" + std::to_string(failures) + " run(s) failed**; see the status column of results.csv and logs/\n";

  md += "\n## Throughput\n\n`" + client_line + "` for each TEST of `" + opt.tests +
        "` (no preload for the client). Each repetition starts a fresh server per allocator, then runs the tests "
        "in that order, each against every allocator's server in turn, so that the runs of one test follow each "
        "other within seconds.\n\n";
  md += "### Requests/s against glibc, paired\n\nIn each repetition, an allocator's requests/s divided by "
        "glibc's for the same command: the median of these ratios over the repetitions (their range in "
        "parentheses). Load that drifts between repetitions moves both runs of a pair alike and cancels in the "
        "ratio. > 1.00x = faster than glibc.\n\n";
  md += paired_table(rps_paired);
  md += "\n### Requests/s\n\nMedians of the repetitions, and in parentheses the median paired ratio to glibc's "
        "(above).\n\n";
  {
    md += command_table(rps, true, &rps_paired, [](double v) { return format_si(v); }) + "\n";
    MarkdownTable detail({{"command"}, {"allocator"}, {"median (req/s)", true}, {"min..max", true}, {"runs", true},
                          {"medians vs glibc", true}, {"paired vs glibc", true}});
    for (const auto& cmd : commands)
      for (std::size_t k = 0; k < n; ++k) {
        const auto& s = rps[cmd][k];
        detail.add_row({cmd, allocators[k].name, s ? format_si(s->median) : "-",
                        s ? format_si(s->min) + ".." + format_si(s->max) : "-",
                        std::to_string(s ? s->count : 0) + "/" + std::to_string(opt.reps),
                        format_ratio(vs_glibc(cmd, k)), paired_text(rps_paired[cmd][k])});
      }
    md += detail.render();
  }
  md += "\n### Server CPU per request\n\nThe server's CPU time (all its threads: "
        "/proc/PID/task/*/schedstat in nanoseconds, or user + system from /proc/PID/stat in clock ticks where the "
        "kernel keeps no schedstat) during each command's client call, divided by its requests: microseconds, "
        "median of the repetitions, and in parentheses the median over the repetitions of glibc's divided by it "
        "(paired; > 1.00x = less CPU than glibc). Time spent waiting for a CPU or for the client is not in it, so "
        "it moves less than requests/s when other work competes.\n\n";
  md += command_table(cpu, false, &cpu_paired, [](double v) { return format_fixed(v, 3); }) + "\n";
  md += "Paired ratios of CPU per request (range in parentheses):\n\n";
  md += paired_table(cpu_paired);

  md += "\n## Memory\n\nA second server: `DEBUG POPULATE " + std::to_string(plan.keys) + " key " +
        std::to_string(opt.value_size) + "` (" + std::to_string(plan.keys) + " keys of " +
        std::to_string(opt.value_size) + " bytes), then `FLUSHALL`, then idle. MiB from the server's "
        "/proc/PID/smaps_rollup; held = Rss - LazyFree (LazyFree: pages given back with MADV_FREE that the "
        "kernel has not taken yet). Medians of the repetitions. \"held after idle\" is " +
        seconds_text(plan.idle_s) + " after FLUSHALL, \"Rss/held after wait\" " + seconds_text(plan.rss_wait_s) +
        "; \"settled\" is the first whole second at which held was within " + format_fixed(opt.settle_mib, 0) +
        " MiB of its start; \"bench peak\" is the VmHWM of the throughput server (medians of all repetitions), "
        "\"vs leanest\" its excess over the smallest bench peak of the other allocators.\n\n";
  {
    std::vector<MarkdownTable::Column> cols = {{"allocator"}};
    for (const auto& m : memory_metrics()) cols.push_back({m.title, true});
    cols.push_back({"settled", true});
    cols.push_back({"bench peak", true});
    cols.push_back({"vs leanest", true});
    MarkdownTable table(cols);
    for (std::size_t k = 0; k < n; ++k) {
      std::vector<std::string> cells = {allocators[k].name};
      for (const auto& m : memory_metrics()) {
        const auto s = memory_summary(k, m);
        cells.push_back(s ? format_fixed(s->median, 1) : "-");
      }
      cells.push_back(settle_text(settle(k)));
      const auto bp = bench_peak(k);
      cells.push_back(bp ? format_fixed(bp->median, 1) : "-");
      std::optional<double> leanest;
      for (std::size_t j = 0; j < n; ++j)
        if (const auto other = bench_peak(j); j != k && other && (!leanest || other->median < *leanest))
          leanest = other->median;
      if (bp && leanest && *leanest > 0) {
        const double pct = 100 * (bp->median / *leanest - 1);
        cells.push_back((pct >= 0 ? "+" : "") + format_fixed(pct, 1) + "%");
      } else {
        cells.push_back("-");
      }
      table.add_row(cells);
    }
    md += table.render();
  }
  md += "\n### After FLUSHALL\n\nheld / Rss in MiB, medians of the repetitions, at each sample (seconds after FLUSHALL "
        "returned).\n\n";
  {
    std::vector<MarkdownTable::Column> cols = {{"t (s)", true}};
    for (const auto& a : allocators) cols.push_back({a.name, true});
    MarkdownTable table(cols);
    for (const double t : plan.sample_times) {
      std::vector<std::string> cells = {format_fixed(t, t == std::floor(t) ? 0 : 1)};
      for (std::size_t k = 0; k < n; ++k) {
        std::vector<double> held, rss;
        for (const auto& m : memory)
          if (m.ok && m.alloc == k)
            if (const MemSample* s = sample_at(m, t)) {
              held.push_back(static_cast<double>(s->held_kib()) / kKiBPerMiB);
              rss.push_back(static_cast<double>(s->rss_kib) / kKiBPerMiB);
            }
        cells.push_back(held.empty() ? "-" : format_fixed(median(held), 1) + " / " + format_fixed(median(rss), 1));
      }
      table.add_row(cells);
    }
    md += table.render();
  }
  md += "\nRaw runs: results.csv; summary: results.json; server logs: logs/.\n";

  // ---- CSV: one line per figure of every run.
  std::string csv = csv_line({"rep", "allocator", "phase", "metric", "t_s", "value", "unit", "status"});
  for (const auto& t : throughput) {
    const std::string& a = allocators[t.alloc].name;
    const std::string rep = std::to_string(t.rep);
    if (!t.ok) {
      csv += csv_line({rep, a, "throughput", "", "", "", "", t.status});
      continue;
    }
    for (const auto& [cmd, x] : t.rps) csv += csv_line({rep, a, "throughput", cmd, "", csv_number(x), "req/s", "ok"});
    for (const auto& [cmd, x] : t.cpu_us) csv += csv_line({rep, a, "cpu", cmd, "", csv_number(x), "us/req", "ok"});
    csv += csv_line({rep, a, "throughput", "peak_rss_mib", "", csv_number(t.peak_kib / kKiBPerMiB), "MiB", "ok"});
  }
  for (const auto& m : memory) {
    const std::string& a = allocators[m.alloc].name;
    const std::string rep = std::to_string(m.rep);
    if (!m.ok) {
      csv += csv_line({rep, a, "memory", "", "", "", "", m.status});
      continue;
    }
    for (const auto& metric : memory_metrics())
      if (const auto v = metric.get(m, plan)) csv += csv_line({rep, a, "memory", metric.key, "", csv_number(*v), "MiB", "ok"});
    csv += csv_line({rep, a, "memory", "settle_s", "", m.settle_s ? csv_number(*m.settle_s) : "", "s", "ok"});
    for (const auto& [t, s] : m.idle) {
      csv += csv_line({rep, a, "idle", "rss_mib", csv_number(t), csv_number(static_cast<double>(s.rss_kib) / kKiBPerMiB),
                       "MiB", "ok"});
      csv += csv_line({rep, a, "idle", "held_mib", csv_number(t),
                       csv_number(static_cast<double>(s.held_kib()) / kKiBPerMiB), "MiB", "ok"});
    }
  }

  // ---- JSON summary.
  Json json;
  json["command"] = opt.command_line;
  json["date"] = local_timestamp();
  json["machine"] = machine_description();
  json["load_before"] = load_before;
  json["load_after"] = load_after;
  json["server"] = version;
  json["client"] = client_line;
  json["reps"] = opt.reps;
  json["keys"] = plan.keys;
  json["value_size"] = opt.value_size;
  json["idle_s"] = plan.idle_s;
  json["rss_wait_s"] = plan.rss_wait_s;
  json["settle_mib"] = opt.settle_mib;
  json["failures"] = failures;
  json["allocators"] = Json::array();
  for (std::size_t k = 0; k < n; ++k) {
    Json a;
    a["name"] = allocators[k].name;
    a["preload"] = allocators[k].preload;
    a["throughput"] = command_json(rps, true, rps_paired, k);
    a["cpu_us_per_request"] = command_json(cpu, false, cpu_paired, k);
    Json mem = Json::object();
    for (const auto& m : memory_metrics()) mem[m.key] = summary_json(memory_summary(k, m));
    mem["bench_peak_rss_mib"] = summary_json(bench_peak(k));
    const Settle s = settle(k);
    mem["settle_s"] = s.median_s ? Json(*s.median_s) : Json(nullptr);
    mem["settled_runs"] = s.settled;
    mem["runs"] = s.runs;
    a["memory"] = mem;
    json["allocators"].push_back(a);
  }

  const bool wrote = write_file(out_dir / "results.md", md) && write_file(out_dir / "results.csv", csv) &&
                     write_file(out_dir / "results.json", json.dump(2) + "\n");
  std::cout << md << std::flush;
  std::cerr << "\nReport: " << (out_dir / "results.md").string() << ", raw: " << (out_dir / "results.csv").string()
            << ", summary: " << (out_dir / "results.json").string() << '\n';
  if (!wrote) {
    std::cerr << who << ": could not write the report into " << out_dir << '\n';
    return 1;
  }
  return failures ? 1 : 0;
}

}  // namespace lazybench
