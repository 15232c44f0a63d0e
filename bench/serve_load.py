#!/usr/bin/env python3
"""serve_load.py: a client-side load generator for any OpenAI-compatible server (dsv4 serve, vLLM,
SGLang, ...), measuring what users see: TTFT, TPOT, ITL and E2E latency percentiles, and request
and token throughput. Same metric definitions as `vllm bench serve` (ECOSYSTEM.md §4):
  TTFT  request sent -> first streamed token text
  TPOT  (E2E - TTFT) / (output tokens - 1), per request
  ITL   gaps between successive streamed chunks (per chunk if the server merges tokens)
  E2E   request sent -> last byte
Arrivals: --request-rate R (Poisson, exponential gaps, seeded) or --concurrency N (closed loop: N
clients, each sends its next request when the last one ends). Fixed lengths: prompts are exactly
--input-len random token ids (the /v1/completions token-array form) and generation is forced to
--output-len tokens with ignore_eos; token counts come from the server's usage, not from a client
tokenizer. Standard library only.

  python3 bench/serve_load.py --url http://127.0.0.1:8000 --num-prompts 64 --concurrency 8 \\
      --input-len 128 --output-len 32 --result-json bench/results/x.json --label "..."
"""
import argparse
import http.client
import json
import os
import platform
import random
import subprocess
import threading
import time
import urllib.parse
import urllib.request


