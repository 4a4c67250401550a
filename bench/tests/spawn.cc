#include "spawn.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

extern char** environ;

namespace lazybench::test {

bool Spawned::exited() const { return started && !timed_out && WIFEXITED(status); }
int Spawned::exit_code() const { return exited() ? WEXITSTATUS(status) : -1; }
int Spawned::term_signal() const { return started && !timed_out && WIFSIGNALED(status) ? WTERMSIG(status) : 0; }

std::string Spawned::describe() const {
  std::string s = !started ? "not started" : timed_out ? "timed out" : exited() ? "exit " + std::to_string(exit_code())
                                                                                 : "signal " + std::to_string(term_signal());
  return s + "\n--- stdout ---\n" + out + "\n--- stderr ---\n" + err;
}

Spawned spawn(const std::vector<std::string>& argv, const SpawnOptions& options) {
  Spawned r;
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    if (options.env.count(name) == 0) env.push_back(entry);
  }
  for (const auto& [k, v] : options.env)
    if (v) env.push_back(k + "=" + *v);
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);

  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) || ::pipe2(out, O_CLOEXEC) || ::pipe2(err, O_CLOEXEC)) return r;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  pid_t pid = -1;
  const auto start = std::chrono::steady_clock::now();
  const int rc = ::posix_spawnp(&pid, cargv[0], &fa, nullptr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&fa);
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  if (rc != 0) {
    ::close(in[1]);
    ::close(out[0]);
    ::close(err[0]);
    r.err = std::string("posix_spawnp: ") + std::strerror(rc);
    return r;
  }
  r.started = true;
  // Feed stdin (small inputs only) and close it.
  if (!options.stdin_text.empty()) {
    ::signal(SIGPIPE, SIG_IGN);
    [[maybe_unused]] const ssize_t n = ::write(in[1], options.stdin_text.data(), options.stdin_text.size());
  }
  ::close(in[1]);
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    const double left = options.timeout_s - elapsed();
    if (left <= 0) {
      r.timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    const int pr = ::poll(fds, 2, static_cast<int>(left * 1000) + 1);
    if (pr < 0 && errno == EINTR) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        (i == 0 ? r.out : r.err).append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) ::close(f.fd);
  while (::waitpid(pid, &r.status, 0) < 0 && errno == EINTR) {
  }
  r.elapsed_s = elapsed();
  return r;
}

std::string arg_value(int argc, char** argv, const std::string& name) {
  const std::string flag = "--" + name;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == flag && i + 1 < argc) return argv[i + 1];
    if (a.rfind(flag + "=", 0) == 0) return a.substr(flag.size() + 1);
  }
  return {};
}

}  // namespace lazybench::test
