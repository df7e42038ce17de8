// Command line of specline-stage.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace specline {

struct StageFlags {
  std::string model;
  std::vector<std::pair<int, int>> layers;  // consecutive [begin, end) ranges
  int stage = 0;                            // index of the first range
  std::string data_listen = "tcp://127.0.0.1:0";
  std::string data_advertise;               // address peers dial; "" = data_listen's
  std::string next;                         // where the last range sends
  std::string host = "127.0.0.1";           // gRPC and /metrics bind here
  int grpc_port = 0;                        // 0 = pick
  int metrics_port = 0;                     // 0 = pick, -1 = off
  std::string port_file;
  int threads = 0;                          // 0 = all hardware threads
  int kv_capacity_tokens = 4096;
  int kv_block_size = 16;
  std::string log_level = "info";
  std::string device = "cpu";  // cpu | cuda | cuda:N
  std::string dtype = "bf16";  // GPU element type: bf16 | f16
  bool cuda_graphs = true;
  // Head directories whose adapters / weight sets this stage hosts, with
  // ids 1, 2, ... in this order (MicroBatch.adapter / .weight_set).
  std::vector<std::string> adapters;
  std::vector<std::string> weight_sets;
  // The internal plane's shared secret (docs/security.md); "" = no internal auth.
  std::string cluster_secret;
};

inline constexpr const char* kStageUsage =
    "usage: specline-stage --model PATH --layers A:B[,C:D...] --next ADDRESS\n"
    "  [--stage I] [--data-listen tcp://HOST:PORT] [--host H] [--grpc-port N]\n"
    "  [--metrics-port N|-1] [--port-file PATH] [--threads N]\n"
    "  [--kv-capacity-tokens N] [--kv-block-size N] [--log-level LEVEL]\n"
    "  [--device cpu|cuda|cuda:N] [--dtype bf16|f16] [--cuda-graphs true|false]\n"
    "  [--adapter DIR[,DIR...]]     heads whose adapters slots may ask for (ids 1, 2,\n"
    "                     ... in this order; CPU only)\n"
    "  [--weight-set DIR[,DIR...]]  heads whose weights slots may run on (ids 1, 2,\n"
    "                     ...; each has its own KV cache of --kv-capacity-tokens)\n"    "  [--cluster-secret-file PATH]  shared secret the scheduler must present on\n"
    "                     control calls and the data-plane handshake (docs/security.md)\n"
    "  [--data-advertise ADDRESS]  address the previous stage / scheduler dials\n"
    "                              (default: the --data-listen address)\n"
    "  [--pipeline FILE]  JSON {\"stages\": [{\"layers\", \"next\", \"data_advertise\"}...]}:\n"
    "                     entry --stage gives the flags not set on the command line\n"
    "                     (one ConfigMap for every pod of a StatefulSet)\n";

// INVALID_ARGUMENT naming the flag on anything malformed or missing.
absl::StatusOr<StageFlags> ParseStageFlags(int argc, char** argv);
// "0:4,4:8" -> {{0,4},{4,8}}; ranges must be non-empty and consecutive.
absl::StatusOr<std::vector<std::pair<int, int>>> ParseLayerRanges(const std::string& text);
// Fills from entry `stage` of the --pipeline file the fields whose flags
// are not in `given`; errors name the file and the entry.
absl::Status ApplyPipelineFile(const std::string& path, const std::map<std::string, std::string>& given,
                               StageFlags* f);

}  // namespace specline
