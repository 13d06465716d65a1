#pragma once
// txmq bench's chaos and pressure sections: how well txmq keeps serving a fixed offered rate while
// things go wrong (a database restart, killed connections and consumers, held snapshots), and how
// fast it recovers. Method and figures: docs/benchmarks.md, "Chaos and pressure".

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace txmq::bench {

struct ChaosOptions {
  std::string dsn;
  // The embedded server's folder when the bench runs on it: the restart cells stop and start
  // that server by its pid file. Empty: those cells are skipped, saying why.
  std::string local_home;
  bool chaos = false;     // the chaos cells
  bool pressure = false;  // the pressure cells
  // Only these cells (ids such as "pressure.held_snapshot") of the sections asked for; empty: all.
  std::vector<std::string> cells;
  // The short form: two cells (database SIGKILL restart, held snapshot), under 3 minutes in all,
  // whichever of chaos and pressure is asked for.
  bool quick = false;
  bool json = false;  // samples and summary go to stderr; the document is returned
};

// Runs the cells one after another on a fresh topic each, printing every cell's 5 s samples and
// then one summary row per cell with its targets. Returns all of it as JSON. Figures are
// reported, not asserted.
nlohmann::json run_chaos_cells(const ChaosOptions& options);

// The ids of every cell of the full set ("chaos.restart_term", ...), for --only.
std::vector<std::string> chaos_cell_ids();

}  // namespace txmq::bench
