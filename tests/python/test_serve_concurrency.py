"""test_serve_concurrency.py: `dsv4 serve --demo` under load and under cancellation.
- 32 simultaneous streaming chats all complete, and the engine decoded them in shared batches
  (dsv4:iteration_decode_sequences has steps with more than 16 decoding sequences).
- 200 requests at 16 concurrent finish with zero errors.
- A client that disconnects during a long prefill, and one that disconnects mid-stream, are both
  aborted within one engine step: the abort shows in vllm:request_success_total{abort}, the
  prefill stops part way, generation stops, and every KV block is free again.
Afterwards running = 0, waiting = 0 and all blocks are free.
Usage: python3 tests/python/test_serve_concurrency.py [--bin build/dsv4]"""
import json
import os
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Server, check, histogram, metric, run_tests, wait_idle  # noqa: E402

MODEL = "dsv4-demo"


def open_stream(port, body):
    """Sends a POST to /v1/chat/completions on a raw socket and returns it (nothing read yet)."""
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return s


def read_until(sock, marker, limit=60):
    buf = b""
    deadline = time.time() + limit
    while marker not in buf:
        check(time.time() < deadline, f"no {marker!r} in {buf[:300]!r}")
        chunk = sock.recv(65536)
        check(chunk, f"connection closed before {marker!r}: {buf[:300]!r}")
        buf += chunk
    return buf


