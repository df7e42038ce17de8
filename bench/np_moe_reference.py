#!/usr/bin/env python3
"""Float64 NumPy forward of a GGUF "llama" file with experts (Mixtral, F32),
for a given token id list: the next token's top 3 log-probabilities and the
closest routing decisions (probability gap between the k-th and (k+1)-th
expert, layer, position). Used to explain a greedy split against llama.cpp
(docs/benchmarks.md, issue 27). Needs the ref venv (numpy, gguf).

usage: np_moe_reference.py FILE.gguf '[ids...]'
"""
import sys, json, math, numpy as np
from gguf import GGUFReader
r = GGUFReader(sys.argv[1])
T = {t.name: np.array(t.data, dtype=np.float64) for t in r.tensors}
def kv(k):
    f = r.fields[k]; return f.parts[f.data[0]][0]
D = int(kv('llama.embedding_length')); H = int(kv('llama.attention.head_count')); KV = int(kv('llama.attention.head_count_kv'))
L = int(kv('llama.block_count')); E = int(kv('llama.expert_count')); K = int(kv('llama.expert_used_count'))
eps = float(kv('llama.attention.layer_norm_rms_epsilon')); theta = float(kv('llama.rope.freq_base'))
hd = D // H
ids = json.loads(sys.argv[2])
n = len(ids)
def rms(x, w): return x / np.sqrt((x*x).mean(-1, keepdims=True) + eps) * w
inv = 1.0 / theta ** (np.arange(0, hd, 2) / hd)
ang = np.arange(n)[:, None] * inv[None, :]
cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
def rope(x):  # interleaved pairs
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x); out[..., 0::2] = a*cos - b*sin; out[..., 1::2] = a*sin + b*cos; return out
x = T['token_embd.weight'][ids]
mins = []
for l in range(L):
    p = f'blk.{l}.'
    h = rms(x, T[p+'attn_norm.weight'])
    q = (h @ T[p+'attn_q.weight'].T).reshape(n, H, hd); k = (h @ T[p+'attn_k.weight'].T).reshape(n, KV, hd)
    v = (h @ T[p+'attn_v.weight'].T).reshape(n, KV, hd)
    q, k = rope(q), rope(k)
    o = np.zeros((n, H, hd))
    for hh in range(H):
        kh = hh // (H // KV)
        s = q[:, hh] @ k[:, kh].T / math.sqrt(hd) + np.triu(np.full((n, n), -np.inf), 1)
        s = np.exp(s - s.max(-1, keepdims=True)); s /= s.sum(-1, keepdims=True)
        o[:, hh] = s @ v[:, kh]
    x = x + o.reshape(n, D) @ T[p+'attn_output.weight'].T
    h = rms(x, T[p+'ffn_norm.weight'])
    lg = h @ T[p+'ffn_gate_inp.weight'].T
    pr = np.exp(lg - lg.max(-1, keepdims=True)); pr /= pr.sum(-1, keepdims=True)
    out = np.zeros_like(h)
    for t in range(n):
        order = np.argsort(-pr[t], kind='stable')
        mins.append((float(pr[t, order[K-1]] - pr[t, order[K]]), l, t))
        top = order[:K]; w = pr[t, top] / pr[t, top].sum()
        for e, we in zip(top, w):
            g = T[p+'ffn_gate_exps.weight'][e] @ h[t]; u = T[p+'ffn_up_exps.weight'][e] @ h[t]
            out[t] += we * (T[p+'ffn_down_exps.weight'][e] @ (g/(1+np.exp(-g))*u))
    x = x + out
xn = rms(x, T['output_norm.weight'])
head = T.get('output.weight', T['token_embd.weight'])
logits = xn[-1] @ head.T
ls = logits - logits.max(); ls = ls - np.log(np.exp(ls).sum())
top = np.argsort(-ls)[:3]
print('numpy top3', [(int(i), round(float(ls[i]), 4)) for i in top])
mins.sort()
print('closest routing decisions (prob gap 2nd vs 3rd, layer, pos):', mins[:3])
