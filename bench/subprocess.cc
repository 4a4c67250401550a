#include "subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

extern char** environ;

namespace lazybench {

bool SpawnResult::exited() const { return started && !timed_out && WIFEXITED(status); }
int SpawnResult::exit_code() const { return exited() ? WEXITSTATUS(status) : -1; }
int SpawnResult::term_signal() const { return started && !timed_out && WIFSIGNALED(status) ? WTERMSIG(status) : 0; }

std::string SpawnResult::status_text() const {
  if (!started) return start_error;
  if (timed_out) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "timeout after %.0f s", timeout_s);
    return buf;
  }
  if (exited()) return exit_code() == 0 ? "ok" : "exit " + std::to_string(exit_code());
  if (const int sig = term_signal()) {
    const char* abbrev = sigabbrev_np(sig);
    return abbrev ? std::string("killed by SIG") + abbrev : "killed by signal " + std::to_string(sig);
  }
  return "status " + std::to_string(status);
}

std::string SpawnResult::describe() const {
  return status_text() + "\n--- stdout ---\n" + out + "\n--- stderr ---\n" + err;
}

std::vector<std::string> child_environment(const EnvChanges& changes) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    if (changes.count(entry.substr(0, entry.find('='))) == 0) env.push_back(entry);
  }
  for (const auto& [k, v] : changes)
    if (v) env.push_back(k + "=" + *v);
  return env;
}

namespace {

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Reads what is there from fd into `to`; closes fd at end of file or error.
void drain(int& fd, std::string& to) {
  char buf[65536];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  if (n > 0) to.append(buf, static_cast<std::size_t>(n));
  else if (n == 0 || (errno != EINTR && errno != EAGAIN)) close_fd(fd);
}

}  // namespace

SpawnResult spawn(const std::vector<std::string>& argv, const SpawnOptions& options) {
  SpawnResult r;
  r.timeout_s = options.timeout_s;
  if (argv.empty()) {
    r.start_error = "spawn: no program";
    return r;
  }
  const std::vector<std::string> env = child_environment(options.env);
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);

  // Our ends of the pipes: [0] stdin (we write), [1] stdout, [2] stderr.
  int ours[3] = {-1, -1, -1}, theirs[3] = {-1, -1, -1};
  auto make_pipe = [&](int i) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return false;
    ours[i] = i == 0 ? fds[1] : fds[0];
    theirs[i] = i == 0 ? fds[0] : fds[1];
    return true;
  };
  const bool capture_err = options.stderr_to == SpawnOptions::Stderr::kCapture;
  if ((options.stdin_text && !make_pipe(0)) || !make_pipe(1) || (capture_err && !make_pipe(2))) {
    r.start_error = std::string("pipe: ") + std::strerror(errno);
    for (int i = 0; i < 3; ++i) {
      close_fd(ours[i]);
      close_fd(theirs[i]);
    }
    return r;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (options.stdin_text) posix_spawn_file_actions_adddup2(&fa, theirs[0], 0);
  else posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, theirs[1], 1);
  if (capture_err) posix_spawn_file_actions_adddup2(&fa, theirs[2], 2);
  else if (options.stderr_to == SpawnOptions::Stderr::kFile)
    posix_spawn_file_actions_addopen(&fa, 2, options.stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  // The child inherits the affinity of the thread that spawns it: this
  // thread takes the child's CPUs for the spawn and its own back after.
  cpu_set_t own;
  CPU_ZERO(&own);
  const bool pin = !options.cpus.empty();
  int rc = 0;
  const char* what = "spawn ";
  if (pin) {
    what = "sched_setaffinity for ";
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(0, sizeof own, &own) != 0) rc = errno;
    // Only CPUs this thread may use (the kernel's answer to others varies).
    for (const int c : options.cpus)
      if (c < 0 || c >= CPU_SETSIZE || !CPU_ISSET(c, &own)) rc = EINVAL;
      else CPU_SET(c, &set);
    if (rc == 0 && ::sched_setaffinity(0, sizeof set, &set) != 0) rc = errno;
  }
  if (rc == 0) {
    what = "spawn ";
    rc = ::posix_spawnp(&pid, cargv[0], &fa, nullptr, cargv.data(), cenv.data());
    if (pin) ::sched_setaffinity(0, sizeof own, &own);
  } else {
    pid = -1;
  }
  posix_spawn_file_actions_destroy(&fa);
  for (int& fd : theirs) close_fd(fd);
  if (rc != 0) {
    for (int& fd : ours) close_fd(fd);
    r.start_error = what + argv[0] + ": " + std::strerror(rc);
    return r;
  }
  r.started = true;

  // stdin: written as the child reads it, never blocking us.
  std::size_t written = 0;
  if (ours[0] >= 0) {
    if (options.stdin_text->empty()) {
      close_fd(ours[0]);
    } else {
      ::signal(SIGPIPE, SIG_IGN);
      ::fcntl(ours[0], F_SETFL, O_NONBLOCK);
    }
  }
  // A pidfd tells when the child has exited, so that the timeout covers the
  // wait too; without one (old kernels) the wait after the output ends blocks.
  // (The system call, because glibc 2.36's <sys/pidfd.h> lacks extern "C".)
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  bool reaped = false;
  while (true) {
    const bool pipes_open = ours[0] >= 0 || ours[1] >= 0 || ours[2] >= 0;
    if (!pipes_open && (reaped || pidfd < 0)) break;
    int wait_ms = -1;
    if (options.timeout_s > 0) {
      const double left = options.timeout_s - elapsed();
      if (left <= 0) {
        r.timed_out = true;
        if (!reaped) ::kill(pid, SIGKILL);
        break;
      }
      wait_ms = static_cast<int>(std::ceil(left * 1000));
    }
    pollfd fds[4] = {{ours[0], POLLOUT, 0}, {ours[1], POLLIN, 0}, {ours[2], POLLIN, 0}, {reaped ? -1 : pidfd, POLLIN, 0}};
    if (::poll(fds, 4, wait_ms) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents) {
      const std::string& text = *options.stdin_text;
      const ssize_t n = ::write(ours[0], text.data() + written, text.size() - written);
      if (n > 0) written += static_cast<std::size_t>(n);
      if (written == text.size() || (n < 0 && errno != EINTR && errno != EAGAIN)) close_fd(ours[0]);
    }
    if (fds[1].revents) drain(ours[1], r.out);
    if (fds[2].revents) drain(ours[2], r.err);
    if (fds[3].revents) {
      const pid_t w = ::waitpid(pid, &r.status, WNOHANG);
      if (w == pid) reaped = true;
      else if (w < 0 && errno != EINTR) close_fd(pidfd);  // nothing to wait for: stop polling it
    }
  }
  for (int& fd : ours) close_fd(fd);
  close_fd(pidfd);
  if (!reaped) {
    while (::waitpid(pid, &r.status, 0) < 0 && errno == EINTR) {
    }
  }
  r.elapsed_s = elapsed();
  return r;
}

}  // namespace lazybench