def percentile(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * q / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def stats_ms(xs):
    ms = [x * 1000.0 for x in xs]
    return {"mean": sum(ms) / len(ms) if ms else float("nan"), "median": percentile(ms, 50),
            "p90": percentile(ms, 90), "p99": percentile(ms, 99)}


class Result:
    __slots__ = ("ok", "error", "ttft", "itl", "e2e", "prompt_tokens", "output_tokens")

    def __init__(self):
        self.ok, self.error, self.ttft, self.itl, self.e2e = False, "", None, [], None
        self.prompt_tokens = self.output_tokens = 0


def one_request(url, model, prompt_ids, output_len, timeout):
    """Streams one completion; returns a Result with client-side timings."""
    r = Result()
    u = urllib.parse.urlparse(url)
    body = json.dumps({"model": model, "prompt": prompt_ids, "max_tokens": output_len, "temperature": 1.0,
                       "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}})
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
    t0 = time.perf_counter()
    try:
        conn.request("POST", u.path.rstrip("/") + "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            r.error = f"HTTP {resp.status}: {resp.read()[:200]!r}"
            return r
        last = None
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: "):
                continue  # blank separators and ": keep-alive" comments
            data = line[6:]
            if data == b"[DONE]":
                break
            chunk = json.loads(data)
            if "error" in chunk:
                r.error = chunk["error"].get("message", "error event")
                return r
            now = time.perf_counter()
            if chunk.get("usage"):
                r.prompt_tokens = chunk["usage"]["prompt_tokens"]
                r.output_tokens = chunk["usage"]["completion_tokens"]
            if chunk.get("choices") and chunk["choices"][0].get("text"):
                if r.ttft is None:
                    r.ttft = now - t0
                else:
                    r.itl.append(now - last)
                last = now
        r.e2e = time.perf_counter() - t0
        r.ok = r.ttft is not None and r.output_tokens > 0
        if not r.ok and not r.error:
            r.error = "no tokens streamed"
    except Exception as e:  # noqa: BLE001 - a failed request is a data point, not a crash
        r.error = f"{type(e).__name__}: {e}"
    finally:
        conn.close()
    return r


def server_counter(url, name):
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=10) as f:
            for line in f.read().decode().splitlines():
                if line.startswith(name + "{") or line.startswith(name + " "):
                    return float(line.rsplit(" ", 1)[1])
    except Exception:  # noqa: BLE001 - not every server has /metrics
        return None
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", default=None, help="model name (default: the first of /v1/models)")
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=32)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--request-rate", type=float, default=None, help="Poisson arrivals, requests/s")
    mode.add_argument("--concurrency", type=int, default=None, help="closed loop with N clients")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab-range", default="1000,100000", help="random prompt ids are drawn from [lo, hi)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--result-json", default=None)
    ap.add_argument("--label", default="", help="free text stored with the result (hardware, model, ...)")
    a = ap.parse_args()
    if a.request_rate is None and a.concurrency is None:
        a.concurrency = 8

    if a.model is None:
        with urllib.request.urlopen(a.url.rstrip("/") + "/v1/models", timeout=30) as f:
            a.model = json.loads(f.read())["data"][0]["id"]
    rng = random.Random(a.seed)
    lo, hi = (int(x) for x in a.vocab_range.split(","))
    prompts = [[rng.randrange(lo, hi) for _ in range(a.input_len)] for _ in range(a.num_prompts)]
    results = [None] * a.num_prompts
    gen0 = server_counter(a.url, "vllm:generation_tokens_total")

    def run(i):
        results[i] = one_request(a.url, a.model, prompts[i], a.output_len, a.timeout)

    t_start = time.perf_counter()
    threads = []
    if a.concurrency is not None:
        next_i = [0]
        lock = threading.Lock()

        def worker():
            while True:
                with lock:
                    i = next_i[0]
                    next_i[0] += 1
                if i >= a.num_prompts:
                    return
                run(i)

        threads = [threading.Thread(target=worker) for _ in range(a.concurrency)]
        for t in threads:
            t.start()
    else:
        t_next = t_start
        for i in range(a.num_prompts):
            delay = t_next - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            t = threading.Thread(target=run, args=(i,))
            t.start()
            threads.append(t)
            t_next += rng.expovariate(a.request_rate)
    for t in threads:
        t.join()
    duration = time.perf_counter() - t_start

    ok = [r for r in results if r.ok]
    errors = [r.error for r in results if not r.ok]
    out_tokens = sum(r.output_tokens for r in ok)
    in_tokens = sum(r.prompt_tokens for r in ok)
    tpot = [(r.e2e - r.ttft) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    gen1 = server_counter(a.url, "vllm:generation_tokens_total")
    summary = {
        "label": a.label,
        "config": {k: getattr(a, k) for k in ("url", "model", "num_prompts", "input_len", "output_len",
                                              "request_rate", "concurrency", "seed")},
        "client": {"python": platform.python_version(), "host": platform.node(), "cpus": os.cpu_count()},
        "completed": len(ok), "errors": len(errors), "error_examples": errors[:5],
        "duration_s": duration,
        "request_throughput": len(ok) / duration,
        "output_throughput_tok_s": out_tokens / duration,
        "total_throughput_tok_s": (in_tokens + out_tokens) / duration,
        "mean_input_tokens": in_tokens / max(1, len(ok)), "mean_output_tokens": out_tokens / max(1, len(ok)),
        "ttft_ms": stats_ms([r.ttft for r in ok]),
        "tpot_ms": stats_ms(tpot),
        "itl_ms": stats_ms([x for r in ok for x in r.itl]),
        "e2e_ms": stats_ms([r.e2e for r in ok]),
        "server_generation_tokens": None if gen0 is None or gen1 is None else gen1 - gen0,
    }
    try:
        summary["git_rev"] = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                                            text=True, cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except OSError:
        pass

    arrival = (f"Poisson {a.request_rate} req/s" if a.request_rate is not None
               else f"concurrency {a.concurrency}")
    print(f"model {a.model}  {a.num_prompts} prompts  in {a.input_len} / out {a.output_len} tokens  {arrival}")
    print(f"completed {len(ok)}  errors {len(errors)}  duration {duration:.2f} s")
    print(f"throughput: {summary['request_throughput']:.3f} req/s, {summary['output_throughput_tok_s']:.1f} output "
          f"tok/s, {summary['total_throughput_tok_s']:.1f} total tok/s")
    print(f"{'ms':<6}{'mean':>10}{'median':>10}{'p90':>10}{'p99':>10}")
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        s = summary[key]
        print(f"{key[:-3].upper():<6}{s['mean']:>10.1f}{s['median']:>10.1f}{s['p90']:>10.1f}{s['p99']:>10.1f}")
    if summary["server_generation_tokens"] is not None:
        print(f"server counted {summary['server_generation_tokens']:.0f} generated tokens (client: {out_tokens})")
    for e in errors[:5]:
        print("error:", e)
    if a.result_json:
        with open(a.result_json, "w") as f:
            json.dump(summary, f, indent=1)
        print("wrote", a.result_json)
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
