#include "timeline.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <new>
#include <optional>

#include "core/timeline.h"
#include "harness/gnuplot.h"
#include "harness/sysinfo.h"
#include "lazymalloc-run-args.h"

namespace lazymalloc_run {

namespace {

using lazymalloc::TimelinePage;

constexpr const char* kName = "lazymalloc-run";

std::string mib(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", bytes / (1024.0 * 1024.0));
  return buf;
}

std::optional<lazybench::MemSample> read_smaps(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/smaps_rollup";
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return lazybench::parse_smaps_rollup(text);
}

std::optional<TimelinePage::Gauges> read_page(const TimelinePage* page) {
  TimelinePage::Gauges g;
  for (int i = 0; i < 1000; ++i) {
    if (page->load(&g)) return g.publishes ? std::optional(g) : std::nullopt;
  }
  return std::nullopt;  // a publish in progress the whole time: this sample has none
}

// Waits up to `ms` for the child to exit: true when it has (pidfd readable).
bool wait_exit(int pidfd, pid_t pid, unsigned ms) {
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    int r;
    do r = ::poll(&p, 1, int(ms)); while (r < 0 && errno == EINTR);
    return r > 0;
  }
  // No pidfd (kernel before 5.3): sleep the interval, then look.
  struct timespec ts{time_t(ms / 1000), long(ms % 1000) * 1000000L};
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
  siginfo_t info{};
  return ::waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid;
}

std::string shell_words(const std::vector<std::string>& program) {
  std::string out;
  for (const auto& w : program) out += (out.empty() ? "" : " ") + w;
  return out.size() > 80 ? out.substr(0, 77) + "..." : out;
}

// Runs gnuplot with `script` on its stdin; "" or what went wrong.
std::string run_gnuplot(const std::string& script) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return std::string("pipe: ") + std::strerror(errno);
  const pid_t pid = ::fork();
  if (pid < 0) return std::string("fork: ") + std::strerror(errno);
  if (pid == 0) {
    ::dup2(fds[0], 0);
    ::execlp("gnuplot", "gnuplot", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[0]);
  const auto old = ::signal(SIGPIPE, SIG_IGN);  // a gnuplot that dies early must not kill us
  size_t off = 0;
  while (off < script.size()) {
    const ssize_t n = ::write(fds[1], script.data() + off, script.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    off += size_t(n);
  }
  ::close(fds[1]);
  ::signal(SIGPIPE, old);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) return "gnuplot not found (Debian: gnuplot-nox)";
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "gnuplot failed";
  return {};
}

}  // namespace

std::string timeline_script(const std::string& tsv, const std::string& svg, const std::string& program) {
  using lazybench::gnuplot_quote;
  // No enhanced-text markup in the program's words.
  std::string title = "lazymalloc-run --timeline: " + program;
  for (char& c : title)
    if (c == '_' || c == '^' || c == '@' || c == '&' || c == '{' || c == '}' || c == '\\' ||
        static_cast<unsigned char>(c) < 0x20)
      c = ' ';
  std::string s = lazybench::svg_header(svg, title);
  s += "set datafile separator '\\t'\n";
  s += "set datafile missing '-'\n";
  s += "set xlabel 'seconds'\n";
  s += "set ylabel 'MiB'\n";
  s += "set yrange [0:*]\n";
  s += "set grid\n";
  s += "set key below left Left reverse maxrows 4 title 'solid: the kernel''s view (/proc/PID/smaps\\_rollup);  "
       "dashed: the allocator''s gauges (its timeline page)'\n";
  const std::string f = gnuplot_quote(tsv);
  // Columns: 1 time, 2 rss, 3 lazyfree, 4 held, 5 anonhuge, 6 active, 7 retained, 8 lazy, 9 cached.
  s += "plot " + f + " using 1:2 with lines lw 2 dt 1 lc rgb 'black' title 'Rss: resident', \\\n";
  s += "     " + f + " using 1:4 with lines lw 2 dt 1 lc rgb '#1f77b4' title 'held = Rss - LazyFree', \\\n";
  s += "     " + f + " using 1:3 with lines lw 1 dt 1 lc rgb '#2ca02c' title 'LazyFree: MADV\\_FREE, the kernel may take it', \\\n";
  s += "     " + f + " using 1:5 with lines lw 1 dt 1 lc rgb '#9467bd' title 'AnonHugePages: in 2 MiB pages', \\\n";
  s += "     " + f + " using 1:6 with lines lw 2 dt 2 lc rgb '#d62728' title 'active: live blocks and spans', \\\n";
  s += "     " + f + " using 1:7 with lines lw 2 dt 2 lc rgb '#ff7f0e' title 'retained: free, resident, not yet given back', \\\n";
  s += "     " + f + " using 1:8 with lines lw 2 dt 2 lc rgb '#17becf' title 'lazy: given back with MADV\\_FREE', \\\n";
  s += "     " + f + " using 1:9 with lines lw 1 dt 2 lc rgb '#8c564b' title 'cached: free objects in threads'' caches (part of active)'\n";
  return s;
}

