// wirebench measures dmlc ps-lite's dense push and pull the way
// `terrace bench wire` measures Terrace's (docs/bench.md, "Wire"), so that
// the two can be run side by side on one machine (.ci/pslite.sh).
//
// One binary plays every role; ps-lite's environment picks it (DMLC_ROLE,
// DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT, DMLC_NUM_SERVER, DMLC_NUM_WORKER).
// The worker pushes a vector of --bytes of float32 (64 MiB) as --keys keys
// (16 of 4 MiB), every request in flight before the first is waited for;
// a server sums each push into the values it stores (a real +=) and
// answers a pull with them. A figure counts the bytes sent plus the bytes
// received per round (push+pull: the vector each way), MB is 10^6 bytes,
// and it is the median of --rounds rounds after one warm-up push+pull.
//
// It is our program, written against ps-lite's public KVWorker/KVServer
// API (Apache-2.0); no ps-lite source is copied here.
#include <dirent.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "ps/ps.h"

namespace {

struct Options {
  size_t bytes = 64u << 20;
  int keys = 16;
  int rounds = 5;
  std::string report;
  // ops names the figures to time, comma-separated (all four by default;
  // one alone, e.g. "push", to profile it).
  std::string ops = "push_pull,push,pull,push_then_pull";
};

enum Op { kPushPull, kPush, kPull, kPushThenPull };

// ParseOps reads --ops; every role checks it before ps-lite starts, so a
// bad name stops the launch at once instead of leaving the others waiting.
std::vector<std::pair<std::string, Op>> ParseOps(const std::string& list) {
  const std::vector<std::pair<std::string, Op>> known = {
      {"push_pull", kPushPull}, {"push", kPush}, {"pull", kPull}, {"push_then_pull", kPushThenPull}};
  std::vector<std::pair<std::string, Op>> ops;
  std::istringstream in(list);
  std::string name;
  while (std::getline(in, name, ',')) {
    auto it = std::find_if(known.begin(), known.end(),
                           [&](const std::pair<std::string, Op>& k) { return k.first == name; });
    if (it == known.end()) {
      fprintf(stderr, "wirebench: --ops: unknown figure %s\n", name.c_str());
      exit(2);
    }
    ops.push_back(*it);
  }
  if (ops.empty()) {
    fprintf(stderr, "wirebench: --ops names no figure\n");
    exit(2);
  }
  return ops;
}

void ParseArgs(int argc, char* argv[], Options* out) {
  Options& o = *out;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        fprintf(stderr, "wirebench: %s needs a value\n", a.c_str());
        exit(2);
      }
      return argv[++i];
    };
    if (a == "--bytes") {
      o.bytes = std::stoull(next());
    } else if (a == "--keys") {
      o.keys = std::stoi(next());
    } else if (a == "--rounds") {
      o.rounds = std::stoi(next());
    } else if (a == "--report") {
      o.report = next();
    } else if (a == "--ops") {
      o.ops = next();
    } else {
      fprintf(stderr, "usage: wirebench [--bytes 67108864] [--keys 16] [--rounds 5] [--report FILE] [--ops push_pull,push,pull,push_then_pull]\n");
      exit(2);
    }
  }
}

Options ParseFlags(int argc, char* argv[]) {
  Options o;
  try {
    ParseArgs(argc, argv, &o);
  } catch (const std::logic_error& e) {  // std::stoi and std::stoull on a bad number
    fprintf(stderr, "wirebench: a flag's number does not parse (%s)\n", e.what());
    exit(2);
  }
  if (o.keys < 1 || o.rounds < 1 || o.bytes % (4 * o.keys) != 0 || o.bytes == 0) {
    fprintf(stderr, "wirebench: --bytes must be a positive multiple of 4*--keys, --keys and --rounds positive\n");
    exit(2);
  }
  ParseOps(o.ops);
  return o;
}

// Server holds one run of float32 per key and sums pushes into it. ps-lite
// calls the handle from one thread (the customer's), so no lock.
class Server {
 public:
  explicit Server(size_t per_key) : per_key_(per_key) {}

