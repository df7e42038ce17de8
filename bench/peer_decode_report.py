#!/usr/bin/python3
"""Table and JSON for bench/peer_decode.sh: medians over rounds of llama.cpp's
and specline's tok/s per (kind, file, threads, size), and their ratio.

usage: peer_decode_report.py ROWS.jsonl MATMUL.json OUT.json PEER_DIR
"""
import datetime
import json
import platform
import statistics
import sys


def main():
    rows_path, matmul_path, out_path, peer_dir = sys.argv[1:5]
    rows = [json.loads(line) for line in open(rows_path) if line.strip()]
    groups = {}
    for r in rows:
        groups.setdefault((r["kind"], r["file"], r["threads"], r["size"]), []).append(r)
    table = []
    for (kind, f, threads, size), rs in groups.items():
        peer = statistics.median(r["peer"] for r in rs)
        ours = statistics.median(r["specline"] for r in rs)
        table.append({"kind": kind, "file": f, "threads": threads, "size": size,
                      "llama_cpp_tok_s": peer, "specline_tok_s": ours,
                      "ratio": ours / peer if peer else None, "rounds": len(rs)})
    # --baseline: the same decode rows with an earlier build, as a
    # before/after column on the decode rows.
    before = {(t["file"], t["threads"], t["size"]): t for t in table if t["kind"] == "decode_baseline"}
    for t in table:
        if t["kind"] == "decode" and (t["file"], t["threads"], t["size"]) in before:
            b = before[(t["file"], t["threads"], t["size"])]
            t["specline_baseline_tok_s"] = b["specline_tok_s"]
            t["baseline_ratio"] = b["ratio"]
            t["speedup_vs_baseline"] = t["specline_tok_s"] / b["specline_tok_s"]
    # Verification curve: time of one call of m rows relative to m = 1, per
    # engine (rows/s -> seconds per call = m / rate).
    verify = {t["size"]: t for t in table if t["kind"] == "verify_rows"}
    if 1 in verify:
        for m, t in sorted(verify.items()):
            t["llama_cpp_call_vs_m1"] = (m / t["llama_cpp_tok_s"]) / (1 / verify[1]["llama_cpp_tok_s"])
            t["specline_call_vs_m1"] = (m / t["specline_tok_s"]) / (1 / verify[1]["specline_tok_s"])
    matmul = json.load(open(matmul_path))
    bandwidth = matmul.get("bandwidth", [])
    print(f"{'kind':16} {'file':40} {'th':>2} {'size':>5} {'llama.cpp':>10} {'specline':>10} {'ratio':>6}")
    for t in table:
        print(f"{t['kind']:16} {t['file']:40} {t['threads']:>2} {t['size']:>5} "
              f"{t['llama_cpp_tok_s']:>10.2f} {t['specline_tok_s']:>10.2f} {t['ratio']:>6.2f}")
    for t in table:
        if "speedup_vs_baseline" in t:
            print(f"{t['file']:40} t={t['threads']}: baseline {t['specline_baseline_tok_s']:.2f} tok/s "
                  f"(ratio {t['baseline_ratio']:.2f}) -> {t['specline_tok_s']:.2f} "
                  f"(ratio {t['ratio']:.2f}), x{t['speedup_vs_baseline']:.2f}")
    for m, t in sorted(verify.items()):
        if "specline_call_vs_m1" in t:
            print(f"call of {m:2} rows vs 1 row: llama.cpp {t['llama_cpp_call_vs_m1']:.2f}x, "
                  f"specline {t['specline_call_vs_m1']:.2f}x")
    for b in bandwidth:
        print(f"bandwidth: {b}")
    out = {"bench": "peer_decode", "date": datetime.date.today().isoformat(),
           "machine": f"{platform.node()} ({platform.processor() or platform.machine()})",
           "peer": peer_dir, "rows": table, "bandwidth": bandwidth}
    with open(out_path, "w") as f:
        json.dump(out, f, indent=2)
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