int run_timeline(const TimelineRequest& request, const std::vector<std::string>& program,
                 int (*exec_program)(const std::vector<std::string>& program)) {
  std::ofstream tsv(request.tsv_path, std::ios::trunc);
  if (!tsv) {
    std::cerr << kName << ": cannot write " << request.tsv_path << ": " << std::strerror(errno) << '\n';
    return kExitUsage;
  }
  // The page: a memfd the child inherits (not close-on-exec) and names in
  // LAZYMALLOC_TIMELINE_FD; only the child's pid may publish on it.
  const int fd = int(::syscall(SYS_memfd_create, "lazymalloc-timeline", 0));
  void* map = MAP_FAILED;
  if (fd >= 0 && ::ftruncate(fd, off_t(TimelinePage::kSize)) == 0)
    map = ::mmap(nullptr, TimelinePage::kSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    std::cerr << kName << ": cannot create the timeline page: " << std::strerror(errno) << '\n';
    return kExitUsage;
  }
  auto* page = new (map) TimelinePage{};
  page->magic = TimelinePage::kMagic;
  const std::string fd_text = std::to_string(fd);
  if (::setenv("LAZYMALLOC_TIMELINE_FD", fd_text.c_str(), 1) != 0) {
    std::cerr << kName << ": setenv: " << std::strerror(errno) << '\n';
    return kExitUsage;
  }
  std::cout.flush();
  std::cerr.flush();
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::cerr << kName << ": fork: " << std::strerror(errno) << '\n';
    return kExitUsage;
  }
  if (pid == 0) {
    page->pid.store(::getpid(), std::memory_order_release);
    ::_exit(exec_program(program));
  }
  ::unsetenv("LAZYMALLOC_TIMELINE_FD");
  ::close(fd);
  // Like system(): the terminal's interrupt reaches the program; the
  // wrapper stays to write what it sampled.
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGQUIT, SIG_IGN);
  const int pidfd = int(::syscall(SYS_pidfd_open, pid, 0));

  tsv << kTimelineColumns << '\n';
  while (!wait_exit(pidfd, pid, request.interval_ms)) {
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto mem = read_smaps(pid);
    if (!mem) continue;  // exiting, or not readable: no row
    const auto gauges = read_page(page);
    char tbuf[32];
    std::snprintf(tbuf, sizeof tbuf, "%.3f", t);
    tsv << tbuf << '\t' << mib(double(mem->rss_kib) * 1024) << '\t' << mib(double(mem->lazyfree_kib) * 1024) << '\t'
        << mib(double(mem->held_kib()) * 1024) << '\t' << mib(double(mem->anonhuge_kib) * 1024);
    if (gauges) {
      tsv << '\t' << mib(double(gauges->active)) << '\t' << mib(double(gauges->retained)) << '\t'
          << mib(double(gauges->lazy)) << '\t' << mib(double(gauges->cached)) << '\t' << gauges->publishes << '\n';
    } else {
      tsv << "\t-\t-\t-\t-\t0\n";
    }
    tsv.flush();
    page->samples.fetch_add(1, std::memory_order_release);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (pidfd >= 0) ::close(pidfd);
  tsv.close();
  int rc = 0;
  if (!tsv) {
    std::cerr << kName << ": writing " << request.tsv_path << " failed\n";
    rc = kExitUsage;
  }
  if (!request.svg_path.empty()) {
    const std::string err = run_gnuplot(timeline_script(request.tsv_path, request.svg_path, shell_words(program)));
    if (!err.empty()) std::cerr << kName << ": no plot: " << err << " (the samples are in " << request.tsv_path << ")\n";
  }
  ::munmap(map, TimelinePage::kSize);
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    ::signal(sig, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
    ::raise(sig);
    return 128 + sig;
  }
  return rc ? rc : WEXITSTATUS(status);
}

}  // namespace lazymalloc_run
