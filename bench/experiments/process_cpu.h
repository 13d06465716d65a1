#pragma once
// CPU seconds of this process and of another one (by pid), for the experiments' per-row costs.
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace txmq::experiments {

inline double self_cpu() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// utime + stime of a process, in seconds (0 when it cannot be read).
inline double process_cpu(int pid) {
  if (pid <= 0) return 0;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(in, text)) return 0;
  std::size_t at = text.rfind(')') + 2;
  // Fields after the command: state is field 3; utime and stime are fields 14 and 15.
  for (int field = 3; field < 14; ++field) at = text.find(' ', at) + 1;
  const double utime = std::strtod(text.c_str() + at, nullptr);
  at = text.find(' ', at) + 1;
  const double stime = std::strtod(text.c_str() + at, nullptr);
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace txmq::experiments
