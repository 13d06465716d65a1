#pragma once
// CPU time taken during each timed run: the bench's own process, processes named on the command
// line (the servers' mariadbd, by pid) and the whole machine (/proc/stat), so that a figure on a
// small machine says who had the cores. On unless the bench is asked to leave it out (--no-cpu).

#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace txmq::bench {

// CPU seconds by name: "bench", the watched processes' names, "machine" (busy time of all CPUs)
// and "steal" (time a virtual machine's CPUs were ready but the host ran others); and "load",
// the part of "bench" that the row's own timed threads took (run_threads): for a row that drives
// txmq serve in the bench's process, "bench" less "load" is what the server took. Names that
// start with '#' are counts of the database server's (transactions, InnoDB fsyncs, statements), not
// seconds.
using CpuSeconds = std::map<std::string, double>;

class CpuWatch {
 public:
  // Watches process `pid` under `name` (the bench itself is always watched, as "bench").
  void watch(std::string name, int pid) { processes_.emplace_back(std::move(name), pid); }
  // Counters of the database server, read with the CPU figures ('#' names).
  void count(std::function<CpuSeconds()> counters) { counters_ = std::move(counters); }

  // CPU seconds used so far by each watched process and by the machine. A process that is gone
  // is left out.
  CpuSeconds now() const {
    CpuSeconds out;
    if (auto s = process_seconds("/proc/self/stat")) out["bench"] = *s;
    for (const auto& [name, pid] : processes_) {
      if (auto s = process_seconds("/proc/" + std::to_string(pid) + "/stat")) out[name] = *s;
    }
    if (auto m = machine_seconds()) {
      out["machine"] = m->first;
      out["steal"] = m->second;
    }
    if (counters_) out.merge(counters_());
    return out;
  }

  static CpuSeconds difference(const CpuSeconds& before, const CpuSeconds& after) {
    CpuSeconds out;
    for (const auto& [name, s] : after) {
      auto it = before.find(name);
      if (it == before.end()) continue;
      // A count that went down: the server restarted in between (a chaos cell).
      if (name.starts_with('#') && s < it->second) continue;
      out[name] = s - it->second;
    }
    return out;
  }

 private:
  static double tick() { return 1.0 / static_cast<double>(sysconf(_SC_CLK_TCK)); }

  // utime + stime (fields 14 and 15 of /proc/PID/stat, counted after the command's parenthesis,
  // which may itself hold spaces and parentheses).
  static std::optional<double> process_seconds(const std::string& path) {
    std::ifstream in(path);
    std::string text;
    if (!std::getline(in, text)) return std::nullopt;
    const std::size_t close = text.rfind(')');
    if (close == std::string::npos) return std::nullopt;
    std::istringstream fields(text.substr(close + 1));
    std::string field;
    unsigned long long utime = 0;
    unsigned long long stime = 0;
    // After ")": state(3) ppid(4) pgrp(5) session(6) tty(7) tpgid(8) flags(9) minflt(10)
    // cminflt(11) majflt(12) cmajflt(13) utime(14) stime(15).
    for (int i = 3; i <= 13; ++i) fields >> field;
    if (!(fields >> utime >> stime)) return std::nullopt;
    return static_cast<double>(utime + stime) * tick();
  }

  // All CPUs' busy time (the "cpu" line of /proc/stat less idle, iowait and steal; guest time is
  // already inside user and nice), and the time the hypervisor gave to others (steal).
  static std::optional<std::pair<double, double>> machine_seconds() {
    std::ifstream in("/proc/stat");
    std::string label;
    unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0,
                       softirq = 0, steal = 0;
    if (!(in >> label >> user >> nice >> system >> idle >> iowait >> irq >> softirq) ||
        label != "cpu") {
      return std::nullopt;
    }
    in >> steal;  // absent on very old kernels
    return std::pair{static_cast<double>(user + nice + system + irq + softirq) * tick(),
                     static_cast<double>(steal) * tick()};
  }

  std::vector<std::pair<std::string, int>> processes_;
  std::function<CpuSeconds()> counters_;
};

// The bench's watch, set by run_bench when asked for; null: no CPU figures.
inline const CpuWatch* g_cpu_watch = nullptr;

inline CpuSeconds cpu_now() { return g_cpu_watch ? g_cpu_watch->now() : CpuSeconds{}; }

// The calling thread's CPU seconds so far (CLOCK_THREAD_CPUTIME_ID).
inline double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

}  // namespace txmq::bench
