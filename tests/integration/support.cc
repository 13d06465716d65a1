#include "support.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mysql.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "db/dsn.h"
#include "txmq/local.h"

extern char** environ;

namespace txmq::test {

namespace {

// TXMQ_TEST_DSN may end so (CTest's shared/ run: one environment variable per test), or
// TXMQ_TEST_STORAGE=shared be set: the suite's topics go to shared storage where they can.
constexpr std::string_view kSharedSuffix = "#storage=shared";

bool shared_storage() {
  const char* storage = std::getenv("TXMQ_TEST_STORAGE");
  const char* e = std::getenv("TXMQ_TEST_DSN");
  return (storage != nullptr && std::string_view(storage) == "shared") ||
         (e != nullptr && std::string_view(e).ends_with(kSharedSuffix));
}

}  // namespace

const std::string& dsn() {
  static const std::string value = [] {
    if (const char* e = std::getenv("TXMQ_TEST_DSN"); e != nullptr && *e != '\0') {
      std::string_view given(e);
      if (given.ends_with(kSharedSuffix)) given.remove_suffix(kSharedSuffix.size());
      return std::string(given);
    }
    return LocalServer::ensure_running({});
  }();
  return value;
}

std::unique_ptr<Client> client(const std::string& consumer_name) {
  ClientOptions o;
  o.dsn = dsn();
  o.consumer_name = consumer_name;
  if (shared_storage()) o.topic_tables = TableCreation::kShared;
  return std::make_unique<Client>(o);
}

std::unique_ptr<internal::Connection> admin() {
  return std::make_unique<internal::Connection>(internal::parse_dsn(dsn()));
}

void drop_topic_if_exists(Client& c, const std::string& topic) {
  try {
    c.drop_topic(topic);
  } catch (const Error& e) {
    if (e.code() != Errc::kNotFound) throw;
  }
}

TopicRows topic_rows(const std::string& topic, std::string_view kind) {
  internal::Result r =
      admin()->execute("SELECT storage, sid FROM txmq_topics WHERE name = ?", {topic});
  if (r.rows.empty() || r.rows[0].i64(0) == 0) return {fmt::format("`txmq_{}_{}`", kind, topic), "TRUE"};
  const std::uint64_t sid = r.rows[0].u64(1);
  const bool per_topic = kind == "dd" || kind == "a";
  return {fmt::format("`txmq_sh_{}`", kind),
          per_topic ? fmt::format("sid = {}", sid) : fmt::format("qid = {}", sid << 16)};
}

std::string topic_for_test(const std::string& suffix) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string full = fmt::format("{}_{}{}", info->test_suite_name(), info->name(), suffix);
  std::string name = "t_";
  for (char c : full) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else {
      name += '_';
    }
  }
  // Runs on other servers (TXMQ_TEST_DSN) share the fixture's shard servers and XA resource
  // with the run on the fixture's own: their names differ by a hash of the DSN.
  const char* other = std::getenv("TXMQ_TEST_DSN");
  if (other != nullptr && *other != '\0') full += std::string("@") + other;
  if (name.size() > 40 || (other != nullptr && *other != '\0')) {
    name = fmt::format("{}_{:x}", name.substr(0, 31), std::hash<std::string>{}(full)&0xffffffu);
  }
  drop_topic_if_exists(*client(), name);
  return name;
}

namespace {
std::vector<std::string>& scratch_dirs() {
  static std::vector<std::string> dirs;
  return dirs;
}
void remove_scratch_dirs() {
  for (const std::string& d : scratch_dirs()) {
    std::error_code ignored;
    std::filesystem::remove_all(d, ignored);
  }
}
}  // namespace

std::string scratch_dir() {
  // Removed when the test process exits (each test runs in a process of its own under CTest).
  static const bool registered = [] {
    scratch_dirs();  // constructed before the handler is registered, so destroyed after it runs
    return std::atexit(remove_scratch_dirs) == 0;
  }();
  (void)registered;
  std::string pattern = "/tmp/txmq-test-XXXXXX";
  char* made = mkdtemp(pattern.data());
  if (made == nullptr) throw std::runtime_error("mkdtemp failed");
  scratch_dirs().push_back(made);
  return made;
}

