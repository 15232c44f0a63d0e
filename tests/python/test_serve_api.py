"""test_serve_api.py: `dsv4 serve --demo` (random weights, real tokenizer, CPU) driven end to end
by the official openai package and by curl: models, chat and completions (stream and not),
reasoning on/off, usage chunks, max_tokens, stop strings (on greedy output, so they are known in
advance), seeds, logprobs, tokenize/detokenize, metrics, keep-alive comments during a long
prefill, n choices, logit_bias and penalties, and every kind of bad request answered with a 4xx OpenAI error object while the server
stays healthy. Usage: python3 tests/python/test_serve_api.py [--bin build/dsv4]"""
import json
import os
import subprocess
import sys
import tempfile

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Server, check, histogram, metric, run_tests, wait_idle  # noqa: E402

MODEL = "dsv4-demo"
USER = [{"role": "user", "content": "Say something."}]


def main():
    with Server("--max-request-body-bytes", "2000000", "--sse-keepalive-seconds", "0.2",
                "--max-num-batched-tokens", "128", "--seed", "5") as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=120)

        def models():
            ms = client.models.list()
            check([m.id for m in ms.data] == [MODEL], ms)
            check(ms.data[0].model_extra["max_model_len"] == 8192)
            check(srv.saw_loading, "/health never answered 503 while the demo model was being made")

        def chat_reasoning_on():
            r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=8)
            c = r.choices[0]
            check(c.finish_reason in ("length", "stop"), c)
            check(r.usage.completion_tokens <= 8 and r.usage.prompt_tokens > 3, r.usage)
            check(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens)
            check(r.usage.prompt_tokens_details.cached_tokens == 0)
            # Thinking is on by default: the random text lands in reasoning_content.
            check(c.message.model_extra.get("reasoning_content"), c.message)
            check(r.usage.completion_tokens_details.reasoning_tokens > 0, r.usage)
            check(r.id.startswith("chatcmpl-") and r.object == "chat.completion" and r.model == MODEL)

        def chat_reasoning_off():
            for extra in ({"chat_template_kwargs": {"thinking": False}},
                          {"chat_template_kwargs": {"enable_thinking": False}},
                          {"thinking": {"type": "disabled"}}, {"reasoning_effort": "none"}):
                r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=6, extra_body=extra)
                m = r.choices[0].message
                check(not m.model_extra.get("reasoning_content"), (extra, m))
                check(m.content, (extra, m))
                check(r.usage.completion_tokens_details.reasoning_tokens == 0, r.usage)
            r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=4, reasoning_effort="high")
            check(r.choices[0].message.model_extra.get("reasoning_content"))

        def chat_stream_with_usage():
            chunks = list(client.chat.completions.create(model=MODEL, messages=USER, max_tokens=7, stream=True,
                                                         stream_options={"include_usage": True}))
            check(chunks[0].choices[0].delta.role == "assistant", chunks[0])
            check(chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 7, chunks[-1])
            check(all(c.usage is None for c in chunks[:-1]))
            check(chunks[-2].choices[0].finish_reason == "length", chunks[-2])
            reasoning = "".join(c.choices[0].delta.model_extra.get("reasoning_content") or "" for c in chunks[:-1])
            check(reasoning, "no reasoning deltas")
            plain = list(client.chat.completions.create(model=MODEL, messages=USER, max_tokens=3, stream=True))
            check(all(c.usage is None for c in plain) and plain[-1].choices[0].finish_reason, plain[-1])

        def completions_greedy_seed_logprobs():
            a = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=6, temperature=0,
                                          logprobs=3)
            b = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=6, temperature=0)
            check(a.choices[0].text == b.choices[0].text and a.choices[0].text, (a, b))
            lp = a.choices[0].logprobs
            check(len(lp.tokens) == 6 and len(lp.token_logprobs) == 6 and all(len(t) <= 3 for t in lp.top_logprobs))
            check(all(x <= 0 for x in lp.token_logprobs))
            s1 = client.completions.create(model=MODEL, prompt="Hi", max_tokens=8, seed=123, temperature=1.0)
            s2 = client.completions.create(model=MODEL, prompt="Hi", max_tokens=8, seed=123, temperature=1.0)
            s3 = client.completions.create(model=MODEL, prompt="Hi", max_tokens=8, seed=124, temperature=1.0)
            check(s1.choices[0].text == s2.choices[0].text, (s1, s2))
            check(s1.choices[0].text != s3.choices[0].text, "another seed, the same 8 random tokens")
            streamed = "".join(c.choices[0].text for c in client.completions.create(
                model=MODEL, prompt="Once upon a time", max_tokens=6, temperature=0, stream=True) if c.choices)
            check(streamed == a.choices[0].text, (streamed, a.choices[0].text))

        def several_choices():
            # Choice i samples with seed + i: the choices of seed 123 are the single answers of
            # seeds 123, 124, 125, streamed or not, though they share the prompt's computation.
            singles = [client.completions.create(model=MODEL, prompt="Hi", max_tokens=8, seed=123 + i,
                                                 temperature=1.0).choices[0].text for i in range(3)]
            forked0 = metric(srv.metrics(), "dsv4:forked_prompt_tokens_total")
            r = client.completions.create(model=MODEL, prompt="Hi", max_tokens=8, seed=123, temperature=1.0, n=3)
            check([c.index for c in r.choices] == [0, 1, 2], r)
            check([c.text for c in r.choices] == singles, (r, singles))
            # The prompt was computed once: choices 1 and 2 copied all but its last token.
            forked = metric(srv.metrics(), "dsv4:forked_prompt_tokens_total") - forked0
            check(forked == 2 * (r.usage.prompt_tokens - 1), (forked, r.usage))
            check(r.usage.completion_tokens == 24 and r.usage.total_tokens == r.usage.prompt_tokens + 24, r.usage)
            texts = ["", "", ""]
            chunks = list(client.completions.create(model=MODEL, prompt="Hi", max_tokens=8, seed=123, temperature=1.0,
                                                    n=3, stream=True, stream_options={"include_usage": True}))
            for c in chunks[:-1]:
                texts[c.choices[0].index] += c.choices[0].text
            check(texts == singles, (texts, singles))
            check(chunks[-1].usage.completion_tokens == 24, chunks[-1])
            chat = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=4, n=2, temperature=0)
            check(len(chat.choices) == 2 and chat.choices[0].message == chat.choices[1].message, chat)

        def bias_and_penalties():
            # A +100 bias makes one token the greedy choice every time; a presence penalty on top of
            # +100 biases on three tokens makes each of them win once before repeating any.
            def tokens(text):
                return json.loads(srv.request("POST", "/tokenize", {"prompt": text})[2])["tokens"]

            ids = tokens(" apple banana cherry")
            check(len(ids) == 3, ids)
            r = client.completions.create(model=MODEL, prompt="Hi", max_tokens=5, temperature=0,
                                          logit_bias={str(ids[0]): 100}, extra_body={"ignore_eos": True})
            out = tokens(r.choices[0].text)
            check(out == [ids[0]] * 5, (out, ids))
            r = client.completions.create(model=MODEL, prompt="Hi", max_tokens=3, temperature=0, presence_penalty=2,
                                          logit_bias={str(i): 100 for i in ids}, logprobs=1,
                                          extra_body={"ignore_eos": True})
            check(sorted(r.choices[0].logprobs.tokens) == sorted([" apple", " banana", " cherry"]), r.choices[0])
            r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=4, frequency_penalty=1.0,
                                               extra_body={"repetition_penalty": 1.3})
            check(r.usage.completion_tokens == 4 or r.choices[0].finish_reason == "stop", r)

        def chat_logprobs():
            r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=5, logprobs=True,
                                               top_logprobs=2, temperature=0)
            content = r.choices[0].logprobs.content
            check(len(content) == 5, content)
            check(all(len(t.top_logprobs) == 2 and t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob
                      and isinstance(t.bytes, list) for t in content))
            check(all(abs(t.logprob - t.top_logprobs[0].logprob) < 1e-6 for t in content), "greedy = top-1")

        def max_tokens_one():
            r = client.chat.completions.create(model=MODEL, messages=USER, max_completion_tokens=1)
            check(r.usage.completion_tokens == 1 and r.choices[0].finish_reason == "length", r)

        def stop_strings_on_greedy_text():
            base = client.completions.create(model=MODEL, prompt="The story begins", max_tokens=12, temperature=0)
            text = base.choices[0].text
            # A stop string taken from the middle of the known greedy output (3 characters, so it
            # usually spans a token edge).
            mid = len(text) // 2
            while mid + 3 < len(text) and not text[mid:mid + 3].strip():
                mid += 1
            stop = text[mid:mid + 3]
            check(len(stop) == 3 and stop.strip(), (text, stop))
            r = client.completions.create(model=MODEL, prompt="The story begins", max_tokens=12, temperature=0,
                                          stop=[stop, "zzzz-never"])
            c = r.choices[0]
            check(c.finish_reason == "stop" and c.text == text[:text.index(stop)], (text, stop, c))
            check(c.model_extra.get("stop_reason") == stop, c)
            streamed = "".join(ch.choices[0].text for ch in client.completions.create(
                model=MODEL, prompt="The story begins", max_tokens=12, temperature=0, stop=stop, stream=True)
                if ch.choices)
            check(streamed == c.text, (streamed, c.text))

        def tokenize_detokenize():
            st, _, body = srv.request("POST", "/tokenize", {"prompt": "Hello, world!"})
            t = json.loads(body)
            check(st == 200 and t["count"] == len(t["tokens"]) and t["max_model_len"] == 8192, body)
            st, _, body = srv.request("POST", "/detokenize", {"tokens": t["tokens"]})
            check(st == 200 and json.loads(body)["prompt"] == "Hello, world!", body)
            st, _, body = srv.request("POST", "/tokenize", {"messages": USER, "chat_template_kwargs": {"thinking": False}})
            check(st == 200 and json.loads(body)["count"] > 3, body)

        def keepalive_during_long_prefill():
            long_prompt = " ".join(["lorem ipsum dolor sit amet"] * 500)  # ~2500 tokens, ~20 chunks of 128
            out = subprocess.run(["curl", "-sN", "--max-time", "120", srv.url + "/v1/completions",
                                  "-H", "Content-Type: application/json",
                                  "-d", json.dumps({"prompt": long_prompt, "max_tokens": 1, "stream": True})],
                                 capture_output=True, text=True, check=True).stdout
            check(": keep-alive\n\n" in out, out[:500])
            check(out.rstrip().endswith("data: [DONE]"), out[-200:])

        def errors_are_openai_objects():
            def curl(data, path="/v1/chat/completions", binary=False):
                with tempfile.NamedTemporaryFile(delete=False) as f:
                    f.write(data if binary else data.encode())
                out = subprocess.run(["curl", "-s", "-o", "-", "-w", "\n%{http_code}", "-H",
                                      "Content-Type: application/json", "--data-binary", "@" + f.name,
                                      srv.url + path], capture_output=True, check=True).stdout
                os.unlink(f.name)
                body, code = out.rsplit(b"\n", 1)
                return int(code), json.loads(body)

            many_words = " ".join(["word"] * 9000)
            cases = [
                ("malformed JSON", '{"messages": [', 400, None),
                ("invalid UTF-8", b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', 400, None),
                ("wrong type", '{"messages": [{"role": "user", "content": "x"}], "temperature": "warm"}', 400,
                 "temperature"),
                ("wrong type 2", '{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}', 400, "stream"),
                ("missing messages", '{"model": "dsv4-demo"}', 400, "messages"),
                ("missing prompt", '{"model": "dsv4-demo"}', 400, "prompt", "/v1/completions"),
                ("unknown model", '{"model": "gpt-5", "messages": [{"role": "user", "content": "x"}]}', 404, None),
                ("n past 128", '{"messages": [{"role": "user", "content": "x"}], "n": 129}', 400, "n"),
                ("too-long prompt", json.dumps({"messages": [{"role": "user", "content": many_words}]}), 400,
                 "messages"),
                ("over max_model_len", '{"messages": [{"role": "user", "content": "x"}], "max_tokens": 100000}', 400,
                 "messages"),
                ("body over the limit", json.dumps({"prompt": "x" * 2100000}), 413, None, "/v1/completions"),
                # Copying or dumping this recursed 300k levels deep and killed the server.
                ("deeply nested JSON", '{"messages": [{"role": "user", "content": "x", "extra": ' + "[" * 300000
                 + "]" * 300000 + "}]}", 400, None),
                ("unknown route", "{}", 404, None, "/v1/embeddings"),
            ]
            for case in cases:
                name, data, want, param = case[:4]
                path = case[4] if len(case) > 4 else "/v1/chat/completions"
                code, body = curl(data, path, binary=isinstance(data, bytes))
                check(code == want, (name, code, body))
                err = body["error"]
                check(isinstance(err["message"], str) and err["message"] and "type" in err and "code" in err, body)
                if param:
                    check(err["param"] == param, (name, body))
                if name in ("too-long prompt", "over max_model_len"):
                    check(err["code"] == "context_length_exceeded", body)
                st, _, _ = srv.request("GET", "/health")
                check(st == 200, f"unhealthy after {name}")
            # The official client maps them to its exception types.
            try:
                client.chat.completions.create(model="gpt-5", messages=USER)
                check(False, "no exception")
            except openai.NotFoundError as e:
                check(e.status_code == 404 and e.code == "model_not_found", e)
            try:
                client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": many_words}])
                check(False, "no exception")
            except openai.BadRequestError as e:
                check(e.code == "context_length_exceeded", e)
            ms = srv.metrics()
            check(metric(ms, "dsv4:http_errors_total", status=400) >= 10, "400s not counted")

        def metrics_after_all():
            ms = wait_idle(srv)
            check(metric(ms, "vllm:num_requests_running") == 0 and metric(ms, "vllm:num_requests_waiting") == 0)
            check(metric(ms, "vllm:kv_cache_usage_perc") == 0)
            check(metric(ms, "vllm:request_success_total", finished_reason="length") > 10)
            check(metric(ms, "vllm:request_success_total", finished_reason="stop") >= 2)
            check(metric(ms, "vllm:generation_tokens_total") > 50)
            ttft = histogram(ms, "vllm:time_to_first_token_seconds")
            check(ttft[-1][0] == "+Inf" and ttft[-1][1] == metric(ms, "vllm:time_to_first_token_seconds_count"))
            check(all(a[1] <= b[1] for a, b in zip(ttft, ttft[1:])), "buckets not cumulative")

        run_tests([("models", models), ("chat, reasoning on", chat_reasoning_on),
                   ("chat, reasoning off (4 ways)", chat_reasoning_off),
                   ("chat stream with usage", chat_stream_with_usage),
                   ("completions: greedy, seeds, logprobs, stream", completions_greedy_seed_logprobs),
                   ("n choices", several_choices), ("logit_bias and penalties", bias_and_penalties),
                   ("chat logprobs", chat_logprobs), ("max_tokens 1", max_tokens_one),
                   ("stop strings", stop_strings_on_greedy_text), ("tokenize/detokenize", tokenize_detokenize),
                   ("keep-alive comments during a long prefill", keepalive_during_long_prefill),
                   ("errors", errors_are_openai_objects), ("metrics", metrics_after_all)])
    print("test_serve_api: all passed")


if __name__ == "__main__":
    main()
