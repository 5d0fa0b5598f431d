#include "lockstep/launch/worker_process.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "lockstep/util/error.h"

namespace lockstep::launch {

namespace {

void makePipe(int fds[2]) {
  LOCKSTEP_ENFORCE(::pipe2(fds, O_CLOEXEC) == 0, IoError,
                   "cannot create a pipe for a worker: ", std::strerror(errno));
}

void writeStr(int fd, const char* s) {
  ssize_t r = ::write(fd, s, std::strlen(s));
  (void)r;
}

}  // namespace

std::string resolveProgram(const std::string& program, const std::string& path_env) {
  LOCKSTEP_ENFORCE(!program.empty(), ValueError, "missing PROGRAM");
  if (program.find('/') != std::string::npos) {
    LOCKSTEP_ENFORCE(::access(program.c_str(), X_OK) == 0, ValueError, "PROGRAM '", program,
                     "' is not an executable file: ", std::strerror(errno));
    return program;
  }
  size_t pos = 0;
  while (pos <= path_env.size()) {
    size_t colon = path_env.find(':', pos);
    std::string dir = path_env.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string::npos) break;
    pos = colon + 1;
  }
  throw ValueError("PROGRAM '" + program + "' was not found on PATH; give its path (./" + program + ")");
}

WorkerProcess::WorkerProcess(const WorkerProcessOptions& options) {
  // Everything the child needs is prepared before fork: the agent has threads (the store
  // server), so the child may only make async-signal-safe calls until exec.
  std::vector<char*> argv;
  for (const auto& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : options.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  if (options.stdout_sink) {
    out_sink_ = std::make_unique<OutputSink>(*options.stdout_sink);
    makePipe(out);
  }
  if (options.stderr_sink) {
    err_sink_ = std::make_unique<OutputSink>(*options.stderr_sink);
    makePipe(err);
  }
  const pid_t parent = ::getpid();
  const char* path = options.path.c_str();
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    for (int fd : {out[0], out[1], err[0], err[1]})
      if (fd >= 0) ::close(fd);
    throw IoError(std::string("cannot fork a worker: ") + std::strerror(e));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the agent died before prctl took effect
    if (out[1] >= 0) ::dup2(out[1], STDOUT_FILENO);
    if (err[1] >= 0) ::dup2(err[1], STDERR_FILENO);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD, SIGQUIT}) ::sigaction(s, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(path, argv.data(), envp.data());
    int e = errno;
    writeStr(STDERR_FILENO, "lockstep run: cannot execute '");
    writeStr(STDERR_FILENO, path);
    writeStr(STDERR_FILENO, "': ");
    writeStr(STDERR_FILENO, strerror(e));
    writeStr(STDERR_FILENO, "\n");
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so signalGroup works even before the child runs
  pid_ = pid;
  if (out[1] >= 0) ::close(out[1]);
  if (err[1] >= 0) ::close(err[1]);
  out_fd_ = out[0];
  err_fd_ = err[0];
  for (int fd : {out_fd_, err_fd_})
    if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

WorkerProcess::~WorkerProcess() {
  if (!exited_ && pid_ > 0) {
    signalGroup(SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  closePipes();
}

void WorkerProcess::drain(int fd) {
  if (fd < 0 || (fd != out_fd_ && fd != err_fd_)) return;
  OutputSink* sink = fd == out_fd_ ? out_sink_.get() : err_sink_.get();
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      sink->write(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    sink->flush();  // EOF (or an error): this stream is done
    ::close(fd);
    (fd == out_fd_ ? out_fd_ : err_fd_) = -1;
    return;
  }
}

void WorkerProcess::drainAll() {
  drain(out_fd_);
  drain(err_fd_);
}

void WorkerProcess::closePipes() {
  drainAll();
  for (int* fd : {&out_fd_, &err_fd_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
  if (out_sink_) out_sink_->flush();
  if (err_sink_) err_sink_->flush();
}

bool WorkerProcess::poll() {
  if (exited_) return true;
  int status = 0;
  pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r != pid_) return false;
  exited_ = true;
  if (WIFSIGNALED(status)) signal_ = WTERMSIG(status);
  if (WIFEXITED(status)) exit_code_ = WEXITSTATUS(status);
  return true;
}

void WorkerProcess::signalGroup(int sig) {
  if (pid_ > 0) ::killpg(pid_, sig);
}

std::string WorkerProcess::stderrTail() const { return err_sink_ ? err_sink_->tail() : ""; }

}  // namespace lockstep::launch
