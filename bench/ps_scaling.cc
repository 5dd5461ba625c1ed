// Benchmark: the data plane at GPU speed. Runs real `psformer train` jobs of the base model's size
// (configs/base.pbtxt, 63.1M parameters) with emulated GPU workers (cluster.backend EMULATED) and
// reports, per job, how much of a step the parameter servers and the wire add to the emulated
// compute; beside them, this machine's memcpy rate and one-thread Adam rate, the yardsticks.
//   build/bench/ps_scaling [--binary build/psformer] [--steps K] [--workers 1,2,4] [--servers 1,2]
//                          [--step-ms 1000,250] [--curve 0,1] [--overlap 1,0] [--shm 1,0]
// --overlap 1 pushes each layer during backward (cluster.overlap), 0 the whole gradient after it;
// --shm 1 runs same-host jobs on ipc:// headers with payloads through shared memory
// (cluster.same_host_shm), 0 over loopback TCP. Today's path before both: --overlap 0 --shm 0.
// Run from the source directory. Results go to bench/RESULTS.md ("Data plane scaling").
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "common/adam.h"
#include "common/config_loader.h"
#include "common/param_layout.h"

namespace psformer {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::vector<int> Ints(const std::string& list) {
  std::vector<int> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::atoi(item.c_str()));
  return out;
}

struct Args {
  std::string binary = "build/psformer";
  int steps = 5;  // per job; the first and the last are dropped (start-up; the last has no pull)
  std::vector<int> workers = {1, 2, 4}, servers = {1, 2}, step_ms = {1000, 250}, curve = {0, 1}, overlap = {1, 0},
                   shm = {1, 0};
};

bool Parse(int argc, char** argv, Args* a) {
  // The settings that take a comma-separated list, each run in turn.
  const std::map<std::string, std::vector<int>*> lists = {{"--workers", &a->workers}, {"--servers", &a->servers},
                                                          {"--step-ms", &a->step_ms}, {"--curve", &a->curve},
                                                          {"--overlap", &a->overlap}, {"--shm", &a->shm}};
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "ps_scaling: %s needs a value\n", k.c_str());
      return false;
    }
    const std::string v = argv[i + 1];
    if (k == "--binary") {
      a->binary = v;
    } else if (k == "--steps") {
      a->steps = std::atoi(v.c_str());
    } else if (const auto list = lists.find(k); list != lists.end()) {
      *list->second = Ints(v);
    } else {
      std::fprintf(stderr, "ps_scaling: unknown option %s\n", k.c_str());
      return false;
    }
  }
  if (a->steps < 3) {
    std::fprintf(stderr, "ps_scaling: --steps must be >= 3 (the first and the last step are dropped)\n");
    return false;
  }
  return true;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// memcpy of n floats, median of 5, in GB/s of bytes copied.
double MemcpyRate(uint64_t n) {
  std::vector<float> a(n, 1.0f), b(n, 0.0f);
  std::vector<double> t;
  for (int i = 0; i < 5; ++i) {
    const auto start = Clock::now();
    std::memcpy(b.data(), a.data(), n * sizeof(float));
    t.push_back(Since(start));
  }
  return n * sizeof(float) / Median(t) / 1e9;
}

// One-thread Adam over n elements, median of 3, in elements per second.
double AdamRate(uint64_t n) {
  std::vector<float> g(n, 1e-3f), p(n, 0.1f), m(n, 0.0f), v(n, 0.0f);
  AdamHyper hyper;
  std::vector<double> t;
  for (int i = 1; i <= 3; ++i) {
    const auto start = Clock::now();
    AdamUpdate(hyper, i, 1e-4, n, g.data(), p.data(), m.data(), v.data());
    t.push_back(Since(start));
  }
  return n / Median(t);
}

struct Job {
  int workers, servers, step_ms;
  bool curve, overlap, shm;
};

struct Result {
  bool ok = false;
  double step_s = 0;  // median over steps 2..K-1 of worker 0's compute + push + wait + pull
};

double Field(const std::string& line, const std::string& key) {
  const std::regex re("\"" + key + "\": *([-0-9.eE+]+)");
  std::smatch m;
  return std::regex_search(line, m, re) ? std::atof(m[1].str().c_str()) : -1;
}