def main():
    with Server("--max-num-seqs", "32", "--max-num-batched-tokens", "256") as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=300)

        def thirty_two_streams():
            results = [None] * 32
            barrier = threading.Barrier(32)

            def one(i):
                barrier.wait()
                text, finish, usage = "", None, None
                for c in client.chat.completions.create(
                        model=MODEL, messages=[{"role": "user", "content": f"Stream number {i}, go."}],
                        max_tokens=12, stream=True, stream_options={"include_usage": True},
                        extra_body={"ignore_eos": True, "chat_template_kwargs": {"thinking": False}}):
                    if c.usage:
                        usage = c.usage
                    if c.choices:
                        text += c.choices[0].delta.content or ""
                        finish = c.choices[0].finish_reason or finish
                results[i] = (text, finish, usage.completion_tokens)

            threads = [threading.Thread(target=one, args=(i,)) for i in range(32)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            check(all(r is not None and r[1] == "length" and r[2] == 12 for r in results), results)
            ms = srv.metrics()
            h = dict(histogram(ms, "dsv4:iteration_decode_sequences"))
            shared = h["+Inf"] - h["16"]
            check(shared > 0, f"no step decoded more than 16 sequences together: {h}")
            print(f"     decode batch sizes (cumulative buckets): {h}")

        def two_hundred_at_sixteen():
            def one(i):
                r = client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": f"Request {i}"}], max_tokens=4,
                    extra_body={"ignore_eos": True})
                return r.usage.completion_tokens

            t0 = time.time()
            with ThreadPoolExecutor(16) as pool:
                outs = list(pool.map(one, range(200)))
            check(outs == [4] * 200, outs)
            print(f"     200 requests in {time.time() - t0:.1f} s")
            ms = wait_idle(srv)
            check(metric(ms, "vllm:num_requests_running") == 0 and metric(ms, "vllm:num_requests_waiting") == 0)
            check(metric(ms, "dsv4:kv_blocks_free") == metric(ms, "dsv4:kv_blocks_total"))
            check(metric(ms, "vllm:request_success_total", finished_reason="error") == 0)
            check(metric(ms, "vllm:request_success_total", finished_reason="abort") == 0)
            check(metric(ms, "vllm:request_success_total", finished_reason="length") >= 232)

        def disconnect_during_prefill():
            before = srv.metrics()
            aborts0 = metric(before, "vllm:request_success_total", finished_reason="abort")
            computed0 = metric(before, "dsv4:computed_tokens_total")
            steps_time0 = metric(before, "dsv4:engine_step_seconds_sum")
            steps0 = metric(before, "dsv4:engine_step_seconds_count")
            prompt = " ".join(["alpha beta gamma delta epsilon"] * 400)  # ~2000 tokens: 8+ chunks of 256
            for stream in (True, False):
                s = open_stream(srv.port, {"model": MODEL, "messages": [{"role": "user", "content": prompt}],
                                           "max_tokens": 4, "stream": stream})
                if stream:
                    read_until(s, b"\r\n\r\n")  # headers: the request is in the engine
                # Wait until the prefill has started (tokens are being computed), then hang up.
                deadline = time.time() + 30
                while metric(srv.metrics(), "dsv4:computed_tokens_total") == computed0:
                    check(time.time() < deadline, "prefill never started")
                    time.sleep(0.02)
                s.close()
                t_close = time.time()
                while metric(srv.metrics(), "vllm:request_success_total", finished_reason="abort") == aborts0:
                    check(time.time() - t_close < 10, "the abort never happened")
                    time.sleep(0.02)
                aborts0 += 1
                ms = wait_idle(srv)
                computed = metric(ms, "dsv4:computed_tokens_total") - computed0
                check(0 < computed < 1800, f"prefill ran {computed} tokens of ~2000: not stopped part way")
                check(metric(ms, "dsv4:kv_blocks_free") == metric(ms, "dsv4:kv_blocks_total"))
                computed0 = metric(ms, "dsv4:computed_tokens_total")
            # Within one engine step: each abort landed within the longest step, not after the prefill.
            lat = histogram(ms, "dsv4:request_abort_latency_seconds")
            step_mean = (metric(ms, "dsv4:engine_step_seconds_sum") - steps_time0) / max(
                1, metric(ms, "dsv4:engine_step_seconds_count") - steps0)
            abort_mean = metric(ms, "dsv4:request_abort_latency_seconds_sum") / metric(
                ms, "dsv4:request_abort_latency_seconds_count")
            check(abort_mean <= 2 * step_mean + 0.05, f"abort latency {abort_mean:.3f} s vs step {step_mean:.3f} s")
            print(f"     abort latency mean {abort_mean * 1000:.0f} ms, prefill step mean {step_mean * 1000:.0f} ms")
            check(metric(ms, "dsv4:client_disconnects_total") >= 2)

        def disconnect_mid_stream():
            before = srv.metrics()
            aborts0 = metric(before, "vllm:request_success_total", finished_reason="abort")
            s = open_stream(srv.port, {"model": MODEL, "messages": [{"role": "user", "content": "Talk a lot."}],
                                       "max_tokens": 4000, "stream": True, "ignore_eos": True})
            buf = read_until(s, b"data: ")
            while buf.count(b"data: ") < 6:
                buf += s.recv(65536)
            s.close()
            t_close = time.time()
            while metric(srv.metrics(), "vllm:request_success_total", finished_reason="abort") == aborts0:
                check(time.time() - t_close < 10, "the abort never happened")
                time.sleep(0.01)
            ms = wait_idle(srv)
            gen = metric(ms, "vllm:generation_tokens_total")
            time.sleep(0.5)
            check(metric(srv.metrics(), "vllm:generation_tokens_total") == gen, "still generating after the abort")
            check(metric(ms, "vllm:request_generation_tokens_sum") - metric(before, "vllm:request_generation_tokens_sum")
                  < 100, "the stream ran on long after the client left")
            check(metric(ms, "dsv4:kv_blocks_free") == metric(ms, "dsv4:kv_blocks_total"))
            check(metric(ms, "vllm:num_requests_running") == 0)

        run_tests([("32 simultaneous streams share decode batches", thirty_two_streams),
                   ("200 requests at 16 concurrent, zero errors", two_hundred_at_sixteen),
                   ("disconnect during prefill (stream and non-stream)", disconnect_during_prefill),
                   ("disconnect mid-stream", disconnect_mid_stream)])
        ms = wait_idle(srv)
        check(metric(ms, "vllm:num_requests_running") == 0 and metric(ms, "vllm:num_requests_waiting") == 0)
        check(metric(ms, "dsv4:kv_blocks_free") == metric(ms, "dsv4:kv_blocks_total"))
    print("test_serve_concurrency: all passed")


if __name__ == "__main__":
    main()