namespace {

std::vector<std::string> child_environment(const std::map<std::string, std::string>& env) {
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) merged[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  merged["TXMQ_DSN"] = dsn();
  for (auto& [k, v] : env) merged[k] = v;
  std::vector<std::string> out;
  for (auto& [k, v] : merged) {
    if (k == "TXMQ_DSN" && v.empty()) continue;  // an explicit "" removes it
    out.push_back(k + "=" + v);
  }
  return out;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> p;
  for (auto& s : strings) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

int decode_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

ProcessResult run_txmq(const std::vector<std::string>& args, const std::string& input,
                       const std::map<std::string, std::string>& env,
                       std::chrono::seconds timeout) {
  return run_program(TXMQ_BINARY, args, input, env, timeout);
}

ProcessResult run_program(const std::string& binary, const std::vector<std::string>& args,
                          const std::string& input, const std::map<std::string, std::string>& env,
                          std::chrono::seconds timeout) {
  std::vector<std::string> argv_s = {binary};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<std::string> env_s = child_environment(env);
  auto argv = pointers(argv_s);
  auto envp = pointers(env_s);

  int in_pipe[2], out_pipe[2], err_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0 ||
      pipe2(err_pipe, O_CLOEXEC) != 0) {
    throw std::runtime_error("pipe failed");
  }
  auto start = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    dup2(in_pipe[0], 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(in_pipe[0]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  fcntl(in_pipe[1], F_SETFL, O_NONBLOCK);
  ProcessResult result;
  std::size_t written = 0;
  int in_fd = in_pipe[1];
  if (input.empty()) {
    close(in_fd);
    in_fd = -1;
  }
  bool out_open = true, err_open = true;
  auto deadline = start + timeout;
  while (out_open || err_open) {
    std::vector<pollfd> fds;
    if (out_open) fds.push_back({out_pipe[0], POLLIN, 0});
    if (err_open) fds.push_back({err_pipe[0], POLLIN, 0});
    if (in_fd >= 0) fds.push_back({in_fd, POLLOUT, 0});
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      ADD_FAILURE() << binary << " " << fmt::format("{}", fmt::join(args, " ")) << " timed out";
      break;
    }
    poll(fds.data(), fds.size(), 100);
    for (const pollfd& p : fds) {
      if (p.revents == 0) continue;
      if (p.fd == in_fd) {
        ssize_t n = write(in_fd, input.data() + written, input.size() - written);
        if (n > 0) written += static_cast<std::size_t>(n);
        if (n < 0 && errno != EAGAIN) written = input.size();
        if (written >= input.size()) {
          close(in_fd);
          in_fd = -1;
        }
        continue;
      }
      char buf[65536];
      ssize_t n = read(p.fd, buf, sizeof(buf));
      std::string& sink = p.fd == out_pipe[0] ? result.out : result.err;
      if (n > 0) {
        sink.append(buf, static_cast<std::size_t>(n));
      } else {
        (p.fd == out_pipe[0] ? out_open : err_open) = false;
      }
    }
  }
  if (in_fd >= 0) close(in_fd);
  close(out_pipe[0]);
  close(err_pipe[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code = decode_status(status);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

Background start_txmq(const std::vector<std::string>& args) {
  return start_process(TXMQ_BINARY, args);
}

Background start_process(const std::string& binary, const std::vector<std::string>& args) {
  std::string dir = scratch_dir();
  Background b;
  b.out_path = dir + "/out";
  b.err_path = dir + "/err";
  std::vector<std::string> argv_s = {binary};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<std::string> env_s = child_environment({});
  auto argv = pointers(argv_s);
  auto envp = pointers(env_s);
  b.pid = fork();
  if (b.pid == 0) {
    int in = open("/dev/null", O_RDONLY);
    int out = open(b.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int err = open(b.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  return b;
}

int Background::wait() {
  int status = 0;
  waitpid(pid, &status, 0);
  return decode_status(status);
}

std::optional<int> Background::poll() {
  int status = 0;
  if (waitpid(pid, &status, WNOHANG) != pid) return std::nullopt;
  return decode_status(status);
}

std::string Background::err() const {
  std::ifstream in(err_path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Background::out() const {
  std::ifstream in(out_path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

MysqlHandle open_mysql() {
  const internal::Dsn d = internal::parse_dsn(dsn());
  MYSQL* m = mysql_init(nullptr);
  const char* socket = d.socket.empty() ? nullptr : d.socket.c_str();
  if (mysql_real_connect(m, socket != nullptr ? "localhost" : d.host.c_str(), d.user.c_str(),
                         d.password.c_str(), d.database.c_str(), d.port, socket, 0) == nullptr) {
    std::string error = mysql_error(m);
    mysql_close(m);
    throw std::runtime_error("cannot connect: " + error);
  }
  return MysqlHandle(m, &mysql_close);
}

void mysql_run(MYSQL* m, const std::string& sql) {
  if (mysql_real_query(m, sql.data(), sql.size()) != 0) {
    throw std::runtime_error(fmt::format("{}: {}", sql, mysql_error(m)));
  }
  if (MYSQL_RES* res = mysql_store_result(m)) mysql_free_result(res);
}

}  // namespace txmq::test