  void Handle(const ps::KVMeta& meta, const ps::KVPairs<float>& req, ps::KVServer<float>* srv) {
    CHECK_EQ(req.keys.size(), 1u) << "wirebench sends one key a request";
    ps::SArray<float>& v = store_[req.keys[0]];
    if (v.empty()) {
      v.resize(per_key_, 0);
    }
    if (meta.push) {
      CHECK_EQ(req.vals.size(), per_key_);
      float* dst = v.data();
      const float* src = req.vals.data();
      for (size_t i = 0; i < per_key_; ++i) {
        dst[i] += src[i];
      }
    }
    ps::KVPairs<float> res;
    if (meta.pull) {
      // The reply shares the stored run (zmq sends it without a copy), as
      // Terrace's pinned pull replies do. Nothing pushes to this key again
      // before the worker has read the reply.
      res.keys = req.keys;
      res.vals = v;
    }
    srv->Response(meta, res);
  }

 private:
  size_t per_key_;
  std::unordered_map<ps::Key, ps::SArray<float>> store_;
};

// ThreadsCPUSeconds is a process's processor time, user and system, summed
// over its live threads (the first field of each thread's schedstat, in ns).
double ThreadsCPUSeconds(const std::string& pid) {
  std::string dir = "/proc/" + pid + "/task";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return 0;
  double s = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(dir + "/" + e->d_name + "/schedstat");
    unsigned long long ns = 0;
    if (f >> ns) s += ns / 1e9;
  }
  closedir(d);
  return s;
}

// CPUPids names this process and those in WIREBENCH_PIDS (the scheduler and
// the servers, given by the launcher): their sum is the whole job's
// processor time, like the process-wide figure `terrace bench wire` reads
// (there the cluster lives in one process).
std::vector<std::string> CPUPids() {
  std::vector<std::string> pids = {"self"};
  if (const char* env = getenv("WIREBENCH_PIDS")) {
    std::istringstream in(env);
    std::string p;
    while (in >> p) pids.push_back(p);
  }
  return pids;
}

double ProcessCPU(const std::vector<std::string>& pids) {
  double s = 0;
  for (const auto& p : pids) s += ThreadsCPUSeconds(p);
  return s;
}

const char* OpName(Op op) {
  switch (op) {
    case kPushPull: return "push+pull";
    case kPush: return "push";
    case kPull: return "pull";
    default: return "push, pull";
  }
}

// bytes an operation moves for a vector of nb bytes, counted both ways.
double OpBytes(Op op, size_t nb) { return (op == kPush || op == kPull) ? nb : 2.0 * nb; }

class Worker {
 public:
  explicit Worker(const Options& o) : o_(o), kv_(0, 0) {
    size_t n = o.bytes / 4, per = n / o.keys;
    vals_.resize(n);
    dst_.resize(n);
    for (size_t i = 0; i < n; ++i) vals_[i] = static_cast<float>(i % 7) * 0.125f;
    // Request i carries the vector's i-th slice under a key of server
    // i % S, so consecutive requests go to different servers and every
    // connection is busy at once (ps-lite gives server s the keys
    // [kMaxKey/S*s, kMaxKey/S*(s+1))).
    int servers = ps::NumServers();
    for (int i = 0; i < o.keys; ++i) {
      ps::Key k = ps::kMaxKey / servers * (i % servers) + i / servers;
      keys_.push_back(ps::SArray<ps::Key>(1, k));
      in_.push_back(vals_.segment(i * per, (i + 1) * per));
      out_.push_back(dst_.segment(i * per, (i + 1) * per));
    }
  }

  // Do runs one operation over the whole vector, every request in flight
  // before any is waited for.
  void Do(Op op) {
    std::vector<int> ts;
    for (int i = 0; i < o_.keys; ++i) {
      switch (op) {
        case kPushPull: ts.push_back(kv_.ZPushPull(keys_[i], in_[i], &out_[i])); break;
        case kPush: ts.push_back(kv_.ZPush(keys_[i], in_[i])); break;
        case kPull: ts.push_back(kv_.ZPull(keys_[i], &out_[i])); break;
        case kPushThenPull: ts.push_back(kv_.ZPush(keys_[i], in_[i])); break;
      }
    }
    if (op == kPushThenPull) {
      // The pulls queue behind the pushes on the same connections; a
      // server handles one connection's requests in order, so each pull
      // sees its push.
      for (int i = 0; i < o_.keys; ++i) ts.push_back(kv_.ZPull(keys_[i], &out_[i]));
    }
    for (int t : ts) kv_.Wait(t);
    if (op != kPull) ++pushes_;
  }

