#!/usr/bin/env python3
"""A third-party client for specline's public API, written with grpcio only.

Generates the Python stubs from proto/specline/v1/generation.proto into a
temporary directory with grpc_tools.protoc (falling back to the system
protoc + grpc_python_plugin when the installed grpc_tools is too old for
proto3 `optional`, as Debian 12's 1.14 is), then against a running gateway:
streams a greedy generation and checks its text and finish reason, and
checks that a malformed request gets INVALID_ARGUMENT naming the field.
Exit code 0 when every check passes.

usage: grpcio_client.py --addr HOST:PORT --proto-root DIR --prompt TEXT
                        --max-tokens N --expect-text-file FILE
"""
import argparse
import importlib
import shutil
import subprocess
import sys
import tempfile

import grpc

PROTO = "specline/v1/generation.proto"


def generate(proto_root, out_dir):
    try:
        from grpc_tools import protoc
        if protoc.main(["grpc_tools.protoc", f"-I{proto_root}", f"--python_out={out_dir}",
                        f"--grpc_python_out={out_dir}", PROTO]) == 0:
            return
        print("grpc_tools.protoc failed; trying protoc + grpc_python_plugin", file=sys.stderr)
    except ImportError:
        pass
    plugin = shutil.which("grpc_python_plugin")
    if not shutil.which("protoc") or not plugin:
        sys.exit("no working grpc_tools.protoc and no protoc + grpc_python_plugin")
    subprocess.run(["protoc", f"-I{proto_root}", f"--python_out={out_dir}",
                    f"--grpc_python_out={out_dir}",
                    f"--plugin=protoc-gen-grpc_python={plugin}", PROTO], check=True)


def load_stubs(proto_root, out_dir):
    generate(proto_root, out_dir)
    sys.path.insert(0, out_dir)
    pb2 = importlib.import_module("specline.v1.generation_pb2")
    pb2_grpc = importlib.import_module("specline.v1.generation_pb2_grpc")
    return pb2, pb2_grpc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--addr", required=True)
    ap.add_argument("--proto-root", required=True)
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--expect-text-file", required=True)
    args = ap.parse_args()
    with open(args.expect_text_file, encoding="utf-8") as f:
        expected = f.read()

    with tempfile.TemporaryDirectory() as tmp:
        pb2, pb2_grpc = load_stubs(args.proto_root, tmp)
        with grpc.insecure_channel(args.addr) as channel:
            stub = pb2_grpc.GenerationStub(channel)

            # 1. A streamed greedy generation.
            req = pb2.GenerateRequest(
                text=args.prompt, max_tokens=args.max_tokens,
                sampling=pb2.SamplingParams(temperature=0.0),
                policy=pb2.DECODING_POLICY_AUTOREGRESSIVE)
            text, tokens, finish, messages = "", 0, None, 0
            for msg in stub.Generate(req, timeout=60):
                messages += 1
                text += msg.text
                tokens += len(msg.token_ids)
                if msg.finish_reason != pb2.FINISH_REASON_UNSPECIFIED:
                    finish = msg.finish_reason
                    usage = msg.usage
            if text != expected:
                sys.exit(f"text differs:\n got: {text!r}\nwant: {expected!r}")
            if finish not in (pb2.FINISH_REASON_STOP, pb2.FINISH_REASON_LENGTH):
                sys.exit(f"bad finish reason {finish}")
            if usage.completion_tokens != tokens:
                sys.exit(f"usage.completion_tokens {usage.completion_tokens} != {tokens}")
            print(f"generate ok: {tokens} tokens in {messages} messages, "
                  f"finish {pb2.FinishReason.Name(finish)}")

            # 2. A malformed request: INVALID_ARGUMENT naming the field.
            bad = pb2.GenerateRequest(text=args.prompt,
                                      sampling=pb2.SamplingParams(top_p=2.0))
            try:
                for _ in stub.Generate(bad, timeout=30):
                    pass
                sys.exit("malformed request was accepted")
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.INVALID_ARGUMENT or "top_p" not in e.details():
                    sys.exit(f"want INVALID_ARGUMENT naming top_p, got {e.code()} {e.details()}")
            print("invalid argument ok")

            # 3. Model info.
            info = stub.GetModelInfo(pb2.ModelInfoRequest(), timeout=30)
            if pb2.DECODING_POLICY_AUTOREGRESSIVE not in info.policies or info.vocab_size <= 0:
                sys.exit(f"unexpected model info {info}")
            print(f"model info ok: {info.arch}, {info.n_stages} stages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