Result RunJob(const Args& a, const Job& job, const fs::path& work) {
  std::ostringstream name;  // (a string built with operator+ here trips GCC 12's -Wrestrict)
  name << "w" << job.workers << "s" << job.servers << "e" << job.step_ms << (job.curve ? "c" : "p")
       << (job.overlap ? "o" : "w") << (job.shm ? "m" : "t");
  const fs::path run = work / name.str();
  std::ostringstream cmd;
  cmd << a.binary << " train --config configs/base.pbtxt --set cluster.backend=EMULATED"
      << " --set cluster.emulated_step_ms=" << job.step_ms << " --set cluster.workers=" << job.workers
      << " --set cluster.servers=" << job.servers << " --set cluster.authenticate=" << (job.curve ? "true" : "false")
      << " --set cluster.overlap=" << (job.overlap ? "true" : "false")
      << " --set cluster.same_host_shm=" << (job.shm ? "true" : "false") << " --set training.max_steps=" << a.steps
      << " --set training.valid_every=0 --set logging.every_steps=1 --set checkpoint.every_steps=0"
      << " --set checkpoint.every_minutes=0 --run-dir " << run.string() << " > " << run.string() << ".out 2>&1";
  Result r;
  if (std::system(cmd.str().c_str()) != 0) {
    std::fprintf(stderr, "ps_scaling: job failed: %s (see %s.out)\n", cmd.str().c_str(), run.string().c_str());
    return r;
  }
  std::ifstream metrics(run / "metrics.jsonl");
  std::vector<double> steps;
  for (std::string line; std::getline(metrics, line);) {
    const double step = Field(line, "step");
    if (line.find("\"loss\"") == std::string::npos || step < 2 || step >= a.steps) continue;
    steps.push_back(Field(line, "compute_s") + Field(line, "push_s") + Field(line, "wait_s") + Field(line, "pull_s"));
  }
  r.ok = !steps.empty();
  r.step_s = Median(steps);
  fs::remove_all(run);  // model.bin alone is 252 MB
  return r;
}

int Run(const Args& a) {
  auto config = LoadConfigFile("configs/base.pbtxt");
  if (!config.ok()) {
    std::fprintf(stderr, "ps_scaling: %s (run from the source directory)\n", config.status().message().c_str());
    return 1;
  }
  FillDefaults(&*config);
  const uint64_t n = ParamLayout(config->model(), config->model().vocab_size()).total_size();
  const double bytes = n * sizeof(float);
  std::printf("base model: %llu parameters, %.1f MB as fp32\n", static_cast<unsigned long long>(n), bytes / 1e6);
  std::printf("memcpy: %.2f GB/s (bytes copied / time)\n", MemcpyRate(n));
  const double adam = AdamRate(n);
  std::printf(
      "Adam, one thread: %.0f M elements/s (%.2f GB/s of memory traffic at 28 B/element), %.0f ms for the "
      "model\n",
      adam / 1e6, adam * 28 / 1e9, n / adam * 1e3);
  const fs::path work = fs::temp_directory_path() / ("ps_scaling." + std::to_string(getpid()));
  fs::create_directories(work);
  std::printf("\n| path | W | S | emulated | median step | exposed comm | efficiency | GB/s moved |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  std::vector<Job> jobs;
  for (int shm : a.shm) {
    for (int overlap : a.overlap) {
      for (int curve : a.curve) {
        for (int step_ms : a.step_ms) {
          for (int servers : a.servers) {
            for (int workers : a.workers) {
              jobs.push_back(Job{workers, servers, step_ms, curve != 0, overlap != 0, shm != 0});
            }
          }
        }
      }
    }
  }
  int failed = 0;
  for (const Job& job : jobs) {
    const Result r = RunJob(a, job, work);
    const std::string path = std::string(job.overlap ? "overlap" : "whole") + (job.shm ? ", shm" : ", TCP") +
                             (job.curve ? ", CURVE" : ", plain");
    if (!r.ok) {
      ++failed;
      std::printf("| %s | %d | %d | %d ms | failed | | | |\n", path.c_str(), job.workers, job.servers, job.step_ms);
      continue;
    }
    const double emulated = job.step_ms / 1e3;
    // Every worker pushes its gradient and pulls the parameters once a step, fp32.
    const double moved = 2.0 * bytes * job.workers;
    std::printf("| %s | %d | %d | %d ms | %.0f ms | %.0f ms | %.2f | %.2f |\n", path.c_str(), job.workers, job.servers,
                job.step_ms, r.step_s * 1e3, (r.step_s - emulated) * 1e3, emulated / r.step_s, moved / r.step_s / 1e9);
    std::fflush(stdout);
  }
  fs::remove_all(work);
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace psformer

int main(int argc, char** argv) {
  psformer::Args args;
  if (!psformer::Parse(argc, argv, &args)) return 2;
  return psformer::Run(args);
}