  // Check that a pull returns every value summed as often as it was pushed.
  void Verify() {
    Do(kPull);
    for (size_t i = 0; i < dst_.size(); ++i) {
      float want = vals_[i] * pushes_;
      CHECK_EQ(dst_[i], want) << "value " << i << " after " << pushes_ << " pushes";
    }
  }

 private:
  Options o_;
  ps::KVWorker<float> kv_;
  ps::SArray<float> vals_, dst_;
  std::vector<ps::SArray<ps::Key>> keys_;
  std::vector<ps::SArray<float>> in_, out_;
  int pushes_ = 0;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

struct Figure {
  Op op;
  std::string key;  // the JSON name, as `terrace bench wire` names it
  std::vector<double> secs, cpu;
};

void RunWorker(const Options& o) {
  int servers = ps::NumServers();
  Worker w(o);
  // The 2-server figures take `terrace bench wire`'s 2s names; it times
  // push+pull only on two servers, push and pull alone are extra here.
  std::string sfx = servers == 1 ? "" : "_" + std::to_string(servers) + "s";
  std::vector<Figure> figs;
  for (const auto& op : ParseOps(o.ops)) figs.push_back({op.second, op.first + sfx, {}, {}});
  std::vector<std::string> pids = CPUPids();
  w.Do(kPushPull);  // warm-up: creates the keys on the servers
  for (int r = 0; r < o.rounds; ++r) {
    fprintf(stderr, "round %d/%d:", r + 1, o.rounds);
    for (auto& f : figs) {
      double c0 = ProcessCPU(pids);
      auto t0 = std::chrono::steady_clock::now();
      w.Do(f.op);
      std::chrono::duration<double> d = std::chrono::steady_clock::now() - t0;
      f.cpu.push_back(ProcessCPU(pids) - c0);
      f.secs.push_back(d.count());
      fprintf(stderr, " %s %.0f", OpName(f.op), OpBytes(f.op, o.bytes) / 1e6 / d.count());
    }
    fprintf(stderr, " MB/s\n");
  }
  w.Verify();

  std::ostringstream js;
  js << "{\n  \"subject\": \"ps-lite\",\n  \"servers\": " << servers << ",\n  \"workers\": " << ps::NumWorkers()
     << ",\n  \"rounds\": " << o.rounds << ",\n  \"statistic\": \"median\",\n  \"dense_bytes\": " << o.bytes
     << ",\n  \"keys\": " << o.keys << ",\n  \"cpu_processes\": " << pids.size();
  printf("ps-lite wire benchmark, %d server(s), 1 worker, median of %d rounds, %zu MiB as %d keys, MB/s counting both directions:\n",
         servers, o.rounds, o.bytes >> 20, o.keys);
  for (auto& f : figs) {
    double mb = OpBytes(f.op, o.bytes) / 1e6 / Median(f.secs);
    double lo = 1e300, hi = 0;
    for (double s : f.secs) {
      lo = std::min(lo, OpBytes(f.op, o.bytes) / 1e6 / s);
      hi = std::max(hi, OpBytes(f.op, o.bytes) / 1e6 / s);
    }
    double cpu = Median(f.cpu) * 1e3;
    printf("  %-11s %8.0f MB/s  (rounds %.0f-%.0f), %.1f cpu ms per op\n", OpName(f.op), mb, lo, hi, cpu);
    js << ",\n  \"" << f.key << "_mb_s\": " << mb << ",\n  \"" << f.key << "_cpu_ms\": " << cpu;
  }
  js << "\n}\n";
  if (!o.report.empty()) {
    std::ofstream out(o.report);
    out << js.str();
    CHECK(out.good()) << "writing " << o.report;
  }
}

}  // namespace

int main(int argc, char* argv[]) {
  Options o = ParseFlags(argc, argv);
  ps::Start(0);
  if (ps::IsServer()) {
    auto srv = new ps::KVServer<float>(0);
    auto st = new Server(o.bytes / 4 / o.keys);
    using namespace std::placeholders;
    srv->set_request_handle(std::bind(&Server::Handle, st, _1, _2, _3));
    ps::RegisterExitCallback([srv, st]() {
      delete srv;
      delete st;
    });
  }
  if (ps::IsWorker()) RunWorker(o);
  ps::Finalize(0, true);
  return 0;
}
