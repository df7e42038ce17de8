"""Tables and JSON for bench/openai_serving.sh: specline's OpenAI API against
llama-server, as measured by aiperf and by specline-loadtest --api openai on
the same prompts, and how far the two tools agree.

  /usr/bin/python3 bench/openai_serving_report.py RUNS_DIR OUT.json
"""
import glob
import json
import os
import re
import sys

SERVERS = ["llama-server", "specline-1stage", "specline-2stage", "pinned-llama-server",
           "pinned-specline"]
PEER = "llama-server"


def aiperf_figures(path):
    d = json.load(open(path))
    def stat(key, q):
        return d.get(key, {}).get(q)
    return {
        "ttft_p50_ms": stat("time_to_first_token", "p50"),
        "ttft_p99_ms": stat("time_to_first_token", "p99"),
        "tpot_p50_ms": stat("inter_token_latency", "p50"),
        "tpot_p99_ms": stat("inter_token_latency", "p99"),
        "itl_p50_ms": stat("inter_chunk_latency", "p50"),
        "output_tok_s": stat("output_token_throughput", "avg"),
        "requests": stat("request_count", "avg"),
    }


def loadtest_figures(run):
    s = run["summary"]
    return {
        "ttft_p50_ms": s["ttft_ms"]["p50"], "ttft_p99_ms": s["ttft_ms"]["p99"],
        "tpot_p50_ms": s["tpot_ms"]["p50"], "tpot_p99_ms": s["tpot_ms"]["p99"],
        "itl_p50_ms": s["itl_ms"]["p50"], "output_tok_s": s["output_token_throughput"],
        "requests": s["completed"], "failed": s["failed"],
    }


def ratio(a, b):
    return round(a / b, 3) if a and b else None


def main():
    runs, out = sys.argv[1], sys.argv[2]
    result = {"closed_loop": {}, "sweep": {}, "ratios": {}, "tool_agreement": {}}
    for server in SERVERS:
        for path in sorted(glob.glob(os.path.join(runs, f"{server}-aiperf-c*/profile_export_aiperf.json"))):
            c = int(re.search(r"-c(\d+)/", path).group(1))
            result["closed_loop"].setdefault(server, {}).setdefault(str(c), {})["aiperf"] = aiperf_figures(path)
        for path in sorted(glob.glob(os.path.join(runs, f"{server}-loadtest-c*.json"))):
            c = int(re.search(r"-c(\d+)\.json$", path).group(1))
            result["closed_loop"].setdefault(server, {}).setdefault(str(c), {})["loadtest"] = \
                loadtest_figures(json.load(open(path))["runs"][0])
        sweep = os.path.join(runs, f"{server}-loadtest-sweep.json")
        if os.path.exists(sweep):
            result["sweep"][server] = {str(r["offered_rate"]): loadtest_figures(r)
                                       for r in json.load(open(sweep))["runs"]}

    failures = {f"{server} c{c} {tool}": fig["failed"]
                 for server, by_c in result["closed_loop"].items() for c, tools in by_c.items()
                 for tool, fig in tools.items() if fig.get("failed")}
    failures.update({f"{server} rate {rate}": fig["failed"] for server, by_rate in result["sweep"].items()
                     for rate, fig in by_rate.items() if fig.get("failed")})
    result["failures"] = failures
    if failures:
        print("FAILED REQUESTS:", failures)
    metrics = ["ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "itl_p50_ms", "output_tok_s"]
    print("closed loop (aiperf | specline-loadtest on the same prompts); ratio = specline / llama-server")
    print(f"{'server':17} {'conc':>4} {'tool':9} " + " ".join(f"{m:>13}" for m in metrics))
    for server, by_c in result["closed_loop"].items():
        for c, tools in sorted(by_c.items(), key=lambda kv: int(kv[0])):
            for tool, fig in tools.items():
                cells = " ".join(f"{fig[m]:13.2f}" if fig.get(m) is not None else f"{'-':>13}" for m in metrics)
                print(f"{server:17} {c:>4} {tool:9} {cells}")
                peer_name = "pinned-llama-server" if server.startswith("pinned-") else PEER
                peer = result["closed_loop"].get(peer_name, {}).get(c, {}).get(tool)
                if server not in (PEER, "pinned-llama-server") and peer:
                    result["ratios"].setdefault(server, {}).setdefault(c, {})[tool] = \
                        {m: ratio(fig.get(m), peer.get(m)) for m in metrics}
            if "aiperf" in tools and "loadtest" in tools:
                result["tool_agreement"].setdefault(server, {})[c] = {
                    m: ratio(tools["loadtest"].get(m), tools["aiperf"].get(m))
                    for m in ["ttft_p50_ms", "tpot_p50_ms", "output_tok_s"]}
    print("\nratios specline / llama-server (latency < 1 and throughput > 1 favour specline)")
    for server, by_c in result["ratios"].items():
        for c, tools in sorted(by_c.items(), key=lambda kv: int(kv[0])):
            for tool, r in tools.items():
                print(f"{server:17} {c:>4} {tool:9} " + " ".join(
                    f"{r[m]:13.2f}" if r[m] is not None else f"{'-':>13}" for m in metrics))
    print("\ntool agreement: specline-loadtest / aiperf on the same server and prompts")
    for server, by_c in result["tool_agreement"].items():
        for c, r in sorted(by_c.items(), key=lambda kv: int(kv[0])):
            print(f"{server:17} {c:>4} " + " ".join(f"{k}={v}" for k, v in r.items()))
    if result["sweep"]:
        print("\nopen-loop sweep (specline-loadtest, Poisson arrivals)")
        for server, by_rate in result["sweep"].items():
            for rate, fig in sorted(by_rate.items(), key=lambda kv: float(kv[0])):
                print(f"{server:17} rate {rate:>5} " + " ".join(f"{m}={fig[m]:.2f}" for m in metrics))
    json.dump(result, open(out, "w"), indent=1)
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
